"""Int8 kernels, bit-exact with TensorFlow Lite's reference kernels (LiteRT's BUILTIN_REF).

Requantization (TFLite's MultiplyByQuantizedMultiplier of an int32 accumulator, + the output
zero point, clamped to ``activation_min``/``activation_max``, which also keep results in int8).
``rounding`` "double" is the reference build: SaturatingRoundingDoublingHighMul h = floor((acc *
m + 2**30) / 2**31) (round half up), then RoundingDivideByPOT(h, e) (round half away from zero);
"single" is TFLITE_SINGLE_ROUNDING (one rounding shift of the 64-bit product, as TOSA);
"xnnpack" is LiteRT's XNNPACK path (float32 scales rounded to even; add/sub its own fixed-point
scheme), per kernel. A multiplier/shift pair is TFLite's QuantizeMultiplier output (shift > 0:
left, e = -shift otherwise). TFLite's int32 overflows (undefined behaviour in its C++) are not
reproduced: there results saturate. ``_Requant`` runs it on float64, exactly: the result is a
monotone function of acc, so only the accumulators whose result is not saturated (and one beyond
each end) must be computed exactly, and for those acc * m has at most 53 bits whenever e <= 12
or so (checked per call from the arguments; otherwise it runs on int64, as ``_rescale``). The
double rounding is then floor(acc * m / 2**(31 + e) + 1/2 + 2**-(e + 1)) (one floor: the nested
floors of integer divisions merge) where a negative h cannot reach an output (output zero point
<= activation_min, as after a ReLU), else two floors: h, then floor(h * (1 + eps) / 2**e + 1/2),
the tiny eps * h (|eps * h| < 1/4) doing RoundingDivideByPOT's -1 for negative h. The result +
128 is clamped in float64, converted to uint8 (truncation is floor there) and its top bit
flipped: the int8 value.

Convolution and linear layers run their multiply-accumulate on float32 BLAS, exactly: they sum
raw int8 products x * w with |x| <= 128, so a chunk of the reduction whose weights have
sum(|w|) <= 2**17 per output channel only passes through integers of magnitude <= 2**24, all
exact in float32, in any order; the input zero point comes off afterwards, as input_zero_point *
sum(w) folded into the bias (a convolution's padding holds input_zero_point, so padded taps add
w * 0). Longer reductions are split into such chunks (chosen from the weights at load) summed in
float64. Convolutions work in tiles of output rows (im2col columns built from the input padded
in int8), depthwise ones per tap over float32 phase planes in channel blocks, both sized by
``budget`` as the float convolution's; short reductions (FUSED_TERMS) run their matmul in
float64 instead, the weights carrying each channel's requantization scale and its offset (on a
row of ones), also exactly. Elementwise kernels work in blocks of ``BLOCK`` elements. Weights,
biases and tables are constants, folded once at load.

ADD and MUL int8 are one 65536-entry table of both input bytes (computed at load, TFLite's
arithmetic on every pair); elementwise int8 functions (TFLite's LOGISTIC, TANH, HARD_SWISH) a
256-entry table computed at export; SOFTMAX takes a table of its fixed-point exponentials.

Arguments the export computes come from ``toolchain.quantize.fixed_point``: its ``*_requant``
functions return them as TFLite's Prepare functions derive them, its ``*_table`` functions the
tables.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_py.kernels import Bound, Kernel, linalg, long_loops, nn, rules, run_all
from runtime_py.kernels._common import (
    CLIP,
    FLOAT,
    INT8,
    WORKSPACE_ALIGN,
    Workspace,
    copier,
    expand_param,
    workspace_bytes,
)
from runtime_py.kernels.indexing import constant_pad_nd

IntList = Sequence[int] | int
Ints = Sequence[int] | int  # one value per channel, or one for all
INT8_MIN, INT8_MAX = -128, 127
CHUNK_WEIGHT = 2**24 // 128  # sum(|w|) per output channel whose float32 sums of w * x are exact
EXACT = 2**53  # integers below this are exact in float64

# Elementwise kernels work in blocks of this many elements (their workspaces: a few of them);
# a budget can shrink the blocks down to MIN_BLOCK.
BLOCK, MIN_BLOCK = 8192, 256
# Convolution tiles (im2col columns and accumulators of some output rows) and depthwise channel
# blocks are sized to fit in this many bytes unless a budget says less; without a budget, a
# tile of fewer than GEMM_COLUMNS output positions may take up to twice as many (BLAS is
# 1.1-1.2x slower on resnet18's 3x3 convolutions in half the columns).
TILE_BYTES, GEMM_COLUMNS = 256 * 1024, 128
# Convolutions reducing over at most FUSED_TERMS terms, into at least twice as many output
# channels (or FUSED_CHANNELS) and over at least FUSED_POSITIONS output positions, run their
# matmul in float64 with the requantization's scale and offset in the weights: twice the
# float32 matmul's cost, less than the per-channel passes it saves (there; measured on the
# layers of mobilenet_v2 and resnet18).
FUSED_TERMS, FUSED_CHANNELS, FUSED_POSITIONS = 128, 32, 32

_AVG_POOL = nn.KERNELS["aten::avg_pool2d.out"]


def _channels(values: Ints, shape: tuple[int, ...]) -> np.ndarray:
    """Per-channel (or single) ints as an int64 array of ``shape`` (broadcasting to the
    accumulator along its channel axis)."""
    return np.asarray(values, np.int64).reshape(shape if np.size(values) > 1 else ())


Regions = dict[str, tuple[tuple[int, ...], type]]  # named workspace regions, in order


def _take(scratch: np.ndarray | None, regions: Regions) -> dict[str, np.ndarray]:
    """The named regions carved from ``scratch`` (fresh arrays without one)."""
    ws = Workspace(scratch)
    return {name: ws.take(shape, dtype) for name, (shape, dtype) in regions.items()}


def _rest(scratch: np.ndarray | None, regions: Regions) -> np.ndarray | None:
    """What ``scratch`` has left after ``regions``, for another kernel's workspace."""
    return None if scratch is None else scratch[workspace_bytes(*regions.values()):]


def _rescale(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int,
             rounding: str, tmp: np.ndarray) -> Bound:
    """acc = MultiplyByQuantizedMultiplier(acc, multiplier, shift) in place; ``tmp``: an int64
    array of acc's shape. Double rounding: the left shift, then 2 * SaturatingRoundingDoubling-
    HighMul as ((acc * m + 2**30) >> 30) & ~1 (it cannot saturate: m >= 0), then
    RoundingDivideByPOT(s, e) = (2s + 2**e - (s < 0)) >> (e + 1), round half away from zero for
    every e >= 0, with -(s < 0) = 2s >> 63. All same-dtype ufuncs: no casting buffers, and no
    masked loops (numpy's ``where=`` is several times slower on mixed signs)."""
    m, s = np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)
    if rounding == "single":
        total = 31 - s
        return run_all(functools.partial(np.multiply, acc, m, acc),
                         functools.partial(np.add, acc, np.left_shift(1, total - 1), acc),
                         functools.partial(np.right_shift, acc, total, acc))
    if rounding != "double":
        raise ValueError(f"rounding {rounding!r}: 'double' or 'single'")
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    steps = [functools.partial(np.left_shift, acc, left, acc)] if left.any() else []
    return run_all(*steps, functools.partial(np.multiply, acc, m, acc),
                     functools.partial(np.add, acc, 1 << 30, acc),
                     functools.partial(np.right_shift, acc, 30, acc),
                     functools.partial(np.bitwise_and, acc, -2, acc),
                     functools.partial(np.right_shift, acc, 63, tmp),
                     functools.partial(np.add, acc, tmp, acc),
                     functools.partial(np.add, acc, np.left_shift(1, right), acc),
                     functools.partial(np.right_shift, acc, right + 1, acc))


def _store(acc: np.ndarray, zero_point: int, low: int, high: int, out: np.ndarray,
           result: np.ndarray | None = None) -> Bound:
    """out = clamp(acc + zero_point, low, high) (acc is modified; ``result``: the view of acc
    that out receives, acc itself by default)."""
    return run_all(functools.partial(np.add, acc, zero_point, acc),
                     functools.partial(CLIP, acc, np.int64(low), np.int64(high), acc),
                     functools.partial(np.copyto, out, acc if result is None else result,
                                       casting="unsafe"))


def _requantize(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int,
                rounding: str, tmp: np.ndarray, zero_point: int, low: int, high: int,
                out: np.ndarray) -> Bound:
    """The rescale of acc (``_rescale``), then its store into out (``_store``)."""
    return run_all(_rescale(acc, multiplier, shift, rounding, tmp),
                     _store(acc, zero_point, low, high, out))


def _folded_bias(bias: np.ndarray | None, weight: np.ndarray, zero_point: int) -> np.ndarray:
    """Per output channel (weight's first dim): bias (0 if None) - zero_point * sum(w), int64."""
    sums = weight.reshape(weight.shape[0], -1).sum(axis=1, dtype=np.int64)
    return (0 if bias is None else bias.astype(np.int64)) - zero_point * sums


# -- requantization -------------------------------------------------------------------------------


def _per_channel(values: Ints | Sequence[float], channels: int) -> list:
    """One value per channel (a single value repeated)."""
    values = list(values) if isinstance(values, Sequence | np.ndarray) else [values]
    return values * channels if len(values) == 1 else values


@dataclass(frozen=True)
class _Form:
    """One channel's requantized value as floor((acc * mm + k) / 2**d) (+ the output zero
    point), two floors when ``two``; ``reach``: a bound on |acc| over the accumulators whose
    output is not saturated, and one beyond each end."""

    mm: int
    d: int
    k: int
    two: bool
    e: int
    reach: int


def _form(multiplier: int, shift: int, rounding: str, zero_point: int, low: int,
          high: int) -> _Form:
    """TFLite's requantization of one channel in floor form (module docstring)."""
    if rounding == "single":
        mm, d, k, two, e = multiplier, 31 - shift, 1 << (30 - shift), False, 0
    elif rounding == "double":
        e = max(-shift, 0)
        mm, d, two = multiplier << max(shift, 0), 31 + e, e > 0 and zero_point > low
        k = (1 << 30) + (1 << (30 + e) if e and not two else 0)
    else:
        raise ValueError(f"rounding {rounding!r}: 'double' or 'single'")
    levels = max(abs(low - zero_point), abs(high - zero_point)) + 2
    reach = ((levels << d) + mm) // mm + 2 if mm else 0
    return _Form(mm, d, k, two, e, reach)


