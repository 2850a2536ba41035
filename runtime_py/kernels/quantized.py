"""Int8 kernels, bit-exact with TensorFlow Lite's reference kernels (LiteRT's BUILTIN_REF).

Integer arithmetic runs on int64 arrays holding TFLite's int32 values: ``_rescale`` is TFLite's
MultiplyByQuantizedMultiplier, vectorized. ``rounding`` "double" is the reference build
(SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT: round half away from zero);
"single" is TFLITE_SINGLE_ROUNDING (one rounding shift of the 64-bit product, as XNNPACK and
TOSA). A multiplier/shift pair is TFLite's QuantizeMultiplier output (shift > 0: left). Results
are clamped to ``activation_min``/``activation_max``, which also keep them in int8. TFLite's
int32 overflows (undefined behaviour in its C++) are not reproduced: there results saturate.

Convolution and linear layers run their multiply-accumulate on float32 BLAS, exactly: they sum
raw int8 products x * w, of magnitude <= 2**14, so any sum of EXACT_TERMS (1024) of them, in
any order, only passes through integers of magnitude <= 2**24, all exact in float32; the input
zero point comes off afterwards, in int64, as input_zero_point * sum(w) folded into the bias
(a convolution's padding holds input_zero_point, so padded taps add w * 0). Longer reductions
are split into such chunks (input channels of a convolution, columns of a linear layer), each
converted exactly to int64 and summed there. Weights and biases are constants, folded once at
load.

Elementwise int8 functions (TFLite's LOGISTIC, TANH, HARD_SWISH) are one kernel: a lookup in a
256-entry table computed at export; SOFTMAX takes a table of its fixed-point exponentials.

Arguments the export computes come from ``toolchain.quantize.fixed_point``: its ``*_requant``
functions return them as TFLite's Prepare functions derive them, its ``*_table`` functions the
tables.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from runtime_py.kernels import Bound, Kernel, nn
from runtime_py.kernels._common import FLOAT, INT8, Workspace, expand_param, workspace_bytes
from runtime_py.kernels.indexing import constant_pad_nd

IntList = Sequence[int] | int
Ints = Sequence[int] | int  # one value per channel, or one for all
INT8_MIN, INT8_MAX = -128, 127
EXACT_TERMS = 2**24 // (128 * 128)  # int8 products x * w whose float32 sums are exact

_CONVOLUTION = nn.KERNELS["aten::convolution.out"]
_AVG_POOL = nn.KERNELS["aten::avg_pool2d.out"]


def _channels(values: Ints, shape: tuple[int, ...]) -> np.ndarray:
    """Per-channel (or single) ints as an int64 array of ``shape`` (broadcasting to the
    accumulator along its channel axis)."""
    return np.asarray(values, np.int64).reshape(shape if np.size(values) > 1 else ())


def _sequence(*calls: Bound) -> Bound:
    """One call running ``calls`` in order."""

    def run() -> None:
        for call in calls:
            call()

    return run


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
        return _sequence(functools.partial(np.multiply, acc, m, out=acc),
                         functools.partial(np.add, acc, np.left_shift(1, total - 1), out=acc),
                         functools.partial(np.right_shift, acc, total, out=acc))
    if rounding != "double":
        raise ValueError(f"rounding {rounding!r}: 'double' or 'single'")
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    steps = [functools.partial(np.left_shift, acc, left, out=acc)] if left.any() else []
    return _sequence(*steps, functools.partial(np.multiply, acc, m, out=acc),
                     functools.partial(np.add, acc, 1 << 30, out=acc),
                     functools.partial(np.right_shift, acc, 30, out=acc),
                     functools.partial(np.bitwise_and, acc, -2, out=acc),
                     functools.partial(np.right_shift, acc, 63, out=tmp),
                     functools.partial(np.add, acc, tmp, out=acc),
                     functools.partial(np.add, acc, np.left_shift(1, right), out=acc),
                     functools.partial(np.right_shift, acc, right + 1, out=acc))


def _store(acc: np.ndarray, zero_point: int, low: int, high: int, out: np.ndarray) -> Bound:
    """out = clamp(acc + zero_point, low, high) (acc is modified)."""
    return _sequence(functools.partial(np.add, acc, zero_point, out=acc),
                     functools.partial(np.clip, acc, np.int64(low), np.int64(high), out=acc),
                     functools.partial(np.copyto, out, acc, casting="unsafe"))


def _requantize(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int,
                rounding: str, tmp: np.ndarray, zero_point: int, low: int, high: int,
                out: np.ndarray) -> Bound:
    """The rescale of acc (``_rescale``), then its store into out (``_store``)."""
    return _sequence(_rescale(acc, multiplier, shift, rounding, tmp),
                     _store(acc, zero_point, low, high, out))


def _offset(x: np.ndarray, zero_point: int, buf: np.ndarray) -> Bound:
    """buf = x - zero_point, exactly (buf: float32 or int64; a cast copy, then a same-dtype
    subtraction: numpy's mixed-dtype ufuncs are 3-4x slower and allocate casting buffers)."""
    return _sequence(functools.partial(np.copyto, buf, x),
                     functools.partial(np.subtract, buf, buf.dtype.type(zero_point), out=buf))


def _accumulate(part: np.ndarray, acc: np.ndarray, bias: np.ndarray | None,
                tmp: np.ndarray | None) -> Bound:
    """acc = part + bias (a reduction's first chunk) or acc += part (the next ones, through the
    int64 ``tmp``), exactly."""
    if bias is not None:
        return _sequence(functools.partial(np.copyto, acc, part, casting="unsafe"),
                         functools.partial(np.add, acc, bias, out=acc))
    return _sequence(functools.partial(np.copyto, tmp, part, casting="unsafe"),
                     functools.partial(np.add, acc, tmp, out=acc))


def _folded_bias(bias: np.ndarray | None, weight: np.ndarray, zero_point: int) -> np.ndarray:
    """Per output channel (weight's first dim): bias (0 if None) - zero_point * sum(w), int64."""
    sums = weight.reshape(weight.shape[0], -1).sum(axis=1, dtype=np.int64)
    return (0 if bias is None else bias.astype(np.int64)) - zero_point * sums


# -- quantize / dequantize ------------------------------------------------------------------------


def quantize_per_tensor(input: np.ndarray, scale: float, zero_point: int, quant_min: int,
                        quant_max: int, *, out: np.ndarray,
                        scratch: np.ndarray | None = None) -> Bound:
    """TFLite QUANTIZE: clamp(std::round(x / scale) + zero_point) with float32 division and
    rounding half away from zero (round(v) = trunc(v) + trunc(2 * (v - trunc(v))), exact).
    |x / scale| >= 2**31 saturates (TFLite's int32 conversion is undefined there)."""
    v, t = _take(scratch, _quantize_regions(input.shape)).values()
    low, high = np.float32(quant_min), np.float32(quant_max)

    def run() -> None:
        np.divide(input, np.float32(scale), out=v)
        np.trunc(v, out=t)
        np.subtract(v, t, out=v)
        np.add(v, v, out=v)
        np.trunc(v, out=v)
        np.add(t, v, out=t)
        np.add(t, np.float32(zero_point), out=t)
        np.clip(t, low, high, out=t)
        np.copyto(out, t, casting="unsafe")

    return run


def _quantize_regions(shape: tuple[int, ...]) -> Regions:
    """quantize_per_tensor's workspace: x / scale, and its integer part."""
    return {"v": (shape, np.float32), "t": (shape, np.float32)}


def _quantize_scratch(input: np.ndarray, **_: object) -> int:
    return workspace_bytes(*_quantize_regions(input.shape).values())


def dequantize_per_tensor(input: np.ndarray, scale: float, zero_point: int, quant_min: int,
                          quant_max: int, *, out: np.ndarray) -> Bound:
    """TFLite DEQUANTIZE: float(double(scale) * (q - zero_point)). The float32 product is the
    same number: the exact product has at most 33 significant bits, rounded once either way."""
    del quant_min, quant_max  # the input is int8 already
    return _sequence(_offset(input, zero_point, out),
                     functools.partial(np.multiply, out, np.float32(scale), out=out))


def dequantize_per_channel(input: np.ndarray, scales: np.ndarray,
                           zero_points: np.ndarray | None, axis: int, quant_min: int,
                           quant_max: int, *, out: np.ndarray) -> Bound:
    """torch's quantized_decomposed.dequantize_per_channel: (q - zero_points) * scales along
    ``axis`` (no zero points: q * scales), in float32."""
    del quant_min, quant_max
    shape = [1] * input.ndim
    shape[axis] = -1
    steps = [functools.partial(np.copyto, out, input)]
    if zero_points is not None:
        steps.append(functools.partial(np.subtract, out,
                                       zero_points.astype(np.float32).reshape(shape), out=out))
    return _sequence(*steps, functools.partial(np.multiply, out, scales.reshape(shape), out=out))


# -- convolution and fully connected --------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _conv_parts(channels: int, weight_shape: tuple[int, ...],
                groups: int) -> tuple[tuple[slice, slice, slice, int], ...]:
    """The exact float32 sub-convolutions of a convolution: (input channels, output channels,
    weight input channels, groups). All of it at once if a group's reduction has at most
    EXACT_TERMS terms, else per group and chunk of input channels."""
    o, cg, kh, kw = weight_shape
    if cg * kh * kw <= EXACT_TERMS:
        return ((slice(None), slice(None), slice(None), groups),)
    per = EXACT_TERMS // (kh * kw)
    if per == 0:
        raise NotImplementedError(f"int8 convolution with a {kh}x{kw} kernel (> {EXACT_TERMS})")
    og = o // groups
    return tuple((slice(g * cg + j, g * cg + min(j + per, cg)), slice(g * og, (g + 1) * og),
                  slice(j, min(j + per, cg)), 1)
                 for g in range(groups) for j in range(0, cg, per))


