"""Neural-network kernels: convolution, pooling, batch/layer/group norm, embedding.

Spatial ops share :class:`_Window` (kernel/stride/padding/dilation geometry). Convolution is one
BLAS matmul over an im2col column buffer (built with one strided copy of the input padded into
scratch, or at stride 1 and the input's width of a flat copy of it between zero margins; 1x1
convs read the input directly). Depthwise convolution and max/avg pooling instead
combine taps over stride phase planes of the input (``_phase_taps``), so that each tap is one
long contiguous run; where numpy's per-call cost dominates (few positions per channel and tap),
depthwise convolution is one ``einsum`` over a strided window view of a channels-last copy (over
a small input, one ``einsum`` over a dense matrix of its weights made at load), and
pooling at stride 1 or over non-overlapping unpadded windows combines along H, then along W.
Max pooling with indices walks strided tap views (``_Window.taps``).
All but batch norm and max pooling with indices are prepared at load (``Kernel.prepared``):
views and geometry are made once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_py.kernels import Bound, Kernel, elementwise, linalg, long_loops, rules, run_all, then
from runtime_py.kernels._common import (
    FLOAT,
    INT8,
    NUMERIC,
    WORKSPACE_ALIGN,
    Workspace,
    copier,
    expand_param,
    f32,
    gather_copier,
    out_shaped,
    view_as,
    workspace_bytes,
)
from runtime_py.kernels.indexing import constant_pad_nd, take

IntList = Sequence[int] | int


@dataclass(frozen=True)
class _Window:
    """2-D sliding-window geometry; the output size comes from the pre-allocated out."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    out_hw: tuple[int, ...]

    @classmethod
    def of(cls, kernel: IntList, stride: IntList, padding: IntList, dilation: IntList,
           out_hw: tuple[int, ...]) -> _Window:
        kernel = expand_param(kernel, 2)
        return cls(kernel, expand_param(stride or kernel, 2), expand_param(padding, 2),
                   expand_param(dilation, 2), tuple(out_hw))

    def pads(self, hw: Sequence[int]) -> tuple[tuple[int, int], ...] | None:
        """(before, after) H/W padding: ``padding`` before, what the last window needs after;
        None if no padding is needed."""
        pads = tuple((p, max(0, (n - 1) * s + d * (k - 1) + 1 - size - p))
                     for size, k, s, p, d, n in zip(hw, self.kernel, self.stride, self.padding,
                                                    self.dilation, self.out_hw, strict=True))
        return pads if any(map(any, pads)) else None

    def taps(self, padded: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
        """(i, j, view of ``padded`` under kernel tap (i, j) for every output position)."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        ho, wo = self.out_hw
        for i in range(kh):
            for j in range(kw):
                yield i, j, padded[..., i * dh: i * dh + (ho - 1) * sh + 1: sh,
                                   j * dw: j * dw + (wo - 1) * sw + 1: sw]

    def columns(self, padded: np.ndarray) -> np.ndarray:
        """Zero-copy (..., KH, KW, Ho, Wo) view: every tap's window positions (im2col)."""
        *lead, s_h, s_w = padded.strides
        (sh, sw), (dh, dw) = self.stride, self.dilation
        return np.lib.stride_tricks.as_strided(
            padded, (*padded.shape[:-2], *self.kernel, *self.out_hw),
            (*lead, dh * s_h, dw * s_w, sh * s_h, sw * s_w), writeable=False)

    def starts(self, axis: int) -> np.ndarray:
        """Unpadded input coordinate where each output window starts along H (0) or W (1)."""
        return np.arange(self.out_hw[axis]) * self.stride[axis] - self.padding[axis]


def _padded_shape(shape: Sequence[int], pads: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    (top, bottom), (left, right) = pads
    return (*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)


def _padding(x: np.ndarray, pads: tuple[tuple[int, int], ...] | None, value: float,
             ws: Workspace) -> tuple[np.ndarray, Bound]:
    """(a workspace region for ``x`` padded by ``pads``, the call filling it: border with
    ``value``, interior with ``x``); ``x`` itself and a no-op if ``pads`` is None."""
    if pads is None:
        return x, _nothing
    buf = ws.take(_padded_shape(x.shape, pads), x.dtype)
    return buf, _fill_padded(buf, x, pads, value)


def _fill_padded(buf: np.ndarray, x: np.ndarray, pads: tuple[tuple[int, int], ...] | None,
                 value: float) -> Bound:
    """The call writing ``x`` into the (..., H, W) view ``buf`` inside a border of ``value``
    (``pads``: (before, after) per dim; None: no border)."""
    (top, bottom), (left, right) = pads or ((0, 0), (0, 0))
    return constant_pad_nd(x, (left, right, top, bottom), value, out=buf)


def _nothing() -> None:
    """A call with nothing to do."""


def _pad(x: np.ndarray, pads: tuple[tuple[int, int], ...] | None, value: float,
         ws: Workspace) -> np.ndarray:
    """``x`` padded into a workspace region now (see ``_padding``)."""
    padded, fill = _padding(x, pads, value, ws)
    fill()
    return padded


def _batched(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Views with a leading batch dim added to unbatched (C, H, W) arrays."""
    return tuple(a[None] if a.ndim == 3 else a for a in arrays)


@dataclass(frozen=True)
class _ConvPlan:
    """Geometry and workspace layout of one 2-D convolution call (cached per call signature)."""

    win: _Window
    out_shape: tuple[int, ...]  # of the 2-D problem
    pads: tuple[tuple[int, int], ...] | None  # input padding, if needed
    padded: tuple[int, ...] | None  # padded input, if needed; depthwise: its phase planes
    work: tuple[int, ...] | None  # im2col columns (for ``tile`` output rows), with the bias
    # row if ``ones``; a 1x1 convolution's input copy with it; depthwise: accumulator and
    # product runs
    depthwise: bool
    tile: int  # output rows per im2col matmul or depthwise einsum band, or channels per
    # depthwise block (all of them unless a budget or the block bytes forced tiles)
    channels_last: bool = False  # depthwise einsum: ``padded`` and the ``work`` accumulator
    # have the channels last
    ones: bool = False  # the columns end in a row of ones that the bias, appended to the
    # weight as a column, multiplies (BIAS_IN_PRODUCT)
    flat: bool = False  # the columns come from ``padded`` as a flat copy of the input with zero
    # margins (``column_source``, FLAT_COLUMNS), not from the input padded in 2-D
    dense: bool = False  # depthwise: one einsum over a dense matrix (``_depthwise_dense``);
    # ``padded`` is the input's channels-last copy, ``work`` the output's
    shifted: bool = False  # depthwise: one einsum per channel block over the input's
    # column-shifted copies (``_depthwise_shifted``), which ``padded`` holds
    out_last: bool = False  # out is stored channels-last (``channels_last``): the products
    # write (positions, channels) matrices; the depthwise einsum accumulates in out itself

    @property
    def adds_bias(self) -> bool:
        """Whether the computation adds the bias itself (not as a pass over out after it)."""
        return self.ones or self.channels_last or self.dense

    @property
    def direct(self) -> bool:
        """A 1x1, stride-1, unpadded convolution: its input is its column matrix."""
        return not self.depthwise and self.win.kernel == self.win.stride == (1, 1) and \
            self.pads is None

    @property
    def nbytes(self) -> int:
        return workspace_bytes(*((s, "float32") for s in (self.padded, self.work) if s))


# Depthwise convolution works in channel blocks whose planes and accumulators fit in this many
# bytes (a typical L2 cache): 1.1-1.8x faster than whole-tensor passes on mobilenet-sized layers.
DEPTHWISE_BLOCK_BYTES = 512 * 1024

# Depthwise convolution is one einsum over a channels-last copy (``_depthwise_einsum``) when its
# output positions (all images) are at most EINSUM_POSITIONS x channels x taps: numpy then runs
# each tap of an output row as one multiply-add over out_w x C contiguous values, in one call,
# where the per-tap passes over channels-first planes cost two calls per tap and broadcast each
# channel's weight (numpy's slower path); the copies in and out of channels-last grow with the
# positions. Against the per-tap passes (1 thread, 32 layers of mobilenets, efficientnet and
# ConvNeXt, 3x3-7x7, 16-960 channels, stride 1 and 2, bias included): 0.14-0.6x up to a ratio
# of 0.25, 0.58-0.87x at 0.25-0.45, 0.97-1.37x at 0.67-0.68, 1.1-1.7x from 1.4 up.
EINSUM_POSITIONS = 0.5

# Depthwise convolution over a small input, at most DENSE_POSITIONS x taps positions, whose
# (output positions x input positions x channels) matrix of weights takes at most DENSE_BYTES,
# is one einsum over that matrix, made at load (``_depthwise_dense``): where a kernel covers most
# of a map (5 x 5 over 3 x 3: mobilenet_v3_small's last stage) most taps of the einsum above
# read padding, and the dense product skips them. 1 thread, alone, dense / the einsum above:
# 5 x 5 over 3 x 3 with 480-1152 channels 0.54-0.57x, 3 x 3 over 3 x 3 0.88x. With more input
# positions than taps the matrix outgrows the einsum's tiled weights and comes from memory in a
# model: 288 channels over 6 x 6 at stride 2 (5 x 5) took 0.86x alone, 1.40x in
# mobilenet_v3_small. Whole models (``bench/choices.py --choice dense-depthwise``, 6 rounds):
# mobilenet_v3_large 0.988, efficientnet_b0 0.990, mobilenet_v3_small 0.979-0.991, mnasnet
# 0.994, mobilenet_v2 0.999; mobilenet_v3_small's two 576-channel layers 0.76x in the model.
DENSE_POSITIONS = 1.0
DENSE_BYTES = 512 * 1024
DENSE_DEPTHWISE = True

# A stride-1, undilated depthwise convolution as wide as its input (``flat_runs``) that takes
# neither einsum above (many positions per channel and tap) is one einsum per channel block over kw
# copies of the input, copy j shifted by column tap j (``_depthwise_shifted``): every tap is then
# one contiguous run at a row offset of its copy, and the einsum multiplies and sums all taps of a
# channel in one pass each (numpy's per-tap multiply and add take two, the multiply broadcasting a
# weight per channel row), writing out directly: 0.71-0.74x the per-tap passes' time alone (16-144
# channels over 48 x 48 to 112 x 112). An einsum straight over the phase planes, without the copies,
# took 15-22x its time: numpy then loops over the taps one element apart innermost.
SHIFTED_DEPTHWISE = True

# The einsum and dense depthwise paths add their bias to the channels-last accumulator, whose
# rows of W x C values take it as one row tiled at load, before the transposing copy to out;
# adding it in that copy broadcasts a (C, 1, 1) bias over rows of W values, which costs numpy
# per row (``_from_channels_last``). Alone, 1 thread, accumulator to out: 192 x 12 x 12 30.6
# -> 21.0 us, 384 x 6 x 6 15.9 -> 11.1 us, 960 x 3 x 3 15.7 -> 11.1 us, 144 x 24 x 24 69.5 ->
# 66.9 us. Whole models, on / off (``bench/choices.py --choice channels-last-bias``, 4 rounds of
# 60 pairs): mobilenet_v2 0.979 (rounds 0.972-0.992), mobilenet_v3_small 0.995, efficientnet_b0
# 0.997; the outputs are the same bits.
CHANNELS_LAST_BIAS = True

# The channels-last depthwise einsum zeroes only its band buffer's padding at each run, not the
# whole band (``_band_margins``; the input's copies overwrite the rest), unless the padding is
# more than MARGIN_SHARE of it (small maps: then one fill is cheaper than several). Alone, 1
# thread, margins / whole band (9 rounds): stride-2 layers of mobilenet_v2 0.92-0.95x, its
# stride-1 ones 0.95-1.01x. Whole models, on / off (``bench/choices.py --choice zero-margins``,
# 6 rounds of 60 pairs, the Zen 3 machine): mobilenet_v2 0.992, efficientnet_b0 0.993,
# mobilenet_v3_small 0.995; the same bits.
ZERO_MARGINS = True
MARGIN_SHARE = 0.5

# A convolution over at most VECTOR_POSITIONS output positions per image (a squeeze-excite
# block's, over a 1 x 1 map) multiplies its weight by a vector. Its bias is one add over the
# few outputs, not a ones row copied under the input (BIAS_IN_PRODUCT): whole models, on / off
# (``bench/choices.py --choice vector-bias``, 6 rounds of 60 pairs, the Zen 3 machine of
# docs/cpu-speed.md) mobilenet_v3_large 0.971, mobilenet_v3_small and efficientnet_b0 0.988. BLAS's
# matrix-vector product reads the weight once, in order; whether the dot before it
# (``prefetches``) still pays depends on the machine (PREFETCH_VECTORS).
VECTOR_POSITIONS = 1

# Whether a convolution's weight is prefetched before a matrix-vector product too. None: where
# numpy's BLAS has OpenBLAS's small-matrix kernel (``linalg.small_kernel``, its AVX-512 cores),
# as measured on such a machine (without the dot / with it: mobilenet_v3_small 1.025,
# mobilenet_v3_large 1.036, efficientnet_b0 0.994), and not with the Haswell kernels (the Zen 3
# machine, ``--choice vector-prefetch``, 6 rounds of 60 pairs, with it / without:
# mobilenet_v3_large 1.034, mobilenet_v3_small 1.017, efficientnet_b0 1.008, mobilenet_v2 (no
# such layer) 0.994). Alone, cache-warm, with both changes and a fused hardsigmoid: 64 -> 240
# 12.7 -> 10.5 us, 144 -> 576 27.8 -> 19.0 us.
PREFETCH_VECTORS: bool | None = None

# A (non-grouped) convolution's bias is added by its product: the weight gains the bias as a
# last column and the columns a last row of ones. numpy adds a per-channel (C, 1, 1) bias at
# half its speed for a same-shaped operand (the broadcast operand is buffered), and the bias row
# costs one column of the product: the convolution 0.75-0.96x the time of product + add (cnn's
# and mobilenets' layers). A 1x1 convolution, which has no columns, then copies its input
# under a ones row: worth it where it has at most as many input as output channels (144 -> 24
# over 24x24: 1.07x).
BIAS_IN_PRODUCT = True


# A stride-1 convolution whose output is as wide as its input ("same" padding along W) builds
# its im2col columns from a flat copy of each input channel between zero margins: each tap's
# columns are then one contiguous run of Ho x W values, where the 2-D padded copy gives runs of
# W (numpy's per-run cost dominates short runs), and the values a run wraps in from the next or
# previous row are zeroed after (``flat_source``, ``column_copies``; the same columns, bit for
# bit). Column builds, 1 thread: 16 -> 16 over 32 x 32 (cnn) 38 -> 17 us, 3 -> 16 10 -> 6 us,
# resnet18's 3x3 layers 0.33-0.6x (64 over 56 x 56: 433 -> 263 us); whole models, on / off
# (``bench/choices.py --choice flat-columns``, 3 runs of 60 pairs): cnn 0.87, resnet18 0.93.
FLAT_COLUMNS = True


@functools.lru_cache(maxsize=1024)
def _conv_plan(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: IntList,
               padding: IntList, dilation: IntList, groups: int,
               budget: int | None = None, bias: bool = False,
               layout: tuple[bool, bool] = (False, False)) -> _ConvPlan:
    """The plan of a conv1d/conv2d call (conv1d as conv2d over a height-1 image); int-list args
    are tuples (hashable), as the runtime passes them. With a ``budget`` (scratch bytes), the
    im2col columns cover as many output rows as fit (at least one) instead of all of them.
    With a ``bias``, an ungrouped convolution adds it in its product (BIAS_IN_PRODUCT).
    A stride-1 convolution as wide as its input copies its columns from a flat copy of the input
    (FLAT_COLUMNS). Depthwise convolution is one einsum over channels-last copies where it has
    few positions per channel and tap (EINSUM_POSITIONS), else (or if those do not fit the
    budget) works on as many channels at a time as fit in the budget and in
    DEPTHWISE_BLOCK_BYTES (at least one). ``layout``: whether the input and out are stored
    channels-last (``channels_last``); then depthwise convolution is the channels-last einsum
    at any size, and the products of the others write out as (positions, channels)."""
    if len(w_shape) == 3:
        x_shape, w_shape = (*x_shape[:2], 1, x_shape[2]), (*w_shape[:2], 1, w_shape[2])
        stride, padding, dilation = ((first, *expand_param(v, 1)) for first, v in
                                     ((1, stride), (0, padding), (1, dilation)))
    else:
        stride, padding, dilation = (expand_param(v, 2) for v in (stride, padding, dilation))
    n, c, *hw = x_shape
    o, _, kh, kw = w_shape
    out_hw = tuple((size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in
                   zip(hw, (kh, kw), stride, padding, dilation, strict=True))
    win = _Window((kh, kw), stride, padding, dilation, out_hw)
    out_shape = (n, o, *out_hw)
    pads = win.pads(hw)
    depthwise = groups == c == o
    padded = None if pads is None else _padded_shape(x_shape, pads)
    tile = out_hw[0]
    if depthwise:
        q, p = math.prod(hw), math.prod(out_hw)
        if any(layout) and dilation[1] == 1:
            acc = None if layout[1] else (n, out_hw[0], out_hw[1] * c)
            room = DEPTHWISE_BLOCK_BYTES if budget is None else budget - (
                workspace_bytes((acc, "float32")) if acc else 0)
            rows = _band_rows(n, c, win, room - WORKSPACE_ALIGN)
            plan = _ConvPlan(win, out_shape, pads, _column_phases(n, c, win, rows), acc,
                             depthwise=True, tile=rows, channels_last=True,
                             out_last=layout[1])
            if budget is None or plan.nbytes <= budget:
                return plan
        if DENSE_DEPTHWISE and q <= DENSE_POSITIONS * kh * kw and p * q * c * 4 <= DENSE_BYTES:
            plan = _ConvPlan(win, out_shape, pads, (n, q, c), (n, p, c), depthwise=True, tile=c,
                             dense=True)
            if budget is None or plan.nbytes <= budget:
                return plan
        if n * p <= EINSUM_POSITIONS * c * kh * kw and dilation[1] == 1:
            plan = _ConvPlan(win, out_shape, pads, _column_phases(n, c, win),
                             (n, out_hw[0], out_hw[1] * c), depthwise=True,
                             tile=out_hw[0], channels_last=True)
            if budget is None or plan.nbytes <= budget:
                return plan
        room = DEPTHWISE_BLOCK_BYTES if budget is None else min(budget, DEPTHWISE_BLOCK_BYTES)
        if SHIFTED_DEPTHWISE and flat_runs(win):
            copies = _shifted_copies((n, 1), win, hw)
            tile = max(1, min(c, (room - WORKSPACE_ALIGN) // (math.prod(copies) * 4)))
            return _ConvPlan(win, out_shape, pads, _shifted_copies((n, tile), win, hw), None,
                             depthwise=True, tile=tile, shifted=True)
        planes, run = _phase_planes((n, 1), win)
        per_channel = (math.prod(planes) + 2 * math.prod(run)) * 4
        tile = max(1, min(c, (room - 2 * WORKSPACE_ALIGN) // per_channel))
        padded, run = _phase_planes((n, tile), win)
        return _ConvPlan(win, out_shape, pads, padded, (2, *run), depthwise=True, tile=tile)
    direct = (kh, kw) == (1, 1) and pads is None and stride == (1, 1)
    ones = BIAS_IN_PRODUCT and bias and groups == 1 and (not direct or c <= o) and \
        math.prod(out_hw) > VECTOR_POSITIONS
    flat = not direct and flat_columns(win)
    if flat:
        padded = flat_shape(x_shape, win)
    if direct:
        work = (n, c + 1, math.prod(hw)) if ones else None
        if ones and budget is not None and budget < workspace_bytes((work, "float32")):
            ones, work = False, None
    else:
        depth = c * kh * kw + ones
        if budget is not None:
            row = n * depth * out_hw[1] * 4  # float32 column bytes per output row
            room = budget - (workspace_bytes((padded, "float32")) if padded else 0)
            tile = max(1, min(out_hw[0], room // row))
        work = (n, depth, tile, out_hw[1])
    return _ConvPlan(win, out_shape, pads, padded, work, False, tile, ones=ones, flat=flat,
                     out_last=layout[1] and groups == 1)


def _column_phases(n: int, c: int, win: _Window, rows: int | None = None
                   ) -> tuple[int, ...]:
    """The (N, rows, stride_w, columns, C) channels-last buffer of ``_depthwise_einsum`` for
    ``rows`` output rows (all of them by default): phase q holds the padded input's columns
    b * stride_w + q, as many as the windows read."""
    (kh, kw), (sh, sw), (dh, _), (ho, wo) = win.kernel, win.stride, win.dilation, win.out_hw
    return (n, ((rows or ho) - 1) * sh + (kh - 1) * dh + 1, sw, wo + -(-kw // sw) - 1, c)


def _band_rows(n: int, c: int, win: _Window, room: int) -> int:
    """Output rows per band of ``_depthwise_einsum`` whose buffer fits ``room`` bytes (at
    least one row, at most all)."""
    (kh, _), (sh, _), (dh, _), (ho, _) = win.kernel, win.stride, win.dilation, win.out_hw
    row = math.prod(_column_phases(n, c, win, 1)[2:]) * n * 4  # bytes of one input row
    return max(1, min(ho, (room // row - (kh - 1) * dh - 1) // sh + 1))


def _phase_planes(lead: Sequence[int], win: _Window) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes of (the stride_h * stride_w phase planes of a padded input, one tap's run).

    Plane (p, q) holds padded[..., a * stride_h + p, b * stride_w + q]. Every tap then reads one
    plane at a fixed offset, and with a spare row per plane its window over all output rows is
    one contiguous run of out_h x plane-width elements (a few columns per row past the output
    width are computed and dropped). ``lead``: the (n, c) dims."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = win.kernel, win.stride, win.dilation, win.out_hw
    hq, wq = ho + dh * (kh - 1) // sh + 1, wo + dw * (kw - 1) // sw
    return (sh * sw, *lead, hq, wq), (*lead, ho * wq)


def _phase_taps(x: np.ndarray, win: _Window, value: float, ws: Workspace
                ) -> tuple[list[np.ndarray], Bound, Callable[[np.ndarray], np.ndarray]]:
    """(each tap's run over the phase planes of ``x`` padded with ``value``, the call filling
    the planes, a function from a run-shaped array to its output-shaped view)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = win.kernel, win.stride, win.padding, win.dilation
    shape, run_shape = _phase_planes(x.shape[:-2], win)
    planes = ws.take(shape, x.dtype)
    hq, wq = shape[-2:]
    fills = [gather_copier(*_phase_fill(x, planes[p * sw + q], (p - ph, q - pw), (sh, sw)))
             for p in range(sh) for q in range(sw)]
    flat = planes.reshape(*shape[:-2], hq * wq)
    taps = []
    for r, q in ((i * dh, j * dw) for i in range(kh) for j in range(kw)):
        start = r // sh * wq + q // sw
        taps.append(flat[r % sh * sw + q % sw, ..., start:start + run_shape[-1]])

    def fill() -> None:
        planes.fill(value)
        for copy in fills:
            copy()

    def valid(run: np.ndarray) -> np.ndarray:
        return run.reshape(*run_shape[:-1], win.out_hw[0], wq)[..., :win.out_hw[1]]

    return taps, fill, valid


def _conv_scratch(input: np.ndarray, weight: np.ndarray, stride: IntList, padding: IntList,
                  dilation: IntList, groups: int, budget: int | None = None,
                  bias: np.ndarray | None = None, out: np.ndarray | None = None,
                  **_: object) -> int:
    layout = (channels_last(input), out is not None and channels_last(out))
    return _conv_plan(input.shape, weight.shape, stride, padding, dilation, groups,
                      budget, bias is not None, layout).nbytes


def _shifted_copies(lead: Sequence[int], win: _Window, hw: Sequence[int]) -> tuple[int, ...]:
    """Shape (kw, n, c, length) of ``_depthwise_shifted``'s copies: per channel the padded
    input's rows flat, between margins of padding_w values."""
    (_, kw), (ph, pw) = win.kernel, win.padding
    return (kw, *lead, (hw[0] + 2 * ph) * hw[1] + 2 * pw)


def _depthwise_shifted(x: np.ndarray, weight: np.ndarray, plan: _ConvPlan,
                       scratch: np.ndarray | None, out: np.ndarray) -> Bound:
    """Stride 1, as wide as the input (SHIFTED_DEPTHWISE, ``flat_runs``): per block of
    ``plan.tile`` channels, copy j of the block holds the padded input's rows flat, shifted left
    by column tap j, so tap (i, j) over all output rows is one run of out_h x W values at row i
    of copy j; one einsum sums tap x weight over all taps into out."""
    copies = Workspace(scratch).take(plan.padded, out.dtype)
    blocks = [_shifted_block(x[:, c:c + plan.tile], weight[c:c + plan.tile], plan.win,
                             copies[:, :, :min(plan.tile, x.shape[1] - c)],
                             out[:, c:c + plan.tile])
              for c in range(0, x.shape[1], plan.tile)]
    return run_all(*blocks)


def _shifted_block(x: np.ndarray, weight: np.ndarray, win: _Window, copies: np.ndarray,
                   out: np.ndarray) -> Bound:
    """``_depthwise_shifted`` over one channel block: the calls filling ``copies`` (kw, n, c,
    length; ``_shifted_fills``), then the einsum over their taps into out."""
    n, c, _, w = x.shape
    (kh, kw), (_, pw), (ho, _) = win.kernel, win.padding, win.out_hw
    item = copies.itemsize
    s_j, s_n, s_c, _ = copies.strides
    runs = view_as(out, (n, c, ho * w))  # numpy's loops then run the length of the image
    shape, strides = ((ho * w,), (item,)) if runs is not None else ((ho, w), (w * item, item))
    taps = np.lib.stride_tricks.as_strided(copies[..., pw:], (kh, kw, n, c, *shape),
                                           (w * item, s_j, s_n, s_c, *strides),
                                           writeable=False)
    weights = np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0))  # (kh, kw, c), at load
    return run_all(*_shifted_fills(x, win, copies),
                   functools.partial(np.einsum, "ijnc...,ijc->nc...", taps, weights,
                                     out=out if runs is None else runs))


def _shifted_fills(x: np.ndarray, win: _Window, copies: np.ndarray) -> list[Bound]:
    """The calls filling ``copies``: copy j holds x shifted by j - padding_w columns, its
    margins zeroed before the copies and the values it wrapped in from a neighbouring row
    (``_wrapped``) after."""
    n, c, h, w = x.shape
    (_, kw), (ph, pw) = win.kernel, win.padding
    starts = [2 * pw + ph * w - j for j in range(kw)]  # where x's first value lands in copy j
    rows = copies[..., pw:pw + (h + 2 * ph) * w].reshape(kw, n, c, 1, h + 2 * ph, w)
    return [functools.partial(copies[..., :max(starts)].fill, 0),
            functools.partial(copies[..., min(starts) + h * w:].fill, 0),
            *(copier(copies[j, ..., start:start + h * w].reshape(x.shape), x)
              for j, start in enumerate(starts)),
            *(functools.partial(v.fill, 0) for v in _wrapped(rows.transpose(1, 2, 3, 0, 4, 5),
                                                              win))]


def _depthwise(x: np.ndarray, weight: np.ndarray, plan: _ConvPlan,
               scratch: np.ndarray | None, out: np.ndarray) -> Bound:
    """groups == C_in == C_out, in blocks of ``plan.tile`` channels that reuse one scratch."""
    blocks = [_depthwise_block(x[:, c:c + plan.tile], weight[c:c + plan.tile], plan.win,
                               Workspace(scratch), out[:, c:c + plan.tile])
              for c in range(0, x.shape[1], plan.tile)]
    return blocks[0] if len(blocks) == 1 else functools.reduce(then, blocks)


def _depthwise_block(x: np.ndarray, weight: np.ndarray, win: _Window, ws: Workspace,
                     out: np.ndarray) -> Bound:
    """Per-tap multiply-accumulate over the input's phase planes (``_phase_taps``), so numpy's
    loops run the length of the image, not of a row."""
    taps, fill, valid = _phase_taps(x, win, 0, ws)
    acc, prod = ws.take((2, *taps[0].shape), out.dtype)
    w = weight.reshape(weight.shape[0], -1, 1)
    return _tap_sum(fill, taps, [w[:, t] for t in range(len(taps))], acc, prod, valid(acc), out)


def tap_mac(fill: Bound, taps: Sequence[np.ndarray], weights: Sequence[np.ndarray],
            acc: np.ndarray, prod: np.ndarray) -> Bound:
    """The call: ``fill`` (the taps' source), then acc = sum of tap * weight over the taps."""
    (first, w0), *rest = zip(taps, weights, strict=True)

    def run() -> None:
        fill()
        np.multiply(first, w0, acc)
        for tap, wt in rest:
            np.multiply(tap, wt, prod)
            np.add(acc, prod, acc)

    return run


def _tap_sum(fill: Bound, taps: Sequence[np.ndarray], weights: Sequence[np.ndarray],
             acc: np.ndarray, prod: np.ndarray, result: np.ndarray, out: np.ndarray) -> Bound:
    """``tap_mac``, then ``result`` (a view of acc) copied to out."""
    return then(tap_mac(fill, taps, weights, acc, prod), copier(out, result))


def _depthwise_einsum(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                      plan: _ConvPlan, scratch: np.ndarray | None, out: np.ndarray) -> Bound:
    """One einsum over a channels-last copy of the padded input, its columns split into
    stride_w phases (``_column_phases``), per band of ``plan.tile`` output rows whose copy
    fits the block bytes (``_band_rows``): every tap of an output row then reads one
    contiguous run of out_w x C values, which numpy multiplies by the tap's weights tiled out_w
    times (made once, at load; taps past the kernel's width have zero weights) and
    accumulates; the accumulator is copied (plus the bias) to out, or is out itself where out
    is stored channels-last (``plan.out_last``). Width dilation 1 only."""
    ws = Workspace(scratch)
    buf = ws.take(plan.padded, out.dtype)
    acc = last_rows(out) if plan.out_last else ws.take(plan.work, out.dtype)
    _, _, sw, _, c = plan.padded
    (_, kw), wo = plan.win.kernel, plan.win.out_hw[1]
    tiled = np.zeros((plan.win.kernel[0], -(-kw // sw), sw, wo, c), out.dtype)
    for j in range(kw):
        tiled[:, j // sw, j % sw] = weight[:, 0, :, j].T[:, None, :]
    tiled = tiled.reshape(*tiled.shape[:3], wo * c)
    bands = [_einsum_band(x, tiled, plan.win, buf, acc[:, o:o + plan.tile], o)
             for o in range(0, plan.win.out_hw[0], plan.tile)]
    return run_all(*bands, _from_channels_last(acc, bias, out, plan.out_last))


def _einsum_band(x: np.ndarray, tiled: np.ndarray, win: _Window, buf: np.ndarray,
                 acc: np.ndarray, first: int) -> Bound:
    """``_depthwise_einsum`` over the output rows ``acc`` (N, rows, out_w x C) from ``first``
    on: the input rows they read copied into the head of ``buf`` (zero padding around), then
    the einsum."""
    n, rows, width = acc.shape
    (kh, _), (sh, sw), (dh, _), (ph, pw) = win.kernel, win.stride, win.dilation, win.padding
    band = buf[:, :(rows - 1) * sh + (kh - 1) * dh + 1]
    s_n, s_row, s_phase, s_col, s_c = band.strides
    windows = np.lib.stride_tricks.as_strided(
        band, (n, rows, kh, tiled.shape[1], sw, width),
        (s_n, sh * s_row, dh * s_row, s_col, s_phase, s_c), writeable=False)
    fills = [_phase_fill(x, band[:, :, q].transpose(0, 3, 1, 2), (first * sh - ph, q - pw),
                         (1, sw)) for q in range(sw)]
    margins = _band_margins(x.shape[2:], band, (first * sh - ph, -pw))

    def run() -> None:
        for margin in margins:
            margin.fill(0)
        for dst, src in fills:
            np.copyto(dst, src)
        np.einsum("nhijqx,ijqx->nhx", windows, tiled, out=acc)

    return run


def _band_margins(hw: Sequence[int], band: np.ndarray, origin: tuple[int, int]
                  ) -> list[np.ndarray]:
    """The parts of an ``_einsum_band`` buffer (N, rows, stride_w, columns, C) that no input
    value is copied to (its zero padding; ``origin``: the input row and column of phase 0's
    first value): they alone are zeroed at each run, not the whole band, unless they are most
    of it (ZERO_MARGINS, MARGIN_SHARE)."""
    _, rows, sw, cols, _ = band.shape
    r0, r1 = _span(hw[0], rows, origin[0], 1)
    views = [band[:, :r0], band[:, r1:]]
    for q in range(sw):
        c0, c1 = _span(hw[1], cols, origin[1] + q, sw)
        views += [band[:, r0:r1, q, :c0], band[:, r0:r1, q, c1:]]
    views = [v for v in views if v.size]
    whole = not ZERO_MARGINS or sum(v.size for v in views) > MARGIN_SHARE * band.size
    return [band] if whole else views


def _depthwise_dense(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                     plan: _ConvPlan, scratch: np.ndarray | None, out: np.ndarray) -> Bound:
    """out[n, c, o] = sum over input positions q of M[o, q, c] * x[n, c, q] (plus the bias),
    as one einsum over channels-last copies; M (``_dense_weights``) is made here, once."""
    ws = Workspace(scratch)
    xs, acc = ws.take(plan.padded, out.dtype), ws.take(plan.work, out.dtype)
    n, c, h, w = x.shape
    weights = _dense_weights(weight, plan.win, (h, w))
    fill = copier(xs.reshape(n, h, w, c), x.transpose(0, 2, 3, 1))
    finish = _from_channels_last(acc, bias, out)

    def run() -> None:
        fill()
        np.einsum("pqc,nqc->npc", weights, xs, out=acc)
        finish()

    return run


def _from_channels_last(acc: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
                        in_out: bool = False) -> Bound:
    """The call writing a channels-last accumulator (N, positions..., C) to out (N, C, H, W),
    plus the per-channel bias if any: added to the accumulator's rows of W x C values first,
    as a row tiled here, once (CHANNELS_LAST_BIAS), then copied (not if ``in_out``: the
    accumulator is out's own channels-last storage)."""
    n, c, h, w = out.shape
    result = acc.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    if bias is None:
        return _nothing if in_out else copier(out, result)
    if not CHANNELS_LAST_BIAS:
        return functools.partial(np.add, result, bias.reshape(-1, 1, 1), out)
    rows = acc.reshape(n * h, w * c)
    add = functools.partial(np.add, rows, np.tile(bias, w), rows)
    return add if in_out else then(add, copier(out, result))


def channels_last(a: np.ndarray) -> bool:
    """Whether a 4-D (N, C, H, W) array is stored channels-last, (N, H, W, C) row-major in
    memory, and not also row-major as it stands (one channel, or one position)."""
    return (a.ndim == 4 and a.transpose(0, 2, 3, 1).flags.c_contiguous
            and not a.flags.c_contiguous)


def stored_channels_last(a: np.ndarray) -> np.ndarray:
    """``a`` (N, C, H, W) as a view of a channels-last (N, H, W, C) copy (the layout of the
    channels_last pass's maps; ``channels_last`` is true of it)."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def last_rows(a: np.ndarray) -> np.ndarray:
    """The (N, H, W x C) view of a channels-last (N, C, H, W) array's storage."""
    n, c, h, w = a.shape
    return a.transpose(0, 2, 3, 1).reshape((n, h, w * c), copy=False)


def _dense_weights(weight: np.ndarray, win: _Window, hw: tuple[int, int]) -> np.ndarray:
    """(output positions, input positions, C): the weight each channel's output position
    gives each input position of an (H, W) map, 0 where its window has none (padding)."""
    (kh, kw), (dh, dw) = win.kernel, win.dilation
    m = np.zeros((*win.out_hw, *hw, weight.shape[0]), weight.dtype)
    for i in range(kh):
        rows = win.starts(0) + i * dh
        at_h = np.flatnonzero((rows >= 0) & (rows < hw[0]))[:, None]
        for j in range(kw):
            cols = win.starts(1) + j * dw
            at_w = np.flatnonzero((cols >= 0) & (cols < hw[1]))[None, :]
            m[at_h, at_w, rows[at_h], cols[at_w]] = weight[:, 0, i, j]
    return m.reshape(math.prod(win.out_hw), math.prod(hw), -1)


def _phase_fill(x: np.ndarray, plane: np.ndarray, origin: tuple[int, int],
                stride: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(region of ``plane``, view of ``x``) to copy so that plane[a, b] = x[a * sh + origin_h,
    b * sw + origin_w] wherever that is inside ``x`` (the rest stays zero padding)."""
    spans = [_span(*args) for args in zip(x.shape[-2:], plane.shape[-2:], origin, stride,
                                          strict=True)]
    if any(first == end for first, end in spans):  # the plane holds padding only
        return plane[..., :0, :0], x[..., :0, :0]
    dst = tuple(slice(first, end) for first, end in spans)
    src = tuple(slice(first * s + o, (end - 1) * s + o + 1, s)
                for (first, end), o, s in zip(spans, origin, stride, strict=True))
    return plane[(..., *dst)], x[(..., *src)]


def _span(size: int, limit: int, origin: int, stride: int) -> tuple[int, int]:
    """(first, end): the indices a < ``limit`` of a phase plane's axis whose a * stride +
    origin falls inside an input axis of ``size`` (first == end: none do)."""
    first = min(limit, max(0, -(origin // stride)))
    return first, max(first, min(limit, (size - origin + stride - 1) // stride))


def column_source(x: np.ndarray, win: _Window, pads: tuple[tuple[int, int], ...] | None,
                  flat: bool, buf: np.ndarray | None, value: float
                  ) -> tuple[np.ndarray, list[Bound]]:
    """(the im2col view (N, C, KH, KW, Ho, Wo) a convolution's columns are copied from, the
    calls preparing it): of ``x`` padded with ``value`` into ``buf``, in 2-D or as a flat copy
    between margins (``flat``, ``flat_source``); of ``x`` itself if it has no ``pads`` (no
    call). The float and int8 convolutions share it."""
    if flat:
        source, fill = flat_source(x, win, buf, value)
        return source, [fill]
    if pads is None:
        return win.columns(x), []
    padded = buf.reshape(_padded_shape(x.shape, pads))
    return win.columns(padded), [_fill_padded(padded, x, pads, value)]


def flat_columns(win: _Window) -> bool:
    """Whether a convolution's columns come from a flat copy of its input (FLAT_COLUMNS): at
    stride 1, as wide as its input (``flat_runs``)."""
    return FLAT_COLUMNS and flat_runs(win)


def flat_runs(win: _Window) -> bool:
    """Whether each tap of a window over a flat copy of the input is one run of out_h x W
    values (the values it wraps in from a neighbouring row aside, ``_wrapped``): at stride 1,
    undilated, as wide as the input."""
    (_, kw), (_, pw) = win.kernel, win.padding
    return win.stride == win.dilation == (1, 1) and 2 * pw == kw - 1


def flat_shape(x_shape: Sequence[int], win: _Window) -> tuple[int]:
    """The buffer of ``flat_source``: every channel after a margin, one margin after them."""
    n, c, h, w = x_shape
    margin = win.padding[0] * w + win.padding[1]
    return (n * c * (h * w + margin) + margin,)


def flat_source(x: np.ndarray, win: _Window, buf: np.ndarray, value: float
                ) -> tuple[np.ndarray, Bound]:
    """(the im2col view (N, C, KH, KW, Ho, Wo) of ``x`` copied into the flat ``buf``
    (``flat_shape``) between margins of ``value``, the call filling buf): each tap's view is one
    run of Ho x W values; those a run wraps in from a neighbouring row are set to ``value`` in
    the copied columns (``column_copies``)."""
    n, c, h, w = x.shape
    (kh, kw), (ph, pw), (ho, wo) = win.kernel, win.padding, win.out_hw
    margin = ph * w + pw
    run, item = h * w + margin, buf.itemsize  # a channel's elements: its margin, its values
    strided = np.lib.stride_tricks.as_strided
    margins = strided(buf, (n * c + 1, margin), (run * item, item))
    values = strided(buf[margin:], (n, c, h * w), (c * run * item, run * item, item))
    source = strided(buf, (n, c, kh, kw, ho, wo),
                     tuple(v * item for v in (c * run, run, w, 1, w, 1)), writeable=False)
    return source, run_all(functools.partial(margins.fill, value),
                           copier(values.reshape(x.shape), x))


def column_copies(cols: np.ndarray, source: np.ndarray, win: _Window, flat: bool,
                  value: float) -> list[Bound]:
    """The calls copying a tile's im2col columns from ``source`` (``gather_copier``), then, for
    a flat source (``flat_source``), setting the values its runs wrapped in to the padding
    ``value``."""
    return [gather_copier(cols, source),
            *(functools.partial(v.fill, value) for v in (_wrapped(cols, win) if flat else []))]


def _wrapped(cols: np.ndarray, win: _Window) -> list[np.ndarray]:
    """The views of flat columns (N, C, KH, KW, rows, Wo) that a tap's run took from the next
    or previous row: the first ``pad - j`` columns of tap column j < pad, the last ``j - pad``
    of j > pad; they must hold the padding value."""
    pad, wo = win.padding[1], win.out_hw[1]
    return [cols[..., j, :, :min(wo, pad - j)] if j < pad else
            cols[..., j, :, max(0, wo + pad - j):] for j in range(win.kernel[1]) if j != pad]


def _grouped(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, plan: _ConvPlan,
             groups: int, work: np.ndarray | None, out: np.ndarray) -> Bound:
    """One (batched) BLAS matmul per group and row tile over the column buffer (copied from
    ``x``, see ``column_source``), into out; with ``plan.ones``, the bias is the weight's last
    column and the columns' last row ones. Over few output positions, the weight is first
    streamed into the caches (``prefetches``)."""
    o = out.shape[1]
    w = weight.reshape(groups, o // groups, -1)
    if plan.ones:
        w = np.concatenate([w, bias.reshape(1, o, 1)], axis=2)
    products = _products(x, w, plan, groups, work, out)
    reads = prefetches(out.shape[2] * out.shape[3], [w])
    return run_all(*reads, products) if reads else products


def prefetches(positions: int, weights: Sequence[np.ndarray]) -> list[Bound]:
    """The calls streaming a convolution's ``weights`` into the caches before its products
    over ``positions`` output positions per image (PREFETCH_BYTES): one dot of each weight
    with itself, which reads it in order at memory speed; none for more positions or bytes,
    nor before a matrix-vector product unless the machine gains from it (PREFETCH_VECTORS)."""
    if positions > BLOCKED_POSITIONS or sum(w.nbytes for w in weights) > PREFETCH_BYTES or \
            (positions <= VECTOR_POSITIONS and not _prefetch_vectors()):
        return []
    rows = [view_as(w, (1, w.size)) for w in weights]
    return [functools.partial(np.dot, r, r.T, np.empty((1, 1), r.dtype))
            for r in rows if r is not None]


def _prefetch_vectors() -> bool:
    """Whether weights are prefetched before matrix-vector products (PREFETCH_VECTORS, or the
    BLAS)."""
    return linalg.small_kernel() if PREFETCH_VECTORS is None else PREFETCH_VECTORS


def _products(x: np.ndarray, w: np.ndarray, plan: _ConvPlan, groups: int,
              work: np.ndarray | None, out: np.ndarray) -> Bound:
    """The products of ``_grouped`` with the weight ``w`` (groups, o / groups, depth)."""
    n = out.shape[0]
    into = _product_into(w, plan)
    if work is None:  # ``plan.direct``: the input is the column matrix
        shape = (n, groups, -1, out.shape[2] * out.shape[3])
        cols = view_as(x, shape)
        if cols is None and groups == 1 and channels_last(x):
            cols = last_rows(x).reshape(n, -1, x.shape[1]).transpose(0, 2, 1)[:, None]
        if cols is None:  # a permuted input: reshaped (copied) at each run
            return lambda: into(x.reshape(shape), out)()
        return into(cols, out)
    depth, tile = work.shape[1] - plan.ones, work.shape[-2]
    fill = functools.partial(work[:, depth].fill, 1) if plan.ones else _nothing
    if plan.direct:  # the input copied above the ones row
        copy = copier(work[:, :depth].reshape(x.shape), x)
        return run_all(fill, copy, into(work.reshape(n, 1, depth + 1, -1), out))
    calls = [fill]
    for r0 in range(0, out.shape[2], tile):
        rows = min(tile, out.shape[2] - r0)
        cols = work[..., :rows, :]
        calls += column_copies(cols[:, :depth].reshape(x[..., :rows, :].shape),
                               x[..., r0:r0 + rows, :], plan.win, plan.flat, 0)
        calls.append(into(cols.reshape(n, groups, -1, rows * out.shape[3]),
                          out[:, :, r0:r0 + rows]))
    return run_all(*calls)


def _product_into(w: np.ndarray, plan: _ConvPlan) -> Callable[[np.ndarray, np.ndarray], Bound]:
    """The function giving the call that writes ``w`` (groups, o / groups, depth) times columns
    (n, groups, depth, positions) into rows of out (N, O, rows, W): into out's (n, groups, o /
    groups, positions) view (``_conv_product``), or, where out is stored channels-last
    (``plan.out_last``, one group), as columns^T @ w^T into its (n, positions, O) storage, w^T
    made contiguous here, once (the transposed view's product took up to 1.25x its time)."""
    if not plan.out_last:
        return lambda cols, out: _conv_product(
            w, cols, out.reshape((out.shape[0], w.shape[0], w.shape[1], -1), copy=False))
    w_t = np.ascontiguousarray(w[0].T)
    return lambda cols, out: linalg.product(
        cols[:, 0].transpose(0, 2, 1), w_t,
        out.transpose(0, 2, 3, 1).reshape((out.shape[0], -1, out.shape[1]), copy=False))


# A convolution's few-channel weight times many columns runs faster in column blocks of at
# most linalg.SMALL_PRODUCT multiply-adds (OpenBLAS's small-matrix kernel). Alone, with
# cache-warm columns: 1.3-3.3x at depth K 144-576 and 8-64 output channels, 1.0-1.25x at K
# 16-116; in models (paired runs, blocks on / off) cnn 0.87-0.89x (its 16 -> 16 3x3 layer, K
# 144), while blocking every eligible layer of mobilenet_v2, mobilenet_v3_small,
# efficientnet_b0 and shufflenet_v2 (most of K < 128) gave 0.99-1.03x: blocks are made from
# depth MIN_BLOCK_DEPTH and of at least BLOCK_COLUMNS columns (narrower: one product is as fast).
# Measured with OpenBLAS's SkylakeX kernels; with its Haswell ones (no small-matrix kernel) the
# blocks gave cnn 1.00-1.02x, so _conv_product makes none there (``linalg.small_kernel``).
BLOCK_COLUMNS = 64
MIN_BLOCK_DEPTH = 128

# A convolution's weight times few output positions (at most BLOCKED_POSITIONS columns) runs
# over row blocks of at most ROW_BLOCK_MACS multiply-adds (under linalg.SMALL_PRODUCT) where the
# whole product is above linalg.SMALL_PRODUCT. Alone, L2 cache flushed before each call (weights
# 144 KiB-1.6 MB, 1 thread, SkylakeX kernels), blocks / one product: 0.39 at 4 positions (1280
# x 320), 0.71-0.80x at 9-16, 0.82-0.90x at 25-36, 0.86-0.98x at 49-64, 0.92-1.05x at 100,
# 0.94-1.6x at 144.
BLOCKED_POSITIONS = 64
ROW_BLOCK_MACS = 9 * 64 * 1024

# A convolution over at most BLOCKED_POSITIONS output positions (per image) does little with
# each weight value, and its weight is the most of what it reads: mobilenet_v2's last 1x1
# layers over 3 x 3 positions, in a model whose 14 MB of weights come from memory at every run.
# Its product read such a weight from memory at 3-5 GB/s here (OpenBLAS's kernels read the
# weight's rows as many streams at once), where one dot of the weight with itself reads it in
# order at 22 GB/s. So a weight of at most PREFETCH_BYTES is streamed by that dot first, and
# the product finds it in the caches (``prefetches``). 1 thread, 40 weights cycled from memory:
# 960 x 160 over 9 positions 130 -> 84 us, 1280 x 320 310 -> 240 us, 576 x 96 over 36
# positions 77 -> 53 us (320 x 960: 141 -> 155 us); cache-warm the dot costs 4-30 us. Whole
# models, on / off (``bench/choices.py --choice prefetch``, 6 rounds of 100 pairs): shufflenet_v2
# 0.935, mobilenet_v3_large 0.941, mnasnet 0.942, efficientnet_b0 0.965, mobilenet_v2 0.967,
# mobilenet_v3_small 0.978-0.990, resnet18 0.999, convnext 1.000, cnn 1.008 (a call more on a
# warm 18 KB weight). A 4 MB bound lost (resnet18 1.024: its 2.4 MB weights over 36 positions,
# past the 1 MB L2, most likely read from memory twice), and so did the same dot before linear
# layers over at most 64 rows (transformer examples 1.04-1.09, mlp 1.29: their weights stay in
# the caches). The int8 convolutions' float32 weights take it too (``--int8``): mobilenet_v2
# 0.950, mnasnet, efficientnet_b0 and mobilenet_v3_large 0.97, cnn 1.004; and the float64
# weights of their "fused" plans (short reductions over 32-64 positions), measured alone by a
# switch since removed: mobilenet_v2 0.976-0.979, mnasnet 0.980, mobilenet_v3_large 0.989,
# efficientnet_b0 0.991, cnn 1.006.
PREFETCH_BYTES = 2 << 20


def _conv_product(w: np.ndarray, cols: np.ndarray, dst: np.ndarray) -> Bound:
    """dst = w @ cols (batched over images and groups): over row blocks of the weight for one
    image and group with few output positions (``conv_row_step``), over column blocks
    (``column_block``) for a small weight times many columns, else (and always where the BLAS
    lacks ``linalg.small_kernel``) one matmul."""
    o, k = w.shape[-2:]
    if not linalg.small_kernel():
        return linalg.product(w, cols, dst)
    positions = cols.shape[-1]
    rows = conv_row_step(o, k, positions, w.dtype)
    if w.shape[0] == cols.shape[0] == 1 and rows:
        return run_all(*linalg.blocked_products(w[0], cols[0, 0], dst[0, 0], rows))
    step = column_block(o, k, positions, w.dtype)
    if not step:
        return linalg.product(w, cols, dst)
    return run_all(*(linalg.product(w, cols[..., c:c + step], dst[..., c:c + step])
                     for c in range(0, positions, step)))


def conv_row_step(o: int, k: int, positions: int, dtype: np.dtype) -> int:
    """Weight rows per block of an (o, k) @ (k, positions) product (0: no row blocks; see
    BLOCKED_POSITIONS)."""
    wanted = (dtype == np.float32 and 1 < positions <= BLOCKED_POSITIONS
              and o * k * positions > linalg.SMALL_PRODUCT)
    return max(1, ROW_BLOCK_MACS // (k * positions)) if wanted else 0


def column_block(o: int, k: int, positions: int, dtype: np.dtype) -> int:
    """Columns per block of an (o, k) @ (k, positions) product (0: one product; see
    BLOCK_COLUMNS)."""
    step = linalg.SMALL_PRODUCT // (o * k) // BLOCK_COLUMNS * BLOCK_COLUMNS
    small = o * k * positions <= linalg.SMALL_PRODUCT
    wanted = dtype == np.float32 and k >= MIN_BLOCK_DEPTH and not small
    return step if wanted else 0


def _window_ints(value: IntList, name: str, n: int, low: int) -> tuple[int, ...]:
    """A window parameter (stride, padding, ...) as ``n`` ints >= ``low``, from 1 or ``n``
    (ValueError otherwise)."""
    values = rules.ints(value, name, low)
    if len(values) not in (1, n):
        raise ValueError(f"{name} {list(values)}: 1 or {n} values expected")
    return values * n if len(values) == 1 else values


def conv_shape(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
               stride: IntList, padding: IntList, dilation: IntList, groups: int,
               **_: object) -> tuple[int, ...]:
    """The output shape of a 1-D or 2-D convolution: input (N, C, *S) and weight (O, C/groups,
    *K) give (N, O, *S') with S' = (S + 2 * padding - dilation * (K - 1) - 1) // stride + 1,
    at least 1; a bias has O entries. ValueError otherwise (NotImplementedError: 3-D)."""
    inputs = {"input": rules.tensor(input, "input"), "weight": rules.tensor(weight, "weight"),
              "bias": bias, "groups": groups}
    groups = rules.integer(groups, "groups", 1)
    if input.ndim != weight.ndim or input.ndim < 3 or input.shape[1] != weight.shape[1] * groups:
        rules.refuse(inputs, "input (N, C, ...) and weight (O, C / groups, ...) of one rank "
                     "expected")
    if weight.ndim > 4:
        raise NotImplementedError(f"weight {rules.describe(weight)}: only 1-D and 2-D "
                                  "convolution")
    spatial = weight.ndim - 2
    steps, pads, dilations = (_window_ints(v, name, spatial, low) for v, name, low in (
        (stride, "stride", 1), (padding, "padding", 0), (dilation, "dilation", 1)))
    sizes = [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, k, st, p, d in zip(
        input.shape[2:], weight.shape[2:], steps, pads, dilations, strict=True)]
    if (weight.shape[0] % groups or min(sizes) < 1
            or (bias is not None and rules.tensor(bias, "bias").shape != (weight.shape[0],))):
        rules.refuse(inputs, "a kernel larger than the padded input, or output channels the "
                     "groups or the bias do not fit")
    return (input.shape[0], weight.shape[0], *sizes)


def check_conv(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
               stride: IntList, padding: IntList, dilation: IntList, transposed: bool,
               output_padding: IntList, groups: int, *, out: np.ndarray, **_: object) -> None:
    """``conv_shape``, input, weight and bias of out's float dtype (torch: of one dtype)."""
    del output_padding  # transposed convolution only
    if transposed:
        raise NotImplementedError("transposed convolution")
    shape = conv_shape(input, weight, bias, stride, padding, dilation, groups)
    inputs = {"input": input, "weight": weight, "bias": bias}
    if weight.dtype != input.dtype or (bias is not None and bias.dtype != input.dtype):
        rules.refuse(inputs, "input, weight and bias of different dtypes")
    rules.expect(out, shape, input.dtype, inputs)


def convolution(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                stride: IntList, padding: IntList, dilation: IntList, transposed: bool,
                output_padding: IntList, groups: int, *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
    """1-D/2-D convolution (cross-correlation), any groups; depthwise has its own path."""
    del output_padding, transposed  # checked: not transposed
    key = (input.shape, weight.shape, stride, padding, dilation, groups)
    layout = (channels_last(input), channels_last(out))
    plan = _conv_plan(*key, None, bias is not None, layout)
    if scratch is not None and scratch.nbytes < plan.nbytes:  # budgeted: row/channel tiles
        plan = _conv_plan(*key, scratch.nbytes, bias is not None, layout)
    if weight.ndim == 3:  # conv1d as conv2d over a height-1 image
        input, weight, out = input[:, :, None], weight[:, :, None], out[:, :, None]
    if plan.dense:
        compute = _depthwise_dense(input, weight, bias, plan, scratch, out)
    elif plan.channels_last:
        compute = _depthwise_einsum(input, weight, bias, plan, scratch, out)
    elif plan.shifted:
        compute = _depthwise_shifted(input, weight, plan, scratch, out)
    elif plan.depthwise:
        compute = _depthwise(input, weight, plan, scratch, out)
    else:
        ws = Workspace(scratch)
        padded = ws.take(plan.padded, input.dtype) if plan.padded else None
        x, calls = (input, []) if plan.direct else column_source(  # direct: x is the columns
            input, plan.win, plan.pads, plan.flat, padded, 0)
        work = ws.take(plan.work, out.dtype) if plan.work else None
        compute = run_all(*calls, _grouped(x, weight, bias, plan, groups, work, out))
    if bias is not None and not plan.adds_bias:
        compute = then(compute, functools.partial(np.add, out, bias.reshape(-1, 1, 1), out))
    return long_loops(compute)


def _lowest(dtype: np.dtype) -> float:
    """The padding max pooling never picks: -inf, or an integer dtype's minimum."""
    return -np.inf if dtype.kind == "f" else int(np.iinfo(dtype).min)


def _first_valid(starts: np.ndarray, dilation: int) -> np.ndarray:
    """First in-bounds tap coordinate of each window (torch: ``while start < 0: start += d``)."""
    return np.where(starts < 0, starts % dilation, starts)


def max_pool2d_with_indices(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
                            padding: IntList = (0, 0), dilation: IntList = (1, 1),
                            ceil_mode: bool = False, *, out: np.ndarray, indices: np.ndarray,
                            scratch: np.ndarray | None = None) -> None:
    """Max over windows; ``indices`` = flat h*W+w input index of the (first) max, nan wins."""
    del ceil_mode  # the output size (from out.shape) already reflects it
    x, out, indices = _batched(self, out, indices)
    win = _Window.of(kernel_size, stride, padding, dilation, out.shape[2:])
    ws = Workspace(scratch)
    take, nan = ws.take(out.shape, np.bool_), ws.take(out.shape, np.bool_)
    tap_index = ws.take(win.out_hw, np.int64)
    width = x.shape[3]
    rows, cols = win.starts(0), win.starts(1)
    out.fill(_lowest(out.dtype))
    np.add(_first_valid(rows, win.dilation[0])[:, None] * width,
           _first_valid(cols, win.dilation[1]), out=indices)
    for i, j, tap in win.taps(_pad(x, win.pads(x.shape[2:]), _lowest(x.dtype), ws)):
        np.greater(tap, out, take)
        np.logical_or(take, np.isnan(tap, out=nan), take)
        np.copyto(out, tap, where=take)
        np.add(((rows + i * win.dilation[0]) * width)[:, None], cols + j * win.dilation[1],
               out=tap_index)
        np.copyto(indices, tap_index, where=take)


def max_pool2d(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
               padding: IntList = (0, 0), dilation: IntList = (1, 1), ceil_mode: bool = False,
               *, out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """Max over windows without indices (NaN propagates, as in torch): np.maximum over the
    input padded with -inf (int8: -128), see ``_pool``."""
    del ceil_mode  # the output size (from out.shape) already reflects it
    x, out = _batched(self, out)
    win = _Window.of(kernel_size, stride, padding, dilation, out.shape[2:])
    return _pool(x, win, _lowest(x.dtype), np.maximum, Workspace(scratch), out)


def _separable(win: _Window, hw: Sequence[int]) -> bool:
    """Whether pooling combines one axis at a time (``_pool_separable``): at stride 1, or over
    unpadded windows the size of the stride. Measured 0.4-0.8x the per-tap time there (k2 s2
    of 8-96 pixel images, k3/k5 s1 p1/p2); 1.0-1.2x for k3 s2 and padded k2 s2 (resnet18's
    max pool), whose strided rows make numpy's loops short."""
    return win.stride == (1, 1) or (win.stride == win.kernel and win.pads(hw) is None)


def _pool(x: np.ndarray, win: _Window, pad: float, combine: np.ufunc, ws: Workspace,
          out: np.ndarray) -> Bound:
    """out = ``combine`` over the windows of ``x`` padded with ``pad``: separably if
    ``_separable``, else tap by tap."""
    pool = _pool_separable if _separable(win, x.shape[-2:]) else _pool_taps
    return pool(x, win, pad, combine, ws, out)


def _pool_taps(x: np.ndarray, win: _Window, pad: float, combine: np.ufunc, ws: Workspace,
               out: np.ndarray) -> Bound:
    """out = ``combine`` of every tap of ``win`` over the phase planes of ``x`` padded with
    ``pad`` (``_phase_taps``)."""
    (first, *rest), fill, valid = _phase_taps(x, win, pad, ws)
    acc = ws.take(first.shape, out.dtype)
    result = valid(acc)

    def run() -> None:
        fill()
        np.copyto(acc, first)
        for tap in rest:
            combine(acc, tap, out=acc)
        np.copyto(out, result)

    return long_loops(run)


def _pool_separable(x: np.ndarray, win: _Window, pad: float, combine: np.ufunc, ws: Workspace,
                    out: np.ndarray) -> Bound:
    """out = ``combine`` over the windows of ``x`` padded with ``pad``, one axis at a time: the
    KH taps of each padded column into a (..., Ho, columns) buffer, then the KW taps of its
    columns. Along H first, so that the pass whose taps step by the W stride (short strided
    runs, numpy's slow case) reads the buffer, Ho / H of the input. Against along W first (one
    call, paired, 16-128 channels over 8-112 pixels): 2x2 max pooling at stride 2 0.78-0.90x,
    average 0.90-1.03x; 3x3 and 5x5 at stride 1 0.95-0.98x."""
    padded, fill = _padding(x, win.pads(x.shape[-2:]), pad, ws)
    along_h, along_w = _separated(win)
    columns = ws.take((*x.shape[:-2], *along_h.out_hw), out.dtype)
    return long_loops(run_all(fill, *_combined(along_h.taps(padded), combine, columns),
                              *_combined(along_w.taps(columns), combine, out)))


def _separated(win: _Window) -> tuple[_Window, _Window]:
    """``win`` as a (KH, 1) window over the padded columns its windows read, then a (1, KW)
    one."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = win.kernel, win.stride, win.dilation, win.out_hw
    columns = (wo - 1) * sw + dw * (kw - 1) + 1
    return (_Window((kh, 1), (sh, 1), (0, 0), (dh, 1), (ho, columns)),
            _Window((1, kw), (1, sw), (0, 0), (1, dw), (ho, wo)))


def _combined(taps: Iterator[tuple[int, int, np.ndarray]], combine: np.ufunc,
              out: np.ndarray) -> list[Bound]:
    """The calls writing ``combine`` of the taps into out (a copy of a single tap), computed in
    out's dtype (int8 taps sum into float32 without overflow)."""
    first, *rest = (tap for _, _, tap in taps)
    if not rest:
        return [copier(out, first)]
    return [functools.partial(combine, first, rest[0], out=out, dtype=out.dtype),
            *(functools.partial(combine, out, tap, out=out) for tap in rest[1:])]


def _pool_window(self: np.ndarray, kernel_size: IntList, stride: IntList, padding: IntList,
                 dilation: IntList, ceil_mode: bool) -> _Window:
    """The window of a pooling call, its output size computed as torch does."""
    win = _Window.of(kernel_size, stride, padding, dilation, (0, 0))
    out_hw = []
    for size, k, s, p, d in zip(self.shape[-2:], win.kernel, win.stride, win.padding,
                                win.dilation, strict=True):
        n = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        out_hw.append(n - 1 if ceil_mode and (n - 1) * s >= size + p else n)
    return _Window(win.kernel, win.stride, win.padding, win.dilation, tuple(out_hw))


def pool_shape(self: np.ndarray, kernel_size: IntList, stride: IntList, padding: IntList,
               dilation: IntList, ceil_mode: bool) -> tuple[int, ...]:
    """torch's pooling output shape: self (N, C, H, W) or (C, H, W) with C, H, W nonzero;
    kernel, stride (empty: the kernel's), padding (at most half the dilated kernel) and dilation
    of 1 or 2 ints; at least one window per row and column. ValueError otherwise."""
    inputs = {"self": rules.tensor(self, "self"), "kernel_size": kernel_size, "stride": stride,
              "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    kernel = _window_ints(kernel_size, "kernel_size", 2, 1)
    stride = _window_ints(stride, "stride", 2, 1) if stride else kernel
    pads = _window_ints(padding, "padding", 2, 0)
    dilation = _window_ints(dilation, "dilation", 2, 1)
    if self.ndim not in (3, 4) or 0 in self.shape[-3:]:
        rules.refuse(inputs, "a (N, C, H, W) or (C, H, W) input of nonzero C, H and W expected")
    if any(2 * p > d * (k - 1) + 1 for k, p, d in zip(kernel, pads, dilation, strict=True)):
        rules.refuse(inputs, "padding over half the kernel")
    hw = _pool_window(self, kernel, stride, pads, dilation, ceil_mode).out_hw
    if min(hw) < 1:
        rules.refuse(inputs, "a window larger than the padded input")
    return (*self.shape[:-2], *hw)


def check_pool(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
               padding: IntList = (0, 0), dilation: IntList = (1, 1), ceil_mode: bool = False,
               *, out: np.ndarray, indices: np.ndarray | None = None,
               divisor_override: int | None = None, **_: object) -> None:
    """max/avg pooling: out (and int64 indices) of ``pool_shape``, in self's dtype."""
    shape = pool_shape(self, kernel_size, stride, padding, dilation, ceil_mode)
    if divisor_override is not None:
        rules.integer(divisor_override, "divisor_override")
        if not divisor_override:
            raise ValueError("divisor_override 0")
    inputs = {"self": self, "kernel_size": kernel_size, "stride": stride, "padding": padding}
    rules.expect(out, shape, self.dtype, inputs)
    if indices is not None:
        rules.expect(indices, shape, rules.INT64, inputs, "indices")


def _pool_scratch(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
                  padding: IntList = (0, 0), dilation: IntList = (1, 1), ceil_mode: bool = False,
                  **_: object) -> int:
    """max_pool2d_with_indices: padded input, two bool masks and a tap-index plane."""
    win = _pool_window(self, kernel_size, stride, padding, dilation, ceil_mode)
    pads = win.pads(self.shape[-2:])
    out_shape = (*self.shape[:-2], *win.out_hw)
    regions = [(_padded_shape(self.shape, pads), "float32")] if pads else []
    regions += [(out_shape, "bool"), (out_shape, "bool"), (win.out_hw, "int64")]
    return workspace_bytes(*regions)


def _combine_scratch(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
                     padding: IntList = (0, 0), dilation: IntList = (1, 1),
                     ceil_mode: bool = False, **_: object) -> int:
    """max_pool2d/avg_pool2d: the padded input (if padded) and the column-combined buffer when
    ``_separable``, else the phase planes and an accumulator run; the input's copies in its
    dtype, the rest as float32 (avg_pool2d_int8 sums int8 into float32)."""
    win = _pool_window(self, kernel_size, stride, padding, dilation, ceil_mode)
    lead, hw = self.shape[:-2], self.shape[-2:]
    if not _separable(win, hw):
        planes, run = _phase_planes(lead, win)
        return workspace_bytes((planes, self.dtype), (run, "float32"))
    pads = win.pads(hw)
    padded = [(_padded_shape(self.shape, pads), self.dtype)] if pads else []
    columns = (*lead, *_separated(win)[0].out_hw)
    return workspace_bytes(*padded, (columns, "float32"))


def _pool_counts(win: _Window, axis: int, size: int, count_include_pad: bool) -> np.ndarray:
    """Per-output window extent along one axis, as torch's avg_pool2d divisor."""
    start = win.starts(axis)
    end = np.minimum(start + win.kernel[axis], size + win.padding[axis])
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def avg_pool2d(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
               padding: IntList = (0, 0), ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, out: np.ndarray,
               scratch: np.ndarray | None = None) -> Bound:
    """Window sums (``_pool`` over the zero-padded input) divided per torch's rules."""
    del ceil_mode  # reflected in out.shape
    x, out = _batched(self, out)
    win = _Window.of(kernel_size, stride, padding, 1, out.shape[2:])
    sums = _pool(x, win, 0, np.add, Workspace(scratch), out)
    if divisor_override:
        divisor = np.float32(divisor_override)
    else:
        counts = [_pool_counts(win, axis, x.shape[2 + axis], count_include_pad) for axis in (0, 1)]
        divisor = np.outer(*counts).astype(np.float32)
    return then(sums, functools.partial(np.divide, out, divisor, out))


def _avg_pool_scratch(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
                      padding: IntList = (0, 0), ceil_mode: bool = False,
                      **_: object) -> int:
    return _combine_scratch(self, kernel_size, stride, padding, 1, ceil_mode)


def _channel_shape(ndim: int) -> tuple[int, ...]:
    return (-1,) + (1,) * (ndim - 2)


def batch_norm_no_training(input: np.ndarray, weight: np.ndarray | None,
                           bias: np.ndarray | None, running_mean: np.ndarray,
                           running_var: np.ndarray, momentum: float, eps: float, *,
                           out0: np.ndarray, out1: np.ndarray, out2: np.ndarray) -> None:
    """out0 = x * scale + shift per channel (dim 1), scale = weight / sqrt(var + eps).

    out1/out2 (save_mean/save_rstd) are shape (0,) in eval mode, as torch returns them: nothing
    to write.
    """
    del momentum, out1, out2
    scale = np.reciprocal(np.sqrt(running_var + np.float32(eps)))
    if weight is not None:
        scale *= weight
    shift = -running_mean * scale
    if bias is not None:
        shift += bias
    np.multiply(input, scale.reshape(_channel_shape(input.ndim)), out=out0)
    np.add(out0, shift.reshape(_channel_shape(input.ndim)), out=out0)


def native_layer_norm(input: np.ndarray, normalized_shape: Sequence[int],
                      weight: np.ndarray | None, bias: np.ndarray | None, eps: float, *,
                      out0: np.ndarray, out1: np.ndarray, out2: np.ndarray,
                      scratch: np.ndarray | None = None) -> Bound:
    """Normalise over the trailing ``normalized_shape`` dims; out1 = mean, out2 = rstd.

    out1/out2 have the input's leading dims and size-1 normalised dims (keepdims shape). The
    input is copied into out0 and normalised there as 2-D rows (``_standardize``; ``scratch``,
    if it has the room, to spread mean and rstd over short rows).
    """
    n = math.prod(normalized_shape)
    rows = affine = out0.reshape(-1, n)
    flat = [None if a is None else view_as(a, (n,)) for a in (weight, bias)]
    if (weight is None or flat[0] is not None) and (bias is None or flat[1] is not None):
        weight, bias = flat
    else:  # permuted activations: weight and bias as they are, over out0's normalised dims
        affine = out0.reshape(-1, *normalized_shape)
    need = elementwise.spread_bytes(rows.shape)
    spread = scratch if scratch is None or scratch.nbytes >= need else None
    return then(_standardize(input, out0, out1.reshape(-1, 1), out2.reshape(-1, 1), eps, spread),
                _affine(affine, weight, bias))


def _layer_norm_scratch(input: np.ndarray, normalized_shape: Sequence[int],
                        budget: int | None = None, **_: object) -> int:
    n = math.prod(normalized_shape)
    need = elementwise.spread_bytes((input.size // max(1, n), n))
    return need if budget is None or need <= budget else 0


def _standardize(input: np.ndarray, out: np.ndarray, mean: np.ndarray, rstd: np.ndarray,
                 eps: float, spread: np.ndarray | None = None) -> Bound:
    """Copy ``input`` into the contiguous ``out`` and standardise it there as len(mean) 2-D rows:
    mean and rstd into the (rows, 1) views ``mean``/``rstd``, the mean as a product with a
    column of 1/n (a BLAS gemv: several times faster than numpy's row sums), the variance as a
    row-wise dot of the centred values in ``rstd``'s memory; each statistic spread over short
    rows in ``spread`` first (``elementwise.by_rows``). No temporaries."""
    rows = out.reshape(mean.shape[0], -1)
    var = rstd.reshape(-1)
    size, eps = f32(rows.shape[1]), f32(eps)
    averaging = np.full((rows.shape[1], 1), 1 / size, np.float32)  # row means as one BLAS gemv
    means = linalg.product(rows, averaging, mean)
    centre, scale = (elementwise.by_rows(ufunc, rows, stat, spread)
                     for ufunc, stat in ((np.subtract, mean), (np.multiply, rstd)))

    def run() -> None:
        np.copyto(out, input)
        means()
        centre()
        np.vecdot(rows, rows, var)
        np.divide(var, size, var)
        np.add(var, eps, var)
        np.sqrt(var, var)
        np.reciprocal(var, var)
        scale()

    return run


def _affine(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> Bound:
    """x = x * weight + bias in place (each term only if given), broadcasting."""
    weight, bias = out_shaped(weight, x), out_shaped(bias, x)

    def run() -> None:
        if weight is not None:
            np.multiply(x, weight, x)
        if bias is not None:
            np.add(x, bias, x)

    return run


def embedding(weight: np.ndarray, indices: np.ndarray, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False, *,
              out: np.ndarray) -> Bound:
    """out = weight[indices] (padding_idx/scale_grad_by_freq/sparse only affect gradients)."""
    del padding_idx, scale_grad_by_freq, sparse
    return take(weight, 0, indices, out, negative=False)


def native_group_norm(input: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
                      N: int, C: int, HxW: int, group: int, eps: float, *, out0: np.ndarray,
                      out1: np.ndarray, out2: np.ndarray) -> Bound:
    """Normalise each sample's ``group`` channel groups (of C // group channels x HxW) in
    out0 (``_standardize``), then scale/shift per channel; out1 = mean, out2 = rstd (N, group)."""
    channels = out0.reshape(N, C, HxW)
    weight, bias = (None if a is None else a.reshape(C, 1) for a in (weight, bias))
    return then(_standardize(input, out0, out1.reshape(-1, 1), out2.reshape(-1, 1), eps),
                _affine(channels, weight, bias))


def _adaptive_windows(size: int, n: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling windows along one axis: [floor(i*size/n), ceil((i+1)*size/n))."""
    return [(i * size // n, -(-(i + 1) * size // n)) for i in range(n)]


def adaptive_avg_pool2d(self: np.ndarray, output_size: IntList, *, out: np.ndarray) -> Bound:
    """Mean over each adaptive window of the last two dims (any leading dims): one sum per
    output position, straight into out, then one divide by the window sizes."""
    rows, cols = (_adaptive_windows(size, n) for size, n in zip(self.shape[-2:],
                                                                   out.shape[-2:], strict=True))
    sums = [(self[..., r0:r1, c0:c1], out[..., i, j])
            for i, (r0, r1) in enumerate(rows) for j, (c0, c1) in enumerate(cols)]
    counts = [[end - start for start, end in windows] for windows in (rows, cols)]
    divisor = np.outer(*counts).astype(np.float32)

    def run() -> None:
        for window, dst in sums:
            np.add.reduce(window, axis=(-2, -1), out=dst)
        np.divide(out, divisor, out)

    return run


def _parameters(inputs: dict[str, np.ndarray | None], names: Sequence[str],
                shape: Sequence[int], dtype: np.dtype) -> None:
    """ValueError unless each of the named optional ``inputs`` is None or ``dtype[shape]``."""
    for name in names:
        value = inputs[name]
        if value is not None and (rules.tensor(value, name).shape != tuple(shape)
                                  or value.dtype != dtype):
            rules.refuse(inputs, f"{name} is not {dtype}{list(shape)}")


def _normalized(input: np.ndarray, min_ndim: int) -> np.ndarray:
    """``input``: a float tensor of at least ``min_ndim`` dims (normalisation kernels)."""
    rules.tensor(input, "input", frozenset({rules.FLOAT32}))
    if input.ndim < min_ndim:
        raise ValueError(f"input {rules.describe(input)}: at least {min_ndim} dims expected")
    return input


def _expect_normalised(inputs: dict[str, object], stats: Sequence[int], out0: np.ndarray,
                       out1: np.ndarray, out2: np.ndarray) -> None:
    """out0 of the input's shape, the statistics out1/out2 of ``stats``, in its dtype."""
    input = inputs["input"]
    for name, out, shape in (("out0", out0, input.shape), ("out1", out1, stats),
                             ("out2", out2, stats)):
        rules.expect(out, shape, input.dtype, inputs, name)


def _check_batch_norm(input: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
                      running_mean: np.ndarray, running_var: np.ndarray, momentum: float,
                      eps: float, *, out0: np.ndarray, out1: np.ndarray, out2: np.ndarray,
                      **_: object) -> None:
    """(N, C, ...) input, one value per channel in every parameter; out0 as input, out1/out2
    the empty saved statistics of eval mode."""
    rules.number(momentum, "momentum")
    rules.number(eps, "eps")
    inputs = {"input": _normalized(input, 2), "weight": weight, "bias": bias,
              "running_mean": rules.tensor(running_mean, "running_mean"),
              "running_var": rules.tensor(running_var, "running_var")}
    _parameters(inputs, ("weight", "bias", "running_mean", "running_var"), input.shape[1:2],
                input.dtype)
    _expect_normalised(inputs, (0,), out0, out1, out2)


def _check_layer_norm(input: np.ndarray, normalized_shape: Sequence[int],
                      weight: np.ndarray | None, bias: np.ndarray | None, eps: float, *,
                      out0: np.ndarray, out1: np.ndarray, out2: np.ndarray,
                      **_: object) -> None:
    """input (..., *normalized_shape); weight/bias of normalized_shape; out0 as input, the
    statistics out1/out2 with the normalised dims kept as 1s."""
    rules.number(eps, "eps")
    normalized = rules.ints(normalized_shape, "normalized_shape", 0)
    inputs = {"input": _normalized(input, 1), "normalized_shape": normalized_shape,
              "weight": weight, "bias": bias}
    n = len(normalized)
    if not 1 <= n <= input.ndim or input.shape[input.ndim - n:] != normalized:
        rules.refuse(inputs, "input does not end in normalized_shape")
    _parameters(inputs, ("weight", "bias"), normalized, input.dtype)
    _expect_normalised(inputs, (*input.shape[:input.ndim - n], *(1,) * n), out0, out1, out2)


def _check_group_norm(input: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
                      N: int, C: int, HxW: int, group: int, eps: float, *, out0: np.ndarray,
                      out1: np.ndarray, out2: np.ndarray, **_: object) -> None:
    """input (N, C, ...) of N * C * HxW elements, C a multiple of group; weight/bias per
    channel; out0 as input, out1/out2 (N, group)."""
    rules.number(eps, "eps")
    inputs = {"input": _normalized(input, 2), "weight": weight, "bias": bias, "N": N, "C": C,
              "HxW": HxW, "group": group}
    group = rules.integer(group, "group", 1)
    if (N, C, HxW) != (input.shape[0], input.shape[1], math.prod(input.shape[2:])) or C % group:
        rules.refuse(inputs, "N, C, HxW other than the input's, or C not in groups")
    _parameters(inputs, ("weight", "bias"), (C,), input.dtype)
    _expect_normalised(inputs, (N, group), out0, out1, out2)


def _check_adaptive_pool(self: np.ndarray, output_size: IntList, *, out: np.ndarray,
                         **_: object) -> None:
    """(N, C, H, W) or (C, H, W) self, nonzero off N, gives (..., *output_size)."""
    size = rules.ints(output_size, "output_size", 0)
    inputs = {"self": rules.tensor(self, "self"), "output_size": output_size}
    if len(size) != 2 or self.ndim not in (3, 4) or 0 in self.shape[-3:]:
        rules.refuse(inputs, "a (N, C, H, W) or (C, H, W) input of nonzero C, H and W, and 2 "
                     "output sizes expected")
    rules.expect(out, (*self.shape[:-2], *size), self.dtype, inputs)


def _check_embedding(weight: np.ndarray, indices: np.ndarray, *, out: np.ndarray,
                     **_: object) -> None:
    """A 2-D weight and int64/int32 indices give (*indices.shape, embedding size)."""
    inputs = {"weight": rules.tensor(weight, "weight"),
              "indices": rules.tensor(indices, "indices", rules.INDEX)}
    if weight.ndim != 2:
        rules.refuse(inputs, "a 2-D weight expected")
    rules.expect(out, (*indices.shape, weight.shape[1]), weight.dtype, inputs)


KERNELS: dict[str, Kernel] = {
    "aten::convolution.out": Kernel.prepared(convolution, FLOAT, scratch=_conv_scratch,
                                             check=check_conv),
    "aten::max_pool2d_with_indices.out": Kernel(max_pool2d_with_indices, FLOAT | INT8,
                                                scratch=_pool_scratch, check=check_pool),
    "nee::max_pool2d.out": Kernel.prepared(max_pool2d, FLOAT | INT8, scratch=_combine_scratch,
                                           check=check_pool),
    "aten::avg_pool2d.out": Kernel.prepared(avg_pool2d, FLOAT, scratch=_avg_pool_scratch,
                                            check=check_pool),
    "aten::_native_batch_norm_legit_no_training.out": Kernel(batch_norm_no_training, FLOAT,
                                                             check=_check_batch_norm),
    "aten::native_layer_norm.out": Kernel.prepared(native_layer_norm, FLOAT,
                                                   scratch=_layer_norm_scratch,
                                                   check=_check_layer_norm),
    "aten::native_group_norm.out": Kernel.prepared(native_group_norm, FLOAT,
                                                   check=_check_group_norm),
    "aten::_adaptive_avg_pool2d.out": Kernel.prepared(adaptive_avg_pool2d, FLOAT,
                                                      check=_check_adaptive_pool),
    "aten::embedding.out": Kernel.prepared(embedding, NUMERIC, check=_check_embedding),
}