_ZP = 128  # results are formed as uint8 values, output + 128


def _exact(form: _Form, bias: int = 0) -> bool:
    """Whether the float64 requantization of this channel is exact (module docstring), with
    ``bias`` folded into its offset (no bias: added to the accumulator beforehand)."""
    if (form.reach + abs(bias)) * form.mm >= EXACT:  # acc * mm, or (acc - bias) * mm
        return False
    k = (1 << 30) if form.two else form.k + (255 << form.d)  # + the output zero point + 128
    if max(form.reach, abs(bias)) * form.mm + k >= EXACT:  # the offset, and its sums
        return False
    if not form.two:
        return True
    h = (form.reach * form.mm >> 31) + 2  # bound on |h| where it matters
    bits = h.bit_length() + 2
    return h * ((1 << bits) + 1) + (256 << (bits + form.e)) < EXACT


def _requant_mode(multiplier: Ints, shift: Ints, rounding: str, zero_point: int, low: int,
                  high: int) -> str:
    """"floor" or "floor2" (float64, one or two floors), "int64" (``_rescale``), "round"
    (``rounding`` "float") or "even32" (``rounding`` "xnnpack")."""
    if rounding in _SCALED:
        return _SCALED[rounding]
    channels = max(np.size(multiplier), np.size(shift))
    forms = [_form(int(m), int(s), rounding, zero_point, low, high) for m, s in zip(
        _per_channel(multiplier, channels), _per_channel(shift, channels), strict=True)]
    if not all(map(_exact, forms)):
        return "int64"
    return "floor2" if any(f.two for f in forms) else "floor"


def _requant_regions(mode: str, shape: tuple[int, ...]) -> Regions:
    """The requantization's workspace for accumulators of ``shape``: its float64 values ("round":
    and their integer parts), or int64 ones and a temporary. The first region has 8 bytes per
    accumulator: a multiply-accumulate may use it as its float32 product before."""
    if mode == "int64":
        return {"acc": (shape, np.int64), "tmp": (shape, np.int64)}
    return {"v": (shape, np.float64),
            **({"w": (shape, np.float64)} if mode in ("round", "even32") else {})}


REQUANT_BYTES = {"floor": 8, "floor2": 8, "round": 16, "even32": 16, "int64": 16}  # per acc.
# roundings that requantize by a float scale, not a fixed-point multiplier -> their mode:
# "float": LiteRT's reference FULLY_CONNECTED (float64, half away from zero); "xnnpack":
# XNNPACK's fp32 requantization (the accumulator and the product in float32, half to even)
_SCALED = {"float": "round", "xnnpack": "even32"}


def _uniform(values: list, dtype: type) -> np.ndarray:
    """Per-channel constants as an array; 0-d when all are equal (numpy's loops are faster on a
    scalar)."""
    array = np.asarray(values, dtype)
    return array[:1].reshape(()) if array.size and (array == array.flat[0]).all() else array


Layout = Callable[[np.ndarray], np.ndarray]  # per-channel 1-D array -> its broadcasting view


class _Requant:
    """The requantization of one call's accumulators (exact integers, bias not added), its
    per-channel constants made at load: ``bind`` gives the calls for one block of them."""

    def __init__(self, multiplier: Ints, shift: Ints, rounding: str, zero_point: int,
                 low: int, high: int, bias: np.ndarray, effective_scale: Sequence[float] | None
                 = None) -> None:
        channels = bias.size
        self.mode = _requant_mode(multiplier, shift, rounding, zero_point, low, high)
        self.low, self.high, self.zero_point, self.rounding = low, high, zero_point, rounding
        self.bias = _uniform(bias.tolist(), np.int64)
        self.folded = False
        if self.mode in ("round", "even32"):
            dtype = np.float64 if self.mode == "round" else np.float32
            self.scale = _uniform(_per_channel(effective_scale, channels), dtype)
            self.fbias = _uniform(bias.tolist(), np.float64)
            return
        ms, ss = _per_channel(multiplier, channels), _per_channel(shift, channels)
        if self.mode == "int64":
            self.multiplier, self.shift = _uniform(ms, np.int64), _uniform(ss, np.int64)
            return
        forms = [_form(int(m), int(s), rounding, zero_point, low, high)
                 for m, s in zip(ms, ss, strict=True)]
        biases = [int(b) for b in bias.tolist()]
        self.folded = all(_exact(f, b) for f, b in zip(forms, biases, strict=True))
        self.forms, self.biases = forms, biases
        if self.mode == "floor":
            scales = [math.ldexp(f.mm, -f.d) for f in forms]
            offsets = [math.ldexp((b if self.folded else 0) * f.mm + f.k
                                  + (zero_point + _ZP << f.d), -f.d)
                       for f, b in zip(forms, biases, strict=True)]
        else:  # floor2: h, then h * (1 + eps) / 2**e + 1/2 + zero point
            scales = [math.ldexp(f.mm, -31) for f in forms]
            offsets = [math.ldexp((b if self.folded else 0) * f.mm + (1 << 30), -31)
                       for f, b in zip(forms, biases, strict=True)]
            bits = [((f.reach * f.mm >> 31) + 2).bit_length() + 2 for f in forms]
            self.scale2 = _uniform([math.ldexp((1 << n) + 1, -n - f.e)
                                    for f, n in zip(forms, bits, strict=True)], np.float64)
            self.offset2 = np.float64(0.5 + zero_point + _ZP)
        self.scales, self.offsets = scales, offsets
        self.scale, self.offset = _uniform(scales, np.float64), _uniform(offsets, np.float64)
        self.fbias = _uniform(biases, np.float64)

    def fused(self, weight: np.ndarray) -> np.ndarray | None:
        """(O, K + 1) float64 weights: weight (O, K) times each channel's scale, its offset as a
        last column. Their matmul with the columns and a row of ones is the requantization's
        first step (acc * scale + offset), exactly: every product and partial sum is a multiple
        of the channel's 2**-d below 2**53 of them (checked here, None otherwise)."""
        if self.mode not in ("floor", "floor2") or not self.folded:
            return None
        sums = np.abs(weight.astype(np.int64)).sum(axis=1).tolist()
        for f, b, total in zip(self.forms, self.biases, sums, strict=True):
            k = (1 << 30) if f.two else f.k + (255 << f.d)
            if (total * 128 + abs(b)) * f.mm + k >= EXACT:
                return None
        return np.concatenate([weight * np.asarray(self.scales)[:, None],
                               np.asarray(self.offsets)[:, None]], axis=1)

    def bind(self, src: np.ndarray, buf: dict[str, np.ndarray], out: np.ndarray,
             layout: Layout, result: Callable[[np.ndarray], np.ndarray] = lambda a: a,
             scaled: bool = False) -> list[Bound]:
        """The calls requantizing the accumulators ``src`` (float32, or float64 / int64: then
        ``buf``'s "v" / "acc" itself, holding them) into ``out`` (int8, of ``result``'s shape):
        ``buf``, the regions of ``_requant_regions``; ``layout``, how per-channel constants
        broadcast against src; ``result``, the view of a src-shaped array that goes to out (its
        valid part); ``scaled``: "v" holds acc * scale + offset already (``fused``)."""

        def channel(c: np.ndarray) -> np.ndarray:
            return c if c.ndim == 0 else layout(c)

        if self.mode == "int64":
            acc = buf["acc"]
            calls = [] if src is acc else [functools.partial(np.copyto, acc, src,
                                                             casting="unsafe")]
            calls += [functools.partial(np.add, acc, channel(self.bias), acc),
                      _rescale(acc, channel(self.multiplier), channel(self.shift),
                               self.rounding, buf["tmp"]),
                      _store(acc, self.zero_point, self.low, self.high, out, result(acc))]
            return calls
        v = buf["v"]
        calls = [] if src is v else [copier(v, src)]
        if not self.folded:
            calls.append(functools.partial(np.add, v, channel(self.fbias), v))
        if self.mode == "even32":  # float32(acc) * scale, rounded to even
            w = buf["w"].reshape(-1).view(np.float32)[:v.size].reshape(v.shape)
            calls += [functools.partial(np.copyto, w, v, casting="same_kind"),
                      functools.partial(np.multiply, w, channel(self.scale), w),
                      functools.partial(np.rint, w, w),
                      copier(v, w),
                      functools.partial(np.add, v, np.float64(self.zero_point + _ZP), v)]
        elif not scaled:
            calls.append(functools.partial(np.multiply, v, channel(self.scale), v))
        if self.mode == "round":  # std::round(acc * scale): trunc(v) + trunc(2 * frac(v))
            w = buf["w"]
            calls += [functools.partial(np.modf, v, out=(v, w)),
                      functools.partial(np.add, v, v, v),
                      functools.partial(np.trunc, v, v),
                      functools.partial(np.add, v, w, v),
                      functools.partial(np.add, v, np.float64(self.zero_point + _ZP), v)]
        elif self.mode != "even32":
            if not scaled:
                calls.append(functools.partial(np.add, v, channel(self.offset), v))
            if self.mode == "floor2":
                calls += [functools.partial(np.floor, v, v),
                          functools.partial(np.multiply, v, channel(self.scale2), v),
                          functools.partial(np.add, v, self.offset2, v)]
        u8 = out.view(np.uint8)
        low, high = np.float64(self.low + _ZP), np.float64(self.high + _ZP)
        calls += [functools.partial(CLIP, v, low, high, v),
                  functools.partial(np.copyto, u8, result(v), casting="unsafe"),
                  functools.partial(np.bitwise_xor, u8, np.uint8(0x80), u8)]
        return calls


# -- blocks ---------------------------------------------------------------------------------------


def _block_size(size: int, per_element: Sequence[int], budget: int | None) -> int:
    """Elements per block of an elementwise kernel: BLOCK (at most ``size``), or as many as
    workspace regions of ``per_element`` bytes each fit in ``budget`` (at least MIN_BLOCK)."""
    block = max(1, min(BLOCK, size))
    if budget is not None:
        fit = (budget - WORKSPACE_ALIGN * len(per_element)) // sum(per_element)
        block = min(block, max(MIN_BLOCK, fit))
    return block


def _within(scratch: np.ndarray | None, regions: Callable[[int | None], Regions]) -> Regions:
    """The workspace regions a kernel works in: ``regions(None)``, its own choice, or if the
    planned ``scratch`` is smaller (a board's budget), ``regions(scratch.nbytes)``."""
    full = regions(None)
    if scratch is not None and scratch.nbytes < workspace_bytes(*full.values()):
        return regions(scratch.nbytes)
    return full