def _conv_regions(input_shape: tuple[int, ...], weight_shape: tuple[int, ...],
                  padding: IntList, groups: int, out_shape: tuple[int, ...]) -> Regions:
    """Workspace regions of conv2d_int8 before the float convolution's own scratch: the
    float32 input padded with its zero point, one sub-convolution's float32 result and (if
    chunked) its int64 copy, the int64 accumulator and a temporary."""
    n, c, h, w = input_shape
    ph, pw = expand_param(padding, 2)
    parts = _conv_parts(c, weight_shape, groups)
    outputs = range(out_shape[1])[parts[0][1]]
    part = (out_shape[0], len(outputs), *out_shape[2:])
    chunked = {"chunk": (part, np.int64)} if len(parts) > 1 else {}
    return {"padded": ((n, c, h + 2 * ph, w + 2 * pw), np.float32),
            "part": (part, np.float32), **chunked, "acc": (out_shape, np.int64),
            "tmp": (out_shape, np.int64)}


def conv2d_int8(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                stride: IntList, padding: IntList, dilation: IntList, groups: int,
                input_zero_point: int, output_zero_point: int, output_multiplier: Ints,
                output_shift: Ints, activation_min: int, activation_max: int,
                rounding: str = "double", *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
    """TFLite CONV_2D / DEPTHWISE_CONV_2D int8 (per-channel symmetric weights) on NCHW: acc =
    bias + sum of w * (x - input_zero_point) over the taps inside the input (padding adds
    nothing), rescaled per output channel, + output_zero_point, clamped. Depthwise is groups ==
    C (depth multiplier O / C). The sums are unpadded float32 convolutions
    (``aten::convolution.out``) of the input padded with its zero point, exact (module
    docstring)."""
    regions = _conv_regions(input.shape, weight.shape, padding, groups, out.shape)
    buf = _take(scratch, regions)
    padded, part, acc = buf["padded"], buf["part"], buf["acc"]
    ph, pw = expand_param(padding, 2)
    weights = weight.astype(np.float32)
    biases = _folded_bias(bias, weight, input_zero_point).reshape(-1, 1, 1)
    calls = [constant_pad_nd(input, (pw, pw, ph, ph), input_zero_point, out=padded)]
    for inputs, outputs, weight_inputs, part_groups in _conv_parts(input.shape[1], weight.shape,
                                                                   groups):
        calls.append(_CONVOLUTION.bind({
            "input": padded[:, inputs], "bias": None, "stride": stride, "padding": (0, 0),
            "dilation": dilation, "transposed": False, "output_padding": (0, 0),
            "groups": part_groups, "out": part, "scratch": _rest(scratch, regions),
            "weight": np.ascontiguousarray(weights[outputs, weight_inputs])}))
        first = weight_inputs.start in (None, 0)
        calls.append(_accumulate(part, acc[:, outputs], biases[outputs] if first else None,
                                 buf.get("chunk")))
    calls.append(_requantize(acc, _channels(output_multiplier, (-1, 1, 1)),
                             _channels(output_shift, (-1, 1, 1)), rounding, buf["tmp"],
                             output_zero_point, activation_min, activation_max, out))
    return _sequence(*calls)


def _conv_scratch(input: np.ndarray, weight: np.ndarray, stride: IntList, padding: IntList,
                  dilation: IntList, groups: int, budget: int | None = None,
                  **_: object) -> int:
    """conv2d_int8's regions, then the scratch of its largest float32 sub-convolution (within
    what ``budget`` leaves, if given)."""
    out_shape = nn.conv_out_shape(input, weight, stride, padding, dilation, groups)
    regions = _conv_regions(input.shape, weight.shape, padding, groups, out_shape)
    inputs, outputs, weight_inputs, part_groups = _conv_parts(input.shape[1], weight.shape,
                                                              groups)[0]
    padded = regions["padded"][0]
    x = np.broadcast_to(np.float32(0), (padded[0], len(range(padded[1])[inputs]), *padded[2:]))
    w = np.broadcast_to(np.float32(0), weight[outputs, weight_inputs].shape)
    own = workspace_bytes(*regions.values())
    room = {} if budget is None else {"budget": max(0, budget - own)}
    return own + _CONVOLUTION.scratch(input=x, weight=w, stride=stride, padding=(0, 0),
                                      dilation=dilation, groups=part_groups, **room)


def _linear_regions(input_shape: tuple[int, ...], n: int, rounding: str) -> Regions:
    """linear_int8's workspace: the float32 input, a chunk's float32 product and int64 copy, the
    int64 accumulator and a temporary (for "float" rounding: two float64 planes)."""
    rows, k = int(np.prod(input_shape[:-1])), input_shape[-1]
    chunked = {"chunk": ((rows, n), np.int64)} if k > EXACT_TERMS else {}
    requant = ({"v": ((rows, n), np.float64), "w": ((rows, n), np.float64)}
               if rounding == "float" else {"tmp": ((rows, n), np.int64)})
    return {"input": (input_shape, np.float32), "part": ((rows, n), np.float32), **chunked,
            "acc": ((rows, n), np.int64), **requant}


def linear_int8(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                input_zero_point: int, output_zero_point: int, output_multiplier: Ints,
                output_shift: Ints, activation_min: int, activation_max: int,
                rounding: str = "double", effective_scale: Sequence[float] | None = None, *,
                out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """TFLite FULLY_CONNECTED int8 (symmetric weights, per tensor or per output channel):
    acc = bias + sum of w * (x - input_zero_point) over the last dim (float32 matmuls of the raw
    int8 values over chunks of EXACT_TERMS columns, summed in int64), then requantized.
    ``rounding`` "float" is LiteRT's reference FULLY_CONNECTED (since 2025):
    std::round(double(acc) * effective_scale[c]), effective_scale = double(in) * double(w[c])
    / double(out) (``output_multiplier``/``output_shift`` are then unused)."""
    k, n = weight.shape[1], weight.shape[0]
    buf = _take(scratch, _linear_regions(input.shape, n, rounding))
    part, acc = buf["part"], buf["acc"]
    columns, weights = buf["input"].reshape(-1, k), np.ascontiguousarray(weight.T, np.float32)
    calls = [functools.partial(np.copyto, buf["input"], input)]
    for k0 in range(0, k, EXACT_TERMS):
        calls += [functools.partial(np.matmul, columns[:, k0:k0 + EXACT_TERMS],
                                    weights[k0:k0 + EXACT_TERMS], out=part),
                  _accumulate(part, acc, None if k0 else
                              _folded_bias(bias, weight, input_zero_point), buf.get("chunk"))]
    store = out.reshape(-1, n)
    if rounding == "float":
        calls += [_round_scaled(acc, np.asarray(effective_scale, np.float64), buf["v"],
                                buf["w"]),
                  _store(acc, output_zero_point, activation_min, activation_max, store)]
    else:
        calls.append(_requantize(acc, _channels(output_multiplier, (n,)),
                                 _channels(output_shift, (n,)), rounding, buf["tmp"],
                                 output_zero_point, activation_min, activation_max, store))
    return _sequence(*calls)


def _round_scaled(acc: np.ndarray, scale: np.ndarray, v: np.ndarray, w: np.ndarray) -> Bound:
    """acc = std::round(double(acc) * scale) (half away from zero) exactly, as trunc(v) +
    trunc(2 * frac(v)); ``v``, ``w``: float64 arrays of acc's shape."""
    return _sequence(functools.partial(np.copyto, v, acc),
                     functools.partial(np.multiply, v, scale, out=v),
                     functools.partial(np.modf, v, out=(v, w)),
                     functools.partial(np.add, v, v, out=v),
                     functools.partial(np.trunc, v, out=v),
                     functools.partial(np.add, w, v, out=w),
                     functools.partial(np.copyto, acc, w, casting="unsafe"))


def _linear_scratch(input: np.ndarray, weight: np.ndarray, rounding: str = "double",
                    **_: object) -> int:
    return workspace_bytes(*_linear_regions(input.shape, weight.shape[0], rounding).values())


# -- elementwise ----------------------------------------------------------------------------------


def _binary_regions(self: np.ndarray, other: np.ndarray) -> Regions:
    """add/mul_int8's workspace: each input's int64 values, the int64 result, a temporary."""
    shape = np.broadcast_shapes(np.shape(self), np.shape(other))
    return {"a": (np.shape(self), np.int64), "b": (np.shape(other), np.int64),
            "acc": (shape, np.int64), "tmp": (shape, np.int64)}


def _binary_scratch(self: np.ndarray, other: np.ndarray, **_: object) -> int:
    return workspace_bytes(*_binary_regions(self, other).values())


def _prefix(buf: np.ndarray, like: np.ndarray) -> np.ndarray:
    """The first like.size elements of ``buf``, in like's shape."""
    return buf.reshape(-1)[:like.size].reshape(like.shape)


def add_int8(self: np.ndarray, other: np.ndarray, self_zero_point: int, other_zero_point: int,
             output_zero_point: int, left_shift: int, self_multiplier: int, self_shift: int,
             other_multiplier: int, other_shift: int, output_multiplier: int,
             output_shift: int, activation_min: int, activation_max: int, *, out: np.ndarray,
             scratch: np.ndarray | None = None) -> Bound:
    """TFLite ADD int8 (broadcasting): each input's (q - zero_point) << left_shift rescaled by
    its multiplier, the sum rescaled by the output's, + output_zero_point, clamped."""
    a, b, acc, tmp = _take(scratch, _binary_regions(self, other)).values()
    calls = []
    for x, zp, buf, m, s in ((self, self_zero_point, a, self_multiplier, self_shift),
                             (other, other_zero_point, b, other_multiplier, other_shift)):
        calls += [_offset(x, zp, buf), functools.partial(np.left_shift, buf, left_shift, out=buf),
                  _rescale(buf, m, s, "double", _prefix(tmp, buf))]
    return _sequence(*calls, functools.partial(np.add, a, b, out=acc),
                     _requantize(acc, output_multiplier, output_shift, "double", tmp,
                                 output_zero_point, activation_min, activation_max, out))


def mul_int8(self: np.ndarray, other: np.ndarray, self_zero_point: int, other_zero_point: int,
             output_zero_point: int, output_multiplier: int, output_shift: int,
             activation_min: int, activation_max: int, *, out: np.ndarray,
             scratch: np.ndarray | None = None) -> Bound:
    """TFLite MUL int8 (broadcasting): (q1 - zp1) * (q2 - zp2) rescaled, + output_zero_point,
    clamped."""
    a, b, acc, tmp = _take(scratch, _binary_regions(self, other)).values()
    return _sequence(_offset(self, self_zero_point, a), _offset(other, other_zero_point, b),
                     functools.partial(np.multiply, a, b, out=acc),
                     _requantize(acc, output_multiplier, output_shift, "double", tmp,
                                 output_zero_point, activation_min, activation_max, out))


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
                           "scratch": _rest(scratch, regions)})
    counts = np.outer(*(_valid_taps(*args) for args in zip(
        self.shape[-2:], *_pool_geometry(kernel_size, stride, padding), out.shape[-2:],
        strict=True)))
    return _sequence(pool, functools.partial(np.copyto, acc, sums, casting="unsafe"),
                     functools.partial(np.right_shift, acc, 63, out=sign),
                     functools.partial(np.abs, acc, out=acc),
                     functools.partial(np.add, acc, counts // 2, out=acc),
                     functools.partial(np.floor_divide, acc, counts, out=acc),
                     functools.partial(np.bitwise_xor, acc, sign, out=acc),
                     functools.partial(np.subtract, acc, sign, out=acc),
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
              output_zero_point: int, multiplier: int, shift: int, *, out: np.ndarray,
              scratch: np.ndarray | None = None) -> Bound:
    """TFLite MEAN int8 as its reference QuantizedMeanOrSum runs it (LiteRT's BUILTIN_REF takes
    it for every int8 mean, equal scales or not): the int32 sum minus input_zero_point * count,
    times (multiplier, shift) = QuantizeMultiplier(input_scale / output_scale) with 1 / count
    folded in: (m << p) // count, shift - p, p = min(floor(log2(count)), 32, 31 + shift); then
    + output_zero_point, clamped to int8. Double rounding."""
    del keepdim  # out's shape reflects it
    kept = _kept_shape(self.shape, dim)
    count = self.size // max(1, int(np.prod(kept)))
    p = min(count.bit_length() - 1, 32, 31 + shift)
    acc, tmp = _take(scratch, _mean_regions(self.shape, dim)).values()
    axes = tuple(d % self.ndim for d in dim)
    return _sequence(
        functools.partial(np.sum, self, axis=axes, dtype=np.int64, out=acc, keepdims=True),
        functools.partial(np.subtract, acc, input_zero_point * count, out=acc),
        _requantize(acc.reshape(out.shape), (multiplier << p) // count, shift - p, "double",
                    tmp.reshape(out.shape), output_zero_point, INT8_MIN, INT8_MAX, out))


def _mean_regions(shape: tuple[int, ...], dim: Sequence[int]) -> Regions:
    """mean_int8's workspace: the int64 sums (keeping the reduced dims) and a temporary."""
    kept = _kept_shape(shape, dim)
    return {"acc": (kept, np.int64), "tmp": (kept, np.int64)}


def _mean_scratch(self: np.ndarray, dim: Sequence[int], **_: object) -> int:
    return workspace_bytes(*_mean_regions(self.shape, dim).values())


# -- table lookup ---------------------------------------------------------------------------------


def lookup_int8(self: np.ndarray, table: np.ndarray, *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
    """out = table[uint8(self)]: any int8 -> int8 elementwise function as TFLite's 256-entry
    LUT (its layout: entry i for the int8 value whose byte is i). TFLite's int8 LOGISTIC and
    TANH are such tables; its HARD_SWISH is exactly one too. ``toolchain.quantize.fixed_point``
    computes them (``sigmoid_table``, ``tanh_table``, ``hardswish_table``)."""
    index = Workspace(scratch).take(self.shape, np.intp)  # np.take would convert uint8 indices
    return _sequence(functools.partial(np.copyto, index, self.view(np.uint8)),
                     functools.partial(np.take, table, index, out=out, mode="wrap"))


def _lookup_scratch(self: np.ndarray, **_: object) -> int:
    return workspace_bytes((self.shape, np.intp))


# -- softmax --------------------------------------------------------------------------------------


def _srdhm(a: np.ndarray, b: np.ndarray | int, out: np.ndarray) -> Bound:
    """out = SaturatingRoundingDoublingHighMul(a, b) = (a * b + 2**30) >> 31 (never both
    -2**31 here)."""
    return _sequence(functools.partial(np.multiply, a, b, out=out),
                     functools.partial(np.add, out, 1 << 30, out=out),
                     functools.partial(np.right_shift, out, 31, out=out))


def _saturating_shift(x: np.ndarray, exponent: int) -> Bound:
    """x = SaturatingRoundingMultiplyByPOT<exponent > 0>(x) on int32 values, in place:
    clamping x to +-2**(31 - exponent) first makes the out-of-range results +-2**31, which the
    final clamp saturates."""
    bound = 1 << (31 - exponent)
    return _sequence(functools.partial(np.clip, x, np.int64(-bound), np.int64(bound), out=x),
                     functools.partial(np.left_shift, x, exponent, out=x),
                     functools.partial(np.clip, x, np.int64(-1 << 31), np.int64((1 << 31) - 1),
                                       out=x))


def _reciprocal(total: np.ndarray, row: dict[str, np.ndarray]) -> Bound:
    """Per row, TFLite's GetReciprocal(total, 12 integer bits) into row["scale"] (Q0.31) and
    the output's RoundingDivideByPOT exponent (35 - headroom) into row["shift"], its half into
    row["half"]: the sum normalized to [1, 2) (its bit length from frexp, exact below 2**53),
    then gemmlowp's one_over_one_plus_x_for_x_in_0_1, three Newton-Raphson steps in Q2.29."""
    a, hd, x, t, shift = row["a"], row["hd"], row["scale"], row["t"], row["shift"]
    steps = [functools.partial(np.copyto, row["float"], total),
             functools.partial(np.frexp, row["float"], out=(row["float"], row["bits"])),
             functools.partial(np.copyto, shift, row["bits"]),
             functools.partial(np.subtract, 32, shift, out=shift),  # headroom + 1
             functools.partial(np.left_shift, total, shift, out=a),
             functools.partial(np.subtract, a, 1 << 31, out=a),  # x - 1 in Q0.31, >= 0
             functools.partial(np.add, a, 1 << 31, out=hd),  # RoundingHalfSum(a, One)
             functools.partial(np.right_shift, hd, 1, out=hd),
             _srdhm(hd, -1010580540, x),  # -32/17
             functools.partial(np.add, x, 1515870810, out=x)]  # 48/17
    for _ in range(3):
        steps += [_srdhm(hd, x, t), functools.partial(np.subtract, 1 << 29, t, out=t),
                  _srdhm(x, t, t), _saturating_shift(t, 2),
                  functools.partial(np.add, x, t, out=x)]
    steps += [_saturating_shift(x, 1),
              functools.partial(np.subtract, 35, shift, out=shift),
              functools.partial(np.left_shift, 1, shift, out=row["half"]),
              functools.partial(np.right_shift, row["half"], 1, out=row["half"])]
    return _sequence(*steps)


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
    return _sequence(
        functools.partial(np.maximum.reduce, self, axis=dim, keepdims=True, out=buf["top8"]),
        functools.partial(np.copyto, top, buf["top8"]),
        functools.partial(np.copyto, index, self),
        functools.partial(np.subtract, top, index, out=index),
        functools.partial(np.take, exps, index, out=value, mode="wrap"),
        functools.partial(np.add, value, 1 << 11, out=index),  # Rescale<12>: e >= 0
        functools.partial(np.right_shift, index, 12, out=index),
        functools.partial(np.sum, index, axis=dim, keepdims=True, out=total),
        _reciprocal(total, buf),
        _srdhm(value, buf["scale"], value),
        functools.partial(np.add, value, buf["half"], out=value),
        functools.partial(np.right_shift, value, buf["shift"], out=value),
        _store(value, INT8_MIN, INT8_MIN, INT8_MAX, out))


def _softmax_scratch(self: np.ndarray, dim: int, **_: object) -> int:
    return workspace_bytes(*_softmax_regions(self.shape, dim).values())


KERNELS: dict[str, Kernel] = {
    "nee::quantize_per_tensor.out": Kernel.prepared(quantize_per_tensor, INT8,
                                                    scratch=_quantize_scratch),
    "nee::dequantize_per_tensor.out": Kernel.prepared(dequantize_per_tensor, FLOAT),
    "nee::dequantize_per_channel.out": Kernel.prepared(dequantize_per_channel, FLOAT),
    "nee::conv2d_int8.out": Kernel.prepared(conv2d_int8, INT8, scratch=_conv_scratch),
    "nee::linear_int8.out": Kernel.prepared(linear_int8, INT8, scratch=_linear_scratch),
    "nee::add_int8.out": Kernel.prepared(add_int8, INT8, scratch=_binary_scratch),
    "nee::mul_int8.out": Kernel.prepared(mul_int8, INT8, scratch=_binary_scratch),
    "nee::avg_pool2d_int8.out": Kernel.prepared(avg_pool2d_int8, INT8,
                                                scratch=_avg_pool_scratch),
    "nee::mean_int8.out": Kernel.prepared(mean_int8, INT8, scratch=_mean_scratch),
    "nee::lookup_int8.out": Kernel.prepared(lookup_int8, INT8, scratch=_lookup_scratch),
    "nee::softmax_int8.out": Kernel.prepared(softmax_int8, INT8, scratch=_softmax_scratch),
}