def _blocks(shape: tuple[int, ...], block: int) -> list[tuple]:
    """Index tuples cutting an array of ``shape`` into C-order pieces of at most ``block``
    elements: whole trailing dims and a range of the next one (of a C-contiguous array, each
    piece is contiguous)."""
    inner, axis = 1, len(shape)
    while axis > 0 and inner * shape[axis - 1] <= block:
        axis -= 1
        inner *= shape[axis]
    if axis == 0:
        return [()]
    step = max(1, block // inner)
    return [(*outer, slice(j, j + step)) for outer in itertools.product(
        *map(range, shape[:axis - 1])) for j in range(0, shape[axis - 1], step)]


def _prefix(buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The first prod(shape) elements of the contiguous ``buf``, in ``shape``."""
    return buf.reshape(-1)[:math.prod(shape)].reshape(shape)


def _pieces(out: np.ndarray, inputs: Sequence[np.ndarray], buffers: Sequence[np.ndarray],
            block: int) -> list[tuple[np.ndarray, ...]]:
    """Per block of out (``_blocks``): (out block, each input's block, each buffer's), inputs
    broadcast to out's shape, buffers (flat workspace regions of ``block`` elements, a trailing
    dim kept) shaped like the block."""
    views = [np.broadcast_to(x, out.shape) for x in inputs]
    pieces = []
    for index in _blocks(out.shape, block):
        target = out[index]
        pieces.append((target, *(x[index] for x in views),
                       *(_prefix(b, target.shape + b.shape[1:]) for b in buffers)))
    return pieces


def _loop(pieces: Sequence[tuple[np.ndarray, ...]], step: Callable[..., None]) -> Bound:
    """The call running ``step(*piece)`` for each piece."""

    def run() -> None:
        for piece in pieces:
            step(*piece)

    return run


# -- quantize / dequantize ------------------------------------------------------------------------


def quantize_per_tensor(input: np.ndarray, scale: float, zero_point: int, quant_min: int,
                        quant_max: int, rounding: str = "double", *, out: np.ndarray,
                        scratch: np.ndarray | None = None) -> Bound:
    """TFLite QUANTIZE: clamp(std::round(x / scale) + zero_point) with float32 division and
    rounding half away from zero, in blocks: v = clamp(x / scale, quant_min - zero_point,
    quant_max - zero_point) (the clamp commutes with rounding to integers, and saturates
    |x / scale| >= 2**31, where TFLite's int32 conversion is undefined), round(v) = trunc(v) +
    trunc(2 * (v - trunc(v))), exact. ``rounding`` "xnnpack" is XNNPACK's f32 to qs8 convert:
    x times the float32 reciprocal of scale, rounded to even."""
    buf = _take(scratch, _within(scratch, functools.partial(_quantize_regions, input.shape)))
    scale, low, high = (np.float32(v) for v in (scale, quant_min - zero_point,
                                                 quant_max - zero_point))
    zero = np.float32(zero_point)
    if rounding == "xnnpack":
        inverse = np.float32(1) / scale

        def to_even(o: np.ndarray, x: np.ndarray, v: np.ndarray, _: np.ndarray) -> None:
            np.multiply(x, inverse, v)
            CLIP(v, low, high, v)
            np.rint(v, v)
            np.add(v, zero, v)
            np.copyto(o, v, casting="unsafe")

        return _loop(_pieces(out, [input], [buf["v"], buf["t"]], buf["v"].size), to_even)

    def step(o: np.ndarray, x: np.ndarray, v: np.ndarray, t: np.ndarray) -> None:
        np.divide(x, scale, v)
        CLIP(v, low, high, v)
        np.trunc(v, t)
        np.subtract(v, t, v)
        np.add(v, v, v)
        np.trunc(v, v)
        np.add(t, v, t)
        np.add(t, zero, t)
        np.copyto(o, t, casting="unsafe")

    return _loop(_pieces(out, [input], [buf["v"], buf["t"]], buf["v"].size), step)


def _quantize_regions(shape: tuple[int, ...], budget: int | None = None) -> Regions:
    """quantize_per_tensor's workspace: x / scale and its integer part, per block."""
    block = (_block_size(math.prod(shape), (4, 4), budget),)
    return {"v": (block, np.float32), "t": (block, np.float32)}


def _quantize_scratch(input: np.ndarray, budget: int | None = None, **_: object) -> int:
    return workspace_bytes(*_quantize_regions(input.shape, budget).values())


def dequantize_per_tensor(input: np.ndarray, scale: float, zero_point: int, quant_min: int,
                          quant_max: int, *, out: np.ndarray) -> Bound:
    """TFLite DEQUANTIZE: float(double(scale) * (q - zero_point)). The float32 product is the
    same number: the exact product has at most 33 significant bits, rounded once either way.
    In blocks of out (no workspace): q copied as float32, zero_point subtracted, scaled."""
    del quant_min, quant_max  # the input is int8 already
    zero, factor = np.float32(zero_point), np.float32(scale)

    def step(o: np.ndarray, x: np.ndarray) -> None:
        np.copyto(o, x)
        np.subtract(o, zero, o)
        np.multiply(o, factor, o)

    return _loop(_pieces(out, [input], [], BLOCK), step)


def dequantize_per_channel(input: np.ndarray, scales: np.ndarray,
                           zero_points: np.ndarray | None, axis: int, quant_min: int,
                           quant_max: int, *, out: np.ndarray) -> Bound:
    """torch's quantized_decomposed.dequantize_per_channel: (q - zero_points) * scales along
    ``axis`` (no zero points: q * scales), in float32."""
    del quant_min, quant_max
    shape = [1] * input.ndim
    shape[axis] = -1
    steps = [copier(out, input)]
    if zero_points is not None:
        steps.append(functools.partial(np.subtract, out,
                                       zero_points.astype(np.float32).reshape(shape), out=out))
    return run_all(*steps, functools.partial(np.multiply, out, scales.reshape(shape), out))


# -- convolution and fully connected --------------------------------------------------------------


def _chunks(weight: np.ndarray) -> list[tuple[int, int]]:
    """Ranges of a reduction (weight: (outputs, terms)) whose float32 sums of w * x are exact:
    sum(|w|) <= CHUNK_WEIGHT for every output, taken greedily (one term always fits)."""
    terms = weight.shape[1]
    if terms == 0 or weight.shape[0] == 0:
        return [(0, terms)]
    sums = np.abs(weight.astype(np.int64)).cumsum(axis=1)
    chunks, start = [], 0
    while start < terms:
        before = sums[:, start - 1:start] if start else 0
        fits = ((sums[:, start:] - before) <= CHUNK_WEIGHT).all(axis=0)
        end = start + (len(fits) if fits.all() else max(1, int(np.argmin(fits))))
        chunks.append((start, end))
        start = end
    return chunks


def _phase_taps(x: np.ndarray, win: nn._Window, value: int, planes: np.ndarray
                ) -> tuple[list[np.ndarray], Bound]:
    """(each tap's run over ``planes``, the float32 phase planes of ``x`` padded with
    ``value`` (``nn._phase_planes``), the call filling them from the int8 x)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = win.kernel, win.stride, win.padding, win.dilation
    hq, wq = planes.shape[-2:]
    run = win.out_hw[0] * wq
    fills = [nn._phase_fill(x, planes[p * sw + q], (p - ph, q - pw), (sh, sw))
             for p in range(sh) for q in range(sw)]
    flat = planes.reshape(*planes.shape[:-2], hq * wq)
    taps = []
    for r, q in ((i * dh, j * dw) for i in range(kh) for j in range(kw)):
        start = r // sh * wq + q // sw
        taps.append(flat[r % sh * sw + q % sw, ..., start:start + run])
    padding = np.float32(value)

    def fill() -> None:
        planes.fill(padding)
        for dst, src in fills:
            np.copyto(dst, src)

    return taps, fill


@dataclass(frozen=True)
class _ConvPlan:
    """Geometry and workspace of one conv2d_int8 call (cached per call signature). ``kind``:
    "gemm" (im2col columns of ``tile`` output rows, one float32 BLAS matmul per reduction chunk;
    ``channels_last``: the requantization on (N, rows * W, O), for tiles narrower than their
    channels), "fused" (the same in float64 with a row of ones, for short reductions: the
    weights carry the requantization's per-channel scale and offset, ``_Requant.fused``),
    "phase" (depthwise, per tap over phase planes of ``tile`` channels at a time) or "last"
    (depthwise per tap over a channels-last copy: small images with many channels)."""

    kind: str
    win: nn._Window
    pads: tuple[tuple[int, int], ...] | None
    tile: int
    channels_last: bool
    regions: tuple[tuple[str, tuple[int, ...], type], ...]
    flat: bool = False  # the columns come from "padded" as the float kernel's (nn.flat_source)

    @property
    def nbytes(self) -> int:
        return workspace_bytes(*((shape, dtype) for _, shape, dtype in self.regions))

    def take(self, scratch: np.ndarray | None) -> dict[str, np.ndarray]:
        """The plan's regions, flat (tiles and blocks take prefixes of them)."""
        ws = Workspace(scratch)
        return {name: ws.take((math.prod(shape),), dtype) for name, shape, dtype in self.regions}


def _named(regions: Regions) -> tuple[tuple[str, tuple[int, ...], type], ...]:
    return tuple((name, shape, dtype) for name, (shape, dtype) in regions.items())


@functools.lru_cache(maxsize=1024)
def _conv_plan(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, ...],
               padding: tuple[int, ...], dilation: tuple[int, ...], groups: int, mode: str,
               budget: int | None = None) -> _ConvPlan:
    """The plan of a call: tiles and blocks fit in TILE_BYTES, or in ``budget`` (at least one
    output row, or one channel). Depthwise convolutions (whose taps' float32 sums are exact
    whatever the weights) go per tap, channels-last when the image is smaller than the channel
    count and the budget allows, as the float convolution."""
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape
    out_hw = tuple((size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in
                   zip((h, w), (kh, kw), stride, padding, dilation, strict=True))
    win = nn._Window((kh, kw), stride, padding, dilation, out_hw)
    pads = win.pads((h, w))
    (ho, wo), per = out_hw, REQUANT_BYTES[mode]
    room = TILE_BYTES if budget is None else budget
    if groups == c == o and kh * kw * INT8_MAX <= CHUNK_WEIGHT:
        if ho * wo < c:
            padded = nn._padded_shape(x_shape, pads or ((0, 0), (0, 0)))
            acc = (n, ho, wo, c)
            plan = _ConvPlan("last", win, pads, c, True, _named(
                {"padded": ((n, *padded[2:], c), np.float32), "sums": (acc, np.float32),
                 **_requant_regions(mode, acc)}))
            if budget is None or plan.nbytes <= budget:
                return plan
        planes, run = nn._phase_planes((n, 1), win)
        each = math.prod(planes) * 4 + math.prod(run) * (4 + per)
        tile = max(1, min(c, (room - 4 * WORKSPACE_ALIGN) // each))
        planes, run = nn._phase_planes((n, tile), win)
        return _ConvPlan("phase", win, pads, tile, False, _named(
            {"planes": (planes, np.float32), "sums": (run, np.float32),
             **_requant_regions(mode, run)}))
    flat = pads is not None and nn.flat_columns(win)
    padded = ({"padded": (nn.flat_shape(x_shape, win) if flat else
                          nn._padded_shape(x_shape, pads), np.int8)} if pads else {})
    fixed = workspace_bytes(*padded.values()) + 4 * WORKSPACE_ALIGN
    terms = c * kh * kw
    fused = (groups == 1 and terms <= FUSED_TERMS and o >= min(2 * terms, FUSED_CHANNELS)
             and ho * wo >= FUSED_POSITIONS and mode in ("floor", "floor2"))
    row = n * wo * ((terms + 1) * 8 + o * 8 if fused else terms * 4 + o * (4 + per))
    rows = max(1, min(ho, (room - fixed) // row))
    if budget is None and rows * wo < GEMM_COLUMNS:  # narrow matmuls are slow: up to 2x room
        rows = max(rows, min(ho, -(-GEMM_COLUMNS // wo), (2 * room - fixed) // row))
    channels_last = not fused and rows * wo < o
    acc = (n, rows * wo, o) if channels_last else (n, o, rows * wo)
    if fused:
        return _ConvPlan("fused", win, pads, rows, channels_last, _named(
            {**padded, "cols": ((n, terms + 1, rows * wo), np.float64), "v": (acc, np.float64)}),
            flat)
    return _ConvPlan("gemm", win, pads, rows, channels_last, _named(
        {**padded, "cols": ((n, c, kh, kw, rows, wo), np.float32), "part": (acc, np.float32),
         **_requant_regions(mode, acc)}), flat)


def _geometry(stride: IntList, padding: IntList, dilation: IntList) -> tuple[tuple[int, ...], ...]:
    return tuple(expand_param(v, 2) for v in (stride, padding, dilation))


def _float32_view(region: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The first elements of an 8-byte-per-element flat region as float32 of ``shape``."""
    return _prefix(region.view(np.float32), shape)


def _gemm_conv(x: np.ndarray, weight: np.ndarray, groups: int, zero_point: int,
               plan: _ConvPlan, req: _Requant, buf: dict[str, np.ndarray],
               out: np.ndarray) -> list[Bound]:
    """Per tile of output rows: im2col columns (float32, from the int8 input padded with its
    zero point), a float32 matmul per reduction chunk (chunks summed in float64 / int64), the
    requantization into out."""
    n, c = x.shape[:2]
    o = weight.shape[0]
    (kh, kw), (ho, wo) = plan.win.kernel, plan.win.out_hw
    columns, calls = nn.column_source(x, plan.win, plan.pads, plan.flat, buf.get("padded"),
                                      zero_point)
    k = c // groups * kh * kw
    if plan.kind == "fused":
        return calls + _fused_conv(columns, weight.reshape(o, k), zero_point, plan, req, buf,
                                   out)
    grouped = weight.reshape(groups, o // groups, k)
    chunks = _chunks(weight.reshape(o, k))
    weights = [np.ascontiguousarray(grouped[:, :, k0:k1], np.float32) for k0, k1 in chunks]
    regions = {name: buf[name] for name in ("v", "w", "acc", "tmp") if name in buf}
    calls += nn.prefetches(ho * wo, weights)  # their float32 weights, as float convolutions'
    for r0 in range(0, ho, plan.tile):
        rows = min(plan.tile, ho - r0)
        s = rows * wo
        cols = _prefix(buf["cols"], (n, c, kh, kw, rows, wo))
        terms = cols.reshape(n, groups, k, s)
        part = _prefix(buf["part"], (n, groups, o // groups, s))
        gemms = [linalg.product(wc, terms[:, :, k0:k1], part)
                 for (k0, k1), wc in zip(chunks, weights, strict=True)]
        part = part.reshape(n, o, s)
        dst = out[:, :, r0:r0 + rows].reshape((n, o, s), copy=False)
        if plan.channels_last:  # the matmul as (O, K) @ (K, S), BLAS's faster side
            part, dst, layout = part.transpose(0, 2, 1), dst.transpose(0, 2, 1), _last
        else:
            layout = _column
        tile = {name: _prefix(region, part.shape) for name, region in regions.items()}
        calls += nn.column_copies(cols, columns[..., r0:r0 + rows, :], plan.win, plan.flat,
                                  zero_point)
        calls += _chunk_sums(gemms, part, tile)
        calls += req.bind(tile.get("v", tile.get("acc")) if len(gemms) > 1 else part, tile,
                          dst, layout)
    return calls


def _fused_conv(columns: np.ndarray, weight: np.ndarray, zero_point: int, plan: _ConvPlan,
                req: _Requant, buf: dict[str, np.ndarray], out: np.ndarray) -> list[Bound]:
    """Per tile of output rows: float64 im2col columns and a row of ones, one float64 matmul
    with ``_Requant.fused`` weights giving acc * scale + offset, the rest of the
    requantization. If the weights cannot carry them exactly (a large bias, left shifts), the
    matmul of the raw weights gives acc (exact: at most FUSED_TERMS terms) for the whole
    requantization. Over few output positions the weights are first streamed into the caches
    (``nn.prefetches``)."""
    n, o, terms = out.shape[0], out.shape[1], weight.shape[1]
    (kh, kw), (ho, wo) = plan.win.kernel, plan.win.out_hw
    fused = req.fused(weight)
    weights = weight.astype(np.float64) if fused is None else fused
    used = terms if fused is None else terms + 1
    calls = nn.prefetches(ho * wo, [weights])
    for r0 in range(0, ho, plan.tile):
        rows = min(plan.tile, ho - r0)
        s = rows * wo
        cols = _prefix(buf["cols"], (n, terms + 1, s))
        v = _prefix(buf["v"], (n, o, s))
        calls += nn.column_copies(cols[:, :terms].reshape(n, -1, kh, kw, rows, wo),
                                  columns[..., r0:r0 + rows, :], plan.win, plan.flat, zero_point)
        if fused is not None:
            calls.append(copier(cols[:, terms], np.float64(1)))
        calls.append(linalg.product(weights, cols[:, :used], v))
        dst = out[:, :, r0:r0 + rows].reshape((n, o, s), copy=False)
        calls += req.bind(v, {"v": v}, dst, _column, scaled=fused is not None)
    return calls


def _last(c: np.ndarray) -> np.ndarray:
    """Per-channel constants for channels-last accumulators."""
    return c


def _column(c: np.ndarray) -> np.ndarray:
    """Per-channel constants for (..., channels, positions) accumulators."""
    return c.reshape(-1, 1)


def _chunk_sums(gemms: Sequence[Bound], part: np.ndarray, buf: dict[str, np.ndarray]
                ) -> list[Bound]:
    """The matmuls of a reduction's chunks (each writing the sums ``part`` views); more than
    one: summed exactly into buf's float64 "v" (mixed-dtype adds, in the long-loop buffers) or
    int64 "acc", of part's shape."""
    if len(gemms) == 1:
        return list(gemms)
    calls = []
    if "acc" in buf:
        acc, tmp = buf["acc"], buf["tmp"]
        for i, gemm in enumerate(gemms):
            calls += [gemm, functools.partial(np.copyto, tmp if i else acc, part,
                                              casting="unsafe")]
            if i:
                calls.append(functools.partial(np.add, acc, tmp, acc))
        return calls
    v = buf["v"]
    for i, gemm in enumerate(gemms):
        calls += [gemm, functools.partial(np.add, v, part, v) if i else
                  copier(v, part)]
    return calls


def _requant_buffers(buf: dict[str, np.ndarray], shape: tuple[int, ...]
                     ) -> dict[str, np.ndarray]:
    """The requantization's regions of ``buf`` (``_requant_regions``), shaped for one block."""
    return {name: _prefix(buf[name], shape) for name in ("v", "w", "acc", "tmp") if name in buf}


def _product(buf: dict[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """A float32 product buffer for a multiply-accumulate, in the requantization's first region
    (8 bytes per accumulator; free until the accumulation is done)."""
    return _float32_view(buf["v"] if "v" in buf else buf["acc"], shape)


def _depthwise_conv(x: np.ndarray, weight: np.ndarray, zero_point: int, plan: _ConvPlan,
                    req: _Requant, buf: dict[str, np.ndarray], out: np.ndarray) -> list[Bound]:
    """Per block of channels: taps * weights summed in float32 over the phase planes of the
    input padded with its zero point (exact: at most 1032 products of magnitude <= 2**14),
    then requantized into out (the planes' extra columns dropped)."""
    n, c = x.shape[:2]
    ho, wo = plan.win.out_hw
    taps_w = weight.reshape(c, -1).astype(np.float32)
    calls = []
    for c0 in range(0, c, plan.tile):
        c1 = min(c, c0 + plan.tile)
        planes_shape, run_shape = nn._phase_planes((n, c1 - c0), plan.win)
        sums = _prefix(buf["sums"], run_shape)
        taps, fill = _phase_taps(x[:, c0:c1], plan.win, zero_point,
                                 _prefix(buf["planes"], planes_shape))
        weights = [taps_w[c0:c1, t].reshape(-1, 1) for t in range(len(taps))]
        calls.append(nn.tap_mac(fill, taps, weights, sums, _product(buf, run_shape)))
        valid = functools.partial(_valid_columns, (n, c1 - c0, ho, planes_shape[-1]), wo)
        calls += req.bind(sums, _requant_buffers(buf, run_shape), out[:, c0:c1],
                          functools.partial(_channel_block, c0, c1), valid)
    return calls


def _valid_columns(shape: tuple[int, ...], width: int, run: np.ndarray) -> np.ndarray:
    """The output positions of a phase-plane run: its rows, without the extra columns."""
    return run.reshape(shape)[..., :width]


def _channel_block(c0: int, c1: int, c: np.ndarray) -> np.ndarray:
    """Per-channel constants of channels c0:c1, for (..., channels, positions) accumulators."""
    return c[c0:c1].reshape(-1, 1)


def _depthwise_last(x: np.ndarray, weight: np.ndarray, zero_point: int, plan: _ConvPlan,
                    req: _Requant, buf: dict[str, np.ndarray], out: np.ndarray) -> list[Bound]:
    """Per tap over a channels-last float32 copy of the input padded with its zero point (for a
    small image with many channels every numpy loop then runs over the channels), then
    requantized into out."""
    n, c = x.shape[:2]
    ho, wo = plan.win.out_hw
    (top, bottom), (left, right) = plan.pads or ((0, 0), (0, 0))
    padded_shape = nn._padded_shape(x.shape, ((top, bottom), (left, right)))
    padded = _prefix(buf["padded"], (n, *padded_shape[2:], c)).transpose(0, 3, 1, 2)
    fill = constant_pad_nd(x, (left, right, top, bottom), zero_point, out=padded)
    taps = [tap.transpose(0, 2, 3, 1) for _, _, tap in plan.win.taps(padded)]
    weights = list(np.ascontiguousarray(weight.reshape(c, -1).T, np.float32))
    shape = (n, ho, wo, c)
    sums = _prefix(buf["sums"], shape)
    return [nn.tap_mac(fill, taps, weights, sums, _product(buf, shape)),
            *req.bind(sums, _requant_buffers(buf, shape), out.transpose(0, 2, 3, 1), _last)]


def conv2d_int8(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                stride: IntList, padding: IntList, dilation: IntList, groups: int,
                input_zero_point: int, output_zero_point: int, output_multiplier: Ints,
                output_shift: Ints, activation_min: int, activation_max: int,
                rounding: str = "double", effective_scale: Sequence[float] | None = None, *,
                out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """TFLite CONV_2D / DEPTHWISE_CONV_2D int8 (per-channel symmetric weights) on NCHW: acc =
    bias + sum of w * (x - input_zero_point) over the taps inside the input (padding adds
    nothing), rescaled per output channel, + output_zero_point, clamped. Depthwise is groups ==
    C (depth multiplier O / C). The sums are float32 matmuls over im2col tiles or per-tap
    multiply-accumulates, exact, and the requantization runs per tile (module docstring);
    ``rounding`` "xnnpack" rescales by the float32 ``effective_scale`` as XNNPACK does."""
    mode = _requant_mode(output_multiplier, output_shift, rounding, output_zero_point,
                         activation_min, activation_max)
    key = (input.shape, weight.shape, *_geometry(stride, padding, dilation), groups, mode)
    plan = _conv_plan(*key)
    if scratch is not None and scratch.nbytes < plan.nbytes:  # a budget: smaller tiles
        plan = _conv_plan(*key, scratch.nbytes)
    req = _Requant(output_multiplier, output_shift, rounding, output_zero_point, activation_min,
                   activation_max, _folded_bias(bias, weight, input_zero_point), effective_scale)
    build = {"gemm": functools.partial(_gemm_conv, groups=groups),
             "fused": functools.partial(_gemm_conv, groups=groups), "phase": _depthwise_conv,
             "last": _depthwise_last}[plan.kind]
    return long_loops(run_all(*build(input, weight, zero_point=input_zero_point, plan=plan,
                                       req=req, buf=plan.take(scratch), out=out)))


def _conv_scratch(input: np.ndarray, weight: np.ndarray, stride: IntList, padding: IntList,
                  dilation: IntList, groups: int, output_zero_point: int,
                  output_multiplier: Ints, output_shift: Ints, activation_min: int,
                  activation_max: int, rounding: str = "double", budget: int | None = None,
                  **_: object) -> int:
    mode = _requant_mode(output_multiplier, output_shift, rounding, output_zero_point,
                         activation_min, activation_max)
    return _conv_plan(input.shape, weight.shape, *_geometry(stride, padding, dilation), groups,
                      mode, budget).nbytes


def _linear_regions(input_shape: tuple[int, ...], n: int, mode: str,
                    budget: int | None = None) -> Regions:
    """linear_int8's workspace, for as many input rows at a time as fit in TILE_BYTES (or
    ``budget``; at least one): the float32 rows, their float32 products, the requantization's
    regions."""
    k, total = input_shape[-1], math.prod(input_shape[:-1])
    room = TILE_BYTES if budget is None else budget
    rows = max(1, min(total, (room - 4 * WORKSPACE_ALIGN) // (4 * k + (4 + REQUANT_BYTES[mode])
                                                              * n)))
    return {"cols": ((rows, k), np.float32), "part": ((rows, n), np.float32),
            **_requant_regions(mode, (rows, n))}


def linear_int8(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                input_zero_point: int, output_zero_point: int, output_multiplier: Ints,
                output_shift: Ints, activation_min: int, activation_max: int,
                rounding: str = "double", effective_scale: Sequence[float] | None = None, *,
                out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """TFLite FULLY_CONNECTED int8 (symmetric weights, per tensor or per output channel):
    acc = bias + sum of w * (x - input_zero_point) over the last dim (float32 matmuls of the raw
    int8 values over exact chunks of the columns, summed in float64 / int64), then requantized,
    in tiles of rows. ``rounding`` "float" is LiteRT's reference FULLY_CONNECTED (since 2025):
    std::round(double(acc) * effective_scale[c]), effective_scale = double(in) * double(w[c])
    / double(out) (``output_multiplier``/``output_shift`` are then unused); "xnnpack" is
    XNNPACK's: float32(acc) * float32 effective_scale[c], rounded to even."""
    k, n = weight.shape[1], weight.shape[0]
    req = _Requant(output_multiplier, output_shift, rounding, output_zero_point, activation_min,
                   activation_max, _folded_bias(bias, weight, input_zero_point), effective_scale)
    regions = _within(scratch, functools.partial(_linear_regions, input.shape, n, req.mode))
    buf = {name: region.reshape(-1) for name, region in _take(scratch, regions).items()}
    chunks = _chunks(weight)
    weights = [np.ascontiguousarray(weight[:, k0:k1].T, np.float32) for k0, k1 in chunks]
    calls = []
    for index in _blocks(input.shape[:-1], regions["cols"][0][0]):
        rows = input[index]
        m = math.prod(rows.shape[:-1])
        cols, part = _prefix(buf["cols"], (m, k)), _prefix(buf["part"], (m, n))
        gemms = [linalg.product(cols[:, k0:k1], wc, part)
                 for (k0, k1), wc in zip(chunks, weights, strict=True)]
        tile = _requant_buffers(buf, (m, n))
        calls += [copier(cols.reshape(rows.shape), rows),
                  *_chunk_sums(gemms, part, tile),
                  *req.bind(tile.get("v", tile.get("acc")) if len(gemms) > 1 else part, tile,
                            out[index].reshape(m, n), _last)]
    return long_loops(run_all(*calls))


def _linear_scratch(input: np.ndarray, weight: np.ndarray, output_zero_point: int,
                    output_multiplier: Ints, output_shift: Ints, activation_min: int,
                    activation_max: int, rounding: str = "double", budget: int | None = None,
                    **_: object) -> int:
    mode = _requant_mode(output_multiplier, output_shift, rounding, output_zero_point,
                         activation_min, activation_max)
    return workspace_bytes(*_linear_regions(input.shape, weight.shape[0], mode,
                                            budget).values())


# -- elementwise ----------------------------------------------------------------------------------


def _pair_values() -> tuple[np.ndarray, np.ndarray]:
    """Every (self, other) int8 pair as int64 arrays, in the order of the 16-bit index
    (self's byte << 8) | other's byte."""
    values = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int64)
    return np.repeat(values, 256), np.tile(values, 256)


def _clamped(values: np.ndarray, low: int, high: int) -> np.ndarray:
    """An int8 table of ``values`` clamped to [low, high], read-only."""
    table = np.clip(values, low, high).astype(np.int8)
    table.flags.writeable = False
    return table


def _finish(acc: np.ndarray, multiplier: int, shift: int, zero_point: int, low: int,
            high: int) -> np.ndarray:
    """The int8 table: acc requantized (double rounding), read-only."""
    table = np.empty(acc.shape, np.int8)
    _requantize(acc, multiplier, shift, "double", np.empty_like(acc), zero_point, low, high,
                table)()
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=256)
def add_table(self_zero_point: int, other_zero_point: int, output_zero_point: int,
              left_shift: int, self_multiplier: int, self_shift: int, other_multiplier: int,
              other_shift: int, output_multiplier: int, output_shift: int, activation_min: int,
              activation_max: int, rounding: str = "double") -> np.ndarray:
    """TFLite ADD int8 on every pair of inputs (``_pair_values``): each input's (q - zero_point)
    << left_shift rescaled by its multiplier, the sum rescaled by the output's, +
    output_zero_point, clamped (``add_int8`` for rounding "xnnpack")."""
    if rounding == "xnnpack":
        a, b = _pair_values()
        acc = ((a - self_zero_point) * self_multiplier + (b - other_zero_point) * other_multiplier
               + (1 << (output_shift - 1))) >> output_shift
        return _clamped(acc + output_zero_point, activation_min, activation_max)
    scaled = []
    for q, zp, m, s in zip(_pair_values(), (self_zero_point, other_zero_point),
                           (self_multiplier, other_multiplier), (self_shift, other_shift),
                           strict=True):
        x = (q - zp) << left_shift
        _rescale(x, m, s, "double", np.empty_like(x))()
        scaled.append(x)
    return _finish(scaled[0] + scaled[1], output_multiplier, output_shift, output_zero_point,
                   activation_min, activation_max)


@functools.lru_cache(maxsize=256)
def mul_table(self_zero_point: int, other_zero_point: int, output_zero_point: int,
              output_multiplier: int, output_shift: int, activation_min: int,
              activation_max: int, rounding: str = "double",
              effective_scale: float | None = None) -> np.ndarray:
    """TFLite MUL int8 on every pair of inputs (``_pair_values``): (q1 - zp1) * (q2 - zp2)
    rescaled, + output_zero_point, clamped (``mul_int8`` for rounding "xnnpack")."""
    a, b = _pair_values()
    if rounding == "xnnpack":
        product = ((a - self_zero_point) * (b - other_zero_point)).astype(np.float32)
        scaled = np.rint(product * np.float32(effective_scale)).astype(np.int64)
        return _clamped(scaled + output_zero_point, activation_min, activation_max)
    return _finish((a - self_zero_point) * (b - other_zero_point), output_multiplier,
                   output_shift, output_zero_point, activation_min, activation_max)


def _binary_regions(size: int, budget: int | None = None) -> Regions:
    """add/mul_int8's workspace, per block: the two input bytes of each element side by side (a
    little-endian 16-bit index), the index as intp (np.take's)."""
    block = _block_size(size, (2, np.dtype(np.intp).itemsize), budget)
    return {"pair": ((block, 2), np.uint8), "index": ((block,), np.intp)}


def _binary_scratch(self: np.ndarray, other: np.ndarray, budget: int | None = None,
                    **_: object) -> int:
    size = math.prod(np.broadcast_shapes(np.shape(self), np.shape(other)))
    return workspace_bytes(*_binary_regions(size, budget).values())


def _pair_lookup(self: np.ndarray, other: np.ndarray, table: np.ndarray, out: np.ndarray,
                 scratch: np.ndarray | None) -> Bound:
    """out = table[(byte(self) << 8) | byte(other)] (broadcasting), per block."""
    buf = _take(scratch, _within(scratch, functools.partial(_binary_regions, out.size)))
    pieces = [(o, a, b, pair[..., 1], pair[..., 0], pair.view("<u2")[..., 0], index)
              for o, a, b, pair, index in _pieces(
                  out, [self.view(np.uint8), other.view(np.uint8)],
                  [buf["pair"], buf["index"]], buf["index"].size)]

    def step(o: np.ndarray, a: np.ndarray, b: np.ndarray, high: np.ndarray, low: np.ndarray,
             pair: np.ndarray, index: np.ndarray) -> None:
        np.copyto(high, a)
        np.copyto(low, b)
        np.copyto(index, pair)
        np.take(table, index, out=o, mode="wrap")

    return _loop(pieces, step)


def add_int8(self: np.ndarray, other: np.ndarray, self_zero_point: int, other_zero_point: int,
             output_zero_point: int, left_shift: int, self_multiplier: int, self_shift: int,
             other_multiplier: int, other_shift: int, output_multiplier: int,
             output_shift: int, activation_min: int, activation_max: int,
             rounding: str = "double", *, out: np.ndarray,
             scratch: np.ndarray | None = None) -> Bound:
    """TFLite ADD int8 (broadcasting): each input's (q - zero_point) << left_shift rescaled by
    its multiplier, the sum rescaled by the output's, + output_zero_point, clamped; ``rounding``
    "xnnpack" is XNNPACK's qs8 add: the sum of (q - zero_point) * multiplier shifted right by
    output_shift with rounding (the other shifts and output_multiplier unused, 0). As a lookup
    in the 65536-entry table of every input pair (``add_table``, made at load). out may be
    self or other (each block's inputs are read before it is written)."""
    table = add_table(self_zero_point, other_zero_point, output_zero_point, left_shift,
                      self_multiplier, self_shift, other_multiplier, other_shift,
                      output_multiplier, output_shift, activation_min, activation_max, rounding)
    return _pair_lookup(self, other, table, out, scratch)


def mul_int8(self: np.ndarray, other: np.ndarray, self_zero_point: int, other_zero_point: int,
             output_zero_point: int, output_multiplier: int, output_shift: int,
             activation_min: int, activation_max: int, rounding: str = "double",
             effective_scale: float | None = None, *, out: np.ndarray,
             scratch: np.ndarray | None = None) -> Bound:
    """TFLite MUL int8 (broadcasting): (q1 - zp1) * (q2 - zp2) rescaled, + output_zero_point,
    clamped; ``rounding`` "xnnpack" is XNNPACK's qs8 multiply: the product times the float32
    ``effective_scale``, rounded to even. As a lookup in the 65536-entry table of every input
    pair (``mul_table``, made at load). out may be self or other."""
    table = mul_table(self_zero_point, other_zero_point, output_zero_point, output_multiplier,
                      output_shift, activation_min, activation_max, rounding, effective_scale)
    return _pair_lookup(self, other, table, out, scratch)


# -- pooling and reduction ------------------------------------------------------------------------


def _pool_geometry(kernel_size: IntList, stride: IntList, padding: IntList
                   ) -> tuple[tuple[int, ...], ...]:
    """(kernel, stride, padding) as (h, w) pairs; an empty stride is the kernel, as in torch."""
    return tuple(expand_param(v, 2) for v in (kernel_size, stride or kernel_size, padding))


def _valid_taps(size: int, kernel: int, stride: int, padding: int, n: int) -> np.ndarray:
    """Per output position along one axis: the window's taps inside the input."""
    start = np.arange(n) * stride - padding
    return np.minimum(start + kernel, size) - np.maximum(start, 0)


def _avg_pool_regions(out_shape: tuple[int, ...]) -> Regions:
    """avg_pool2d_int8's workspace: float32 window sums, their int64 copy, their signs."""
    return {"sums": (out_shape, np.float32), "acc": (out_shape, np.int64),
            "sign": (out_shape, np.int64)}


def avg_pool2d_int8(self: np.ndarray, kernel_size: IntList, stride: IntList, padding: IntList,
                    activation_min: int, activation_max: int, *, out: np.ndarray,
                    scratch: np.ndarray | None = None) -> Bound:
    """TFLite AVERAGE_POOL_2D int8 (same quantization in and out): the sum of the window's taps
    inside the input divided by their count, rounded half away from zero, clamped. The sums are
    ``aten::avg_pool2d.out`` with divisor 1 (float32, exact below 2**17 taps); the rounding
    divides |sum| + count // 2, the sign back as (q ^ sign) - sign with sign = sum >> 63."""
    regions = _avg_pool_regions(out.shape)
    sums, acc, sign = _take(scratch, regions).values()
    pool = _AVG_POOL.bind({"self": self, "kernel_size": kernel_size, "stride": stride,
                           "padding": padding, "ceil_mode": False, "count_include_pad": False,
                           "divisor_override": 1, "out": sums,
                           "scratch": _rest(scratch, regions)}, check=False)
    counts = np.outer(*(_valid_taps(*args) for args in zip(
        self.shape[-2:], *_pool_geometry(kernel_size, stride, padding), out.shape[-2:],
        strict=True)))
    return run_all(pool, functools.partial(np.copyto, acc, sums, casting="unsafe"),
                     functools.partial(np.right_shift, acc, 63, sign),
                     functools.partial(np.abs, acc, acc),
                     functools.partial(np.add, acc, counts // 2, acc),
                     functools.partial(np.floor_divide, acc, counts, acc),
                     functools.partial(np.bitwise_xor, acc, sign, acc),
                     functools.partial(np.subtract, acc, sign, acc),
                     _store(acc, 0, activation_min, activation_max, out))


def _avg_pool_scratch(self: np.ndarray, kernel_size: IntList, stride: IntList,
                      padding: IntList, **_: object) -> int:
    out_hw = tuple((size + 2 * p - k) // s + 1 for size, k, s, p in zip(
        self.shape[-2:], *_pool_geometry(kernel_size, stride, padding), strict=True))
    return (workspace_bytes(*_avg_pool_regions((*self.shape[:-2], *out_hw)).values())
            + _AVG_POOL.scratch(self=self, kernel_size=kernel_size, stride=stride,
                                padding=padding))


def _kept_shape(shape: tuple[int, ...], dim: Sequence[int]) -> tuple[int, ...]:
    """``shape`` with the ``dim`` axes reduced to size 1."""
    axes = {d % len(shape) for d in dim}
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def mean_int8(self: np.ndarray, dim: Sequence[int], keepdim: bool, input_zero_point: int,
              output_zero_point: int, multiplier: int, shift: int, rounding: str = "double",
              effective_scale: float | None = None, *, out: np.ndarray,
              scratch: np.ndarray | None = None) -> Bound:
    """TFLite MEAN int8 as its reference QuantizedMeanOrSum runs it (LiteRT's BUILTIN_REF takes
    it for every int8 mean, equal scales or not): the int32 sum minus input_zero_point * count,
    times (multiplier, shift) = QuantizeMultiplier(input_scale / output_scale) with 1 / count
    folded in: (m << p) // count, shift - p, p = min(floor(log2(count)), 32, 31 + shift); then
    + output_zero_point, clamped to int8. Double rounding. ``rounding`` "xnnpack" is XNNPACK's
    qs8 mean: that sum times float32(effective_scale / count) (effective_scale: input_scale /
    output_scale in float32), rounded to even."""
    del keepdim  # out's shape reflects it
    kept = _kept_shape(self.shape, dim)
    count = self.size // max(1, int(np.prod(kept)))
    acc, tmp = _take(scratch, _mean_regions(self.shape, dim)).values()
    axes = tuple(d % self.ndim for d in dim)
    sums = (functools.partial(np.sum, self, axis=axes, dtype=np.int64, out=acc, keepdims=True),
            functools.partial(np.subtract, acc, input_zero_point * count, acc))
    if rounding == "xnnpack":
        return run_all(*sums, _scaled_to_even(acc.reshape(out.shape), tmp.reshape(out.shape),
                                              np.float32(effective_scale) / np.float32(count),
                                              output_zero_point, out))
    p = min(count.bit_length() - 1, 32, 31 + shift)
    return run_all(*sums, _requantize(acc.reshape(out.shape), (multiplier << p) // count,
                                      shift - p, "double", tmp.reshape(out.shape),
                                      output_zero_point, INT8_MIN, INT8_MAX, out))


def _scaled_to_even(acc: np.ndarray, tmp: np.ndarray, scale: np.float32, zero_point: int,
                    out: np.ndarray) -> Bound:
    """out = clamp(round-half-even(float32(acc) * scale) + zero_point) to int8 (XNNPACK's fp32
    requantization); ``tmp``: an int64 array of acc's shape, viewed as float32 scratch."""
    work = tmp.reshape(-1).view(np.float32)[:acc.size].reshape(acc.shape)
    return run_all(functools.partial(np.copyto, work, acc, casting="unsafe"),
                   functools.partial(np.multiply, work, scale, work),
                   functools.partial(np.rint, work, work),
                   functools.partial(np.add, work, np.float32(zero_point), work),
                   functools.partial(CLIP, work, INT8_MIN, INT8_MAX, work),
                   functools.partial(np.copyto, out, work, casting="unsafe"))


def _mean_regions(shape: tuple[int, ...], dim: Sequence[int]) -> Regions:
    """mean_int8's workspace: the int64 sums (keeping the reduced dims) and a temporary."""
    kept = _kept_shape(shape, dim)
    return {"acc": (kept, np.int64), "tmp": (kept, np.int64)}


def _mean_scratch(self: np.ndarray, dim: Sequence[int], **_: object) -> int:
    return workspace_bytes(*_mean_regions(self.shape, dim).values())


# -- table lookup ---------------------------------------------------------------------------------


def _lookup_regions(size: int, budget: int | None = None) -> Regions:
    """lookup_int8's workspace: a block of np.take's intp indices."""
    return {"index": ((_block_size(size, (np.dtype(np.intp).itemsize,), budget),), np.intp)}


def lookup_int8(self: np.ndarray, table: np.ndarray, *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
    """out = table[uint8(self)]: any int8 -> int8 elementwise function as TFLite's 256-entry
    LUT (its layout: entry i for the int8 value whose byte is i), per block. TFLite's int8
    LOGISTIC and TANH are such tables; its HARD_SWISH is exactly one too.
    ``toolchain.quantize.fixed_point`` computes them (``sigmoid_table``, ``tanh_table``,
    ``hardswish_table``). out may be self."""
    buf = _take(scratch, _within(scratch, functools.partial(_lookup_regions, out.size)))

    def step(o: np.ndarray, x: np.ndarray, index: np.ndarray) -> None:
        np.copyto(index, x)  # np.take would convert uint8 indices
        np.take(table, index, out=o, mode="wrap")

    return _loop(_pieces(out, [self.view(np.uint8)], [buf["index"]], buf["index"].size), step)


def _lookup_scratch(self: np.ndarray, budget: int | None = None, **_: object) -> int:
    return workspace_bytes(*_lookup_regions(self.size, budget).values())


# -- softmax --------------------------------------------------------------------------------------


def _srdhm(a: np.ndarray, b: np.ndarray | int, out: np.ndarray) -> Bound:
    """out = SaturatingRoundingDoublingHighMul(a, b) = (a * b + 2**30) >> 31 (never both
    -2**31 here)."""
    return run_all(functools.partial(np.multiply, a, b, out),
                     functools.partial(np.add, out, 1 << 30, out),
                     functools.partial(np.right_shift, out, 31, out))


def _saturating_shift(x: np.ndarray, exponent: int) -> Bound:
    """x = SaturatingRoundingMultiplyByPOT<exponent > 0>(x) on int32 values, in place:
    clamping x to +-2**(31 - exponent) first makes the out-of-range results +-2**31, which the
    final clamp saturates."""
    bound = 1 << (31 - exponent)
    return run_all(functools.partial(CLIP, x, np.int64(-bound), np.int64(bound), x),
                     functools.partial(np.left_shift, x, exponent, x),
                     functools.partial(CLIP, x, np.int64(-1 << 31), np.int64((1 << 31) - 1), x))


def _reciprocal(total: np.ndarray, row: dict[str, np.ndarray]) -> Bound:
    """Per row, TFLite's GetReciprocal(total, 12 integer bits) into row["scale"] (Q0.31) and
    the output's RoundingDivideByPOT exponent (35 - headroom) into row["shift"], its half into
    row["half"]: the sum normalized to [1, 2) (its bit length from frexp, exact below 2**53),
    then gemmlowp's one_over_one_plus_x_for_x_in_0_1, three Newton-Raphson steps in Q2.29."""
    a, hd, x, t, shift = row["a"], row["hd"], row["scale"], row["t"], row["shift"]
    steps = [copier(row["float"], total),
             functools.partial(np.frexp, row["float"], out=(row["float"], row["bits"])),
             copier(shift, row["bits"]),
             functools.partial(np.subtract, 32, shift, shift),  # headroom + 1
             functools.partial(np.left_shift, total, shift, a),
             functools.partial(np.subtract, a, 1 << 31, a),  # x - 1 in Q0.31, >= 0
             functools.partial(np.add, a, 1 << 31, hd),  # RoundingHalfSum(a, One)
             functools.partial(np.right_shift, hd, 1, hd),
             _srdhm(hd, -1010580540, x),  # -32/17
             functools.partial(np.add, x, 1515870810, x)]  # 48/17
    for _ in range(3):
        steps += [_srdhm(hd, x, t), functools.partial(np.subtract, 1 << 29, t, t),
                  _srdhm(x, t, t), _saturating_shift(t, 2),
                  functools.partial(np.add, x, t, x)]
    steps += [_saturating_shift(x, 1),
              functools.partial(np.subtract, 35, shift, shift),
              functools.partial(np.left_shift, 1, shift, out=row["half"]),
              functools.partial(np.right_shift, row["half"], 1, out=row["half"])]
    return run_all(*steps)


def _softmax_regions(shape: tuple[int, ...], dim: int) -> Regions:
    """softmax_int8's workspace: element-wise index and value planes, and per-row values."""
    rows = _kept_shape(shape, (dim,))
    per_row = {name: (rows, np.int64) for name in ("top", "total", "a", "hd", "scale", "t",
                                                   "shift", "half")}
    return {"index": (shape, np.intp), "value": (shape, np.int64), **per_row,
            "top8": (rows, np.int8), "float": (rows, np.float64), "bits": (rows, np.intc)}


def softmax_int8(self: np.ndarray, dim: int, table: np.ndarray, *, out: np.ndarray,
                 scratch: np.ndarray | None = None) -> Bound:
    """TFLite SOFTMAX int8 (reference_ops::Softmax; output scale 1/256, zero point -128) along
    ``dim``: e = table[max - x] (exp of the scaled difference in Q0.31; 0 for differences TFLite
    ignores; ``fixed_point.softmax_table``), the row's sum of e rounded to Q12.19, its fixed-point
    reciprocal, out = RoundingDivideByPOT(e * reciprocal, exponent) - 128, clamped."""
    buf = _take(scratch, _softmax_regions(self.shape, dim))
    index, value, top, total = buf["index"], buf["value"], buf["top"], buf["total"]
    exps = table.astype(np.int64)
    return run_all(
        functools.partial(np.maximum.reduce, self, axis=dim, keepdims=True, out=buf["top8"]),
        copier(top, buf["top8"]),
        copier(index, self),
        functools.partial(np.subtract, top, index, index),
        functools.partial(np.take, exps, index, out=value, mode="wrap"),
        functools.partial(np.add, value, 1 << 11, index),  # Rescale<12>: e >= 0
        functools.partial(np.right_shift, index, 12, index),
        functools.partial(np.sum, index, axis=dim, keepdims=True, out=total),
        _reciprocal(total, buf),
        _srdhm(value, buf["scale"], value),
        functools.partial(np.add, value, buf["half"], value),
        functools.partial(np.right_shift, value, buf["shift"], value),
        _store(value, INT8_MIN, INT8_MIN, INT8_MAX, out))


def _softmax_scratch(self: np.ndarray, dim: int, **_: object) -> int:
    return workspace_bytes(*_softmax_regions(self.shape, dim).values())


# -- shape and dtype rules (``rules``) ----------------------------------------------------------

_INT8 = frozenset({rules.INT8})


def _int8_range(low: int, high: int, low_name: str, high_name: str) -> None:
    """``low`` <= ``high``, both int8 values (activation or quantization bounds)."""
    low = rules.integer(low, low_name, INT8_MIN, INT8_MAX)
    if rules.integer(high, high_name, low, INT8_MAX) < low:
        raise ValueError(f"{high_name} {high} below {low_name} {low}")


def _zero_points(**zero_points: int) -> None:
    """Zero points of int8 tensors are int8 values (TFLite's rule)."""
    for name, value in zero_points.items():
        rules.integer(value, name, INT8_MIN, INT8_MAX)


def _per_channel_values(values: Any, name: str, channels: int, kind: type = int) -> None:
    """One value (of ``kind``) per channel, or one for all."""
    items = list(values) if isinstance(values, tuple | list) else [values]
    if len(items) not in (1, channels) or not all(isinstance(v, kind) for v in items):
        raise ValueError(f"{name} {values!r}: 1 or {channels} {kind.__name__} values expected")


def _rounding(rounding: str, roundings: tuple[str, ...]) -> None:
    if rounding not in roundings:
        raise ValueError(f"rounding {rounding!r}: one of {', '.join(roundings)}")


def _requant_args(channels: int, output_multiplier: Ints, output_shift: Ints,
                  activation_min: int, activation_max: int, rounding: str,
                  roundings: tuple[str, ...], effective_scale: Any = None) -> None:
    """Per-channel multipliers and shifts (and ``effective_scale`` for rounding "float" or
    "xnnpack"), the activation range within int8."""
    _rounding(rounding, roundings)
    if rounding in _SCALED:
        _per_channel_values(effective_scale, "effective_scale", channels, float)
    _per_channel_values(output_multiplier, "output_multiplier", channels)
    _per_channel_values(output_shift, "output_shift", channels)
    _int8_range(activation_min, activation_max, "activation_min", "activation_max")


def _bias(bias: np.ndarray | None, channels: int, inputs: dict[str, Any]) -> None:
    if bias is not None and (rules.tensor(bias, "bias").dtype != rules.INT32
                             or bias.shape != (channels,)):
        rules.refuse(inputs, f"an int32 bias of {channels} values expected")


def _check_quantize(input: np.ndarray, scale: float, zero_point: int, quant_min: int,
                    quant_max: int, rounding: str = "double", *, out: np.ndarray,
                    **_: object) -> None:
    """float32 input to int8 out of its shape, within int8 bounds; rounding "double" (TFLite's)
    or "xnnpack"."""
    inputs = {"input": rules.tensor(input, "input", frozenset({rules.FLOAT32}))}
    _rounding(rounding, ("double", "xnnpack"))
    rules.number(scale, "scale")
    rules.integer(zero_point, "zero_point")
    _int8_range(quant_min, quant_max, "quant_min", "quant_max")
    rules.expect(out, input.shape, rules.INT8, inputs)


def _check_dequantize(input: np.ndarray, scale: float, zero_point: int, *, out: np.ndarray,
                      **_: object) -> None:
    """int8 input to float32 out of its shape."""
    inputs = {"input": rules.tensor(input, "input", _INT8)}
    rules.number(scale, "scale")
    rules.integer(zero_point, "zero_point")
    rules.expect(out, input.shape, rules.FLOAT32, inputs)


def _check_dequantize_per_channel(input: np.ndarray, scales: np.ndarray,
                                  zero_points: np.ndarray | None, axis: int, *,
                                  out: np.ndarray, **_: object) -> None:
    """int8 input to float32 out of its shape; float scales and integer zero points (or None)
    with one value per index of ``axis``."""
    inputs = {"input": rules.tensor(input, "input", _INT8), "scales": scales,
              "zero_points": zero_points, "axis": axis}
    if not input.ndim:
        rules.refuse(inputs, "a 0-d input has no channels")
    channels = (input.shape[rules.axis(axis, input.ndim)],)
    if (rules.tensor(scales, "scales").dtype.kind != "f" or scales.shape != channels
            or (zero_points is not None and (rules.tensor(zero_points, "zero_points").dtype.kind
                                             not in "iu" or zero_points.shape != channels))):
        rules.refuse(inputs, f"float scales and integer zero points of shape {list(channels)} "
                     "expected")
    rules.expect(out, input.shape, rules.FLOAT32, inputs)


def _check_conv2d(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                  stride: IntList, padding: IntList, dilation: IntList, groups: int,
                  input_zero_point: int, output_zero_point: int, output_multiplier: Ints,
                  output_shift: Ints, activation_min: int, activation_max: int,
                  rounding: str = "double", effective_scale: Sequence[float] | None = None, *,
                  out: np.ndarray, **_: object) -> None:
    """int8 (N, C, H, W) input and (O, C / groups, KH, KW) weight, an int32 bias, give int8 out
    of the convolution's shape (``nn.conv_shape``)."""
    inputs = {"input": rules.tensor(input, "input", _INT8),
              "weight": rules.tensor(weight, "weight", _INT8), "bias": bias}
    if input.ndim != 4 or weight.ndim != 4:
        rules.refuse(inputs, "a 2-D convolution expected")
    shape = nn.conv_shape(input, weight, bias, stride, padding, dilation, groups)
    _bias(bias, weight.shape[0], inputs)
    _zero_points(input_zero_point=input_zero_point, output_zero_point=output_zero_point)
    _requant_args(weight.shape[0], output_multiplier, output_shift, activation_min,
                  activation_max, rounding, ("double", "single", "xnnpack"), effective_scale)
    rules.expect(out, shape, rules.INT8, inputs)


def _check_linear(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                  input_zero_point: int, output_zero_point: int, output_multiplier: Ints,
                  output_shift: Ints, activation_min: int, activation_max: int,
                  rounding: str = "double", effective_scale: Sequence[float] | None = None, *,
                  out: np.ndarray, **_: object) -> None:
    """int8 input (..., K) and weight (N, K), an int32 bias, give int8 out (..., N)."""
    inputs = {"input": rules.tensor(input, "input", _INT8),
              "weight": rules.tensor(weight, "weight", _INT8), "bias": bias}
    if not input.ndim or weight.ndim != 2 or weight.shape[1] != input.shape[-1]:
        rules.refuse(inputs, "input (..., K) and weight (N, K) expected")
    _bias(bias, weight.shape[0], inputs)
    _zero_points(input_zero_point=input_zero_point, output_zero_point=output_zero_point)
    _requant_args(weight.shape[0], output_multiplier, output_shift, activation_min,
                  activation_max, rounding, ("double", "single", "float", "xnnpack"),
                  effective_scale)
    rules.expect(out, (*input.shape[:-1], weight.shape[0]), rules.INT8, inputs)


def _check_binary(self: np.ndarray, other: np.ndarray, activation_min: int,
                  activation_max: int, rounding: str = "double",
                  effective_scale: float | None = None, *, out: np.ndarray,
                  **requant: int) -> None:
    """add/sub/mul_int8: int8 operands broadcast to an int8 out; integer requantization
    arguments; rounding "double" (TFLite's) or "xnnpack" (add/sub: a right shift in [1, 31]
    and multipliers below 2**22; mul: a positive finite effective_scale)."""
    inputs = {"self": rules.tensor(self, "self", _INT8), "other": rules.tensor(other, "other",
                                                                             _INT8)}
    _zero_points(**{k: v for k, v in requant.items() if k.endswith("zero_point")})
    for name, value in requant.items():
        if name != "scratch":
            rules.integer(value, name)
    if rounding == "xnnpack" and "left_shift" in requant:
        _xnnpack_add_args(**requant)
    else:
        _xnnpack_scale(rounding, effective_scale)
    _int8_range(activation_min, activation_max, "activation_min", "activation_max")
    rules.expect(out, rules.broadcast(inputs), rules.INT8, inputs)


def _xnnpack_scale(rounding: str, effective_scale: float | None) -> None:
    """rounding "double", or "xnnpack" with a positive finite float32 effective_scale."""
    _rounding(rounding, ("double", "xnnpack"))
    if rounding == "xnnpack":
        scale = rules.number(effective_scale, "effective_scale")
        if not 0 < scale < math.inf:
            raise ValueError(f"effective_scale {scale}: a positive finite number")


def _xnnpack_add_args(output_shift: int, self_multiplier: int, other_multiplier: int,
                      **_: int) -> None:
    if not 1 <= output_shift <= 31:
        raise ValueError(f"output_shift {output_shift}: 1 to 31 for rounding xnnpack")
    for name, value in (("self_multiplier", self_multiplier),
                        ("other_multiplier", other_multiplier)):
        if abs(value) >= 1 << 22:
            raise ValueError(f"{name} {value}: below 2**22 in magnitude for rounding xnnpack")


def _check_avg_pool(self: np.ndarray, kernel_size: IntList, stride: IntList, padding: IntList,
                    activation_min: int, activation_max: int, *, out: np.ndarray,
                    **_: object) -> None:
    """int8 self to int8 out of the pooling shape (``nn.pool_shape``, no dilation, floor)."""
    shape = nn.pool_shape(rules.tensor(self, "self", _INT8), kernel_size, stride, padding, 1,
                          False)
    _int8_range(activation_min, activation_max, "activation_min", "activation_max")
    rules.expect(out, shape, rules.INT8, {"self": self, "kernel_size": kernel_size,
                                          "stride": stride, "padding": padding})


def _int8_only(dtype: np.dtype, _: object) -> np.dtype | None:
    return dtype if dtype == rules.INT8 else None


_MEAN = rules.reduction(("out", _int8_only), dim_types=(tuple, list), identity=False)


def _check_mean(self: np.ndarray, dim: Sequence[int], keepdim: bool, input_zero_point: int,
                output_zero_point: int, multiplier: int, shift: int, rounding: str = "double",
                effective_scale: float | None = None, *, out: np.ndarray,
                **_: object) -> None:
    """An int8 mean over the given (nonempty) dims; rounding "double", or "xnnpack" with a
    positive finite effective_scale."""
    if not dim:
        raise NotImplementedError("mean_int8 over all dims without naming them")
    _zero_points(input_zero_point=input_zero_point, output_zero_point=output_zero_point)
    rules.integer(multiplier, "multiplier")
    rules.integer(shift, "shift")
    _xnnpack_scale(rounding, effective_scale)
    _MEAN(self, dim, keepdim, out=out)


def _check_lookup(self: np.ndarray, table: np.ndarray, *, out: np.ndarray,
                  **_: object) -> None:
    """int8 self through a 256-entry int8 table to an int8 out of self's shape."""
    inputs = {"self": rules.tensor(self, "self", _INT8),
              "table": rules.tensor(table, "table", _INT8)}
    if table.shape != (256,):
        rules.refuse(inputs, "a table of 256 entries expected")
    rules.expect(out, self.shape, rules.INT8, inputs)


def _check_softmax(self: np.ndarray, dim: int, table: np.ndarray, *, out: np.ndarray,
                   **_: object) -> None:
    """int8 self (not 0-d) along ``dim`` to an int8 out of its shape; a table of 256
    int32/int64 exponentials."""
    inputs = {"self": rules.tensor(self, "self", _INT8), "dim": dim,
              "table": rules.tensor(table, "table", frozenset({rules.INT32, rules.INT64}))}
    if not self.ndim:
        raise NotImplementedError("softmax_int8 of a 0-d tensor")
    rules.axis(dim, self.ndim)
    if table.shape != (256,):
        rules.refuse(inputs, "a table of 256 entries expected")
    rules.expect(out, self.shape, rules.INT8, inputs)


KERNELS: dict[str, Kernel] = {
    "nee::quantize_per_tensor.out": Kernel.prepared(quantize_per_tensor, INT8,
                                                    scratch=_quantize_scratch,
                                                    check=_check_quantize),
    "nee::dequantize_per_tensor.out": Kernel.prepared(dequantize_per_tensor, FLOAT,
                                                      check=_check_dequantize),
    "nee::dequantize_per_channel.out": Kernel.prepared(dequantize_per_channel, FLOAT,
                                                       check=_check_dequantize_per_channel),
    "nee::conv2d_int8.out": Kernel.prepared(conv2d_int8, INT8, scratch=_conv_scratch,
                                            check=_check_conv2d),
    "nee::linear_int8.out": Kernel.prepared(linear_int8, INT8, scratch=_linear_scratch,
                                            check=_check_linear),
    "nee::add_int8.out": Kernel.prepared(add_int8, INT8, inplace=True, scratch=_binary_scratch,
                                         check=_check_binary),
    "nee::mul_int8.out": Kernel.prepared(mul_int8, INT8, inplace=True, scratch=_binary_scratch,
                                         check=_check_binary),
    # TFLite SUB int8 is ADD with the other input's multiplier negated (fixed_point.sub_requant)
    "nee::sub_int8.out": Kernel.prepared(add_int8, INT8, inplace=True, scratch=_binary_scratch,
                                         check=_check_binary),
    "nee::avg_pool2d_int8.out": Kernel.prepared(avg_pool2d_int8, INT8,
                                                scratch=_avg_pool_scratch,
                                                check=_check_avg_pool),
    "nee::mean_int8.out": Kernel.prepared(mean_int8, INT8, scratch=_mean_scratch,
                                          check=_check_mean),
    "nee::lookup_int8.out": Kernel.prepared(lookup_int8, INT8, inplace=True,
                                            scratch=_lookup_scratch, check=_check_lookup),
    "nee::softmax_int8.out": Kernel.prepared(softmax_int8, INT8, scratch=_softmax_scratch,
                                             check=_check_softmax),
}
