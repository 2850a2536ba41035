"""Neural-network kernels: convolution, pooling, batch/layer norm, embedding.

Spatial ops share :class:`_Window`, which iterates the kernel taps as strided views of the
padded input, so no kernel materialises per-window copies except convolution's column buffer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_py.kernels import Kernel
from runtime_py.kernels._common import FLOAT, NUMERIC, expand_param

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
                   expand_param(dilation, 2), out_hw)

    def pad(self, x: np.ndarray, value: float) -> np.ndarray:
        """Pad H/W by ``padding`` before and as much after as the last window needs (ceil_mode)."""
        pads = [(0, 0)] * (x.ndim - 2)
        for size, k, s, p, d, n in zip(x.shape[-2:], self.kernel, self.stride, self.padding,
                                       self.dilation, self.out_hw, strict=True):
            pads.append((p, max(0, (n - 1) * s + d * (k - 1) + 1 - size - p)))
        return np.pad(x, pads, constant_values=value) if any(map(any, pads)) else x

    def taps(self, padded: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
        """(i, j, view of ``padded`` under kernel tap (i, j) for every output position)."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        ho, wo = self.out_hw
        for i in range(kh):
            for j in range(kw):
                yield i, j, padded[..., i * dh: i * dh + (ho - 1) * sh + 1: sh,
                                   j * dw: j * dw + (wo - 1) * sw + 1: sw]

    def starts(self, axis: int) -> np.ndarray:
        """Unpadded input coordinate where each output window starts along H (0) or W (1)."""
        return np.arange(self.out_hw[axis]) * self.stride[axis] - self.padding[axis]


def _batched(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Views with a leading batch dim added to unbatched (C, H, W) arrays."""
    return tuple(a[None] if a.ndim == 3 else a for a in arrays)


def _depthwise(padded: np.ndarray, weight: np.ndarray, win: _Window, out: np.ndarray) -> None:
    """groups == C_in == C_out: per-tap multiply-accumulate (one out-sized scratch)."""
    scratch = np.empty_like(out)
    for i, j, tap in win.taps(padded):
        w = weight[:, 0, i, j, None, None]
        if i == j == 0:
            np.multiply(tap, w, out=out)
        else:
            np.multiply(tap, w, out=scratch)
            np.add(out, scratch, out=out)


def _grouped(padded: np.ndarray, weight: np.ndarray, groups: int, win: _Window,
             out: np.ndarray) -> None:
    """General grouped conv as one batched BLAS matmul per group over a column buffer.

    The column buffer (N, C, KH, KW, Ho*Wo) is allocated per call; it is where a planned scratch
    buffer plugs in. A 1x1 stride-1 unpadded conv reads the input directly (no buffer).
    """
    n, c = padded.shape[:2]
    o, kh, kw = weight.shape[0], *win.kernel
    ho, wo = win.out_hw
    if padded.shape[2:] == (ho, wo) and (kh, kw) == (1, 1):
        cols = padded
    else:
        cols = np.empty((n, c, kh, kw, ho, wo), dtype=out.dtype)
        for i, j, tap in win.taps(padded):
            cols[:, :, i, j] = tap
    np.matmul(weight.reshape(groups, o // groups, -1),
              cols.reshape(n, groups, c // groups * kh * kw, ho * wo),
              out=out.reshape((n, groups, o // groups, ho * wo), copy=False))


def convolution(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                stride: IntList, padding: IntList, dilation: IntList, transposed: bool,
                output_padding: IntList, groups: int, *, out: np.ndarray) -> None:
    """1-D/2-D convolution (cross-correlation), any groups; depthwise has its own path."""
    del output_padding  # only meaningful for transposed convolution
    if transposed or weight.ndim not in (3, 4):
        raise NotImplementedError("only non-transposed 1-D and 2-D convolution")
    if weight.ndim == 3:  # conv1d as conv2d over a height-1 image
        input, weight, out = input[:, :, None], weight[:, :, None], out[:, :, None]
        stride, padding, dilation = ((unit, *expand_param(v, 1)) for unit, v in
                                     ((1, stride), (0, padding), (1, dilation)))
    win = _Window.of(weight.shape[2:], stride, padding, dilation, out.shape[2:])
    padded = win.pad(input, 0)
    if groups == input.shape[1] == weight.shape[0]:
        _depthwise(padded, weight, win, out)
    else:
        _grouped(padded, weight, groups, win, out)
    if bias is not None:
        np.add(out, bias[:, None, None], out=out)


def _first_valid(starts: np.ndarray, dilation: int) -> np.ndarray:
    """First in-bounds tap coordinate of each window (torch: ``while start < 0: start += d``)."""
    return np.where(starts < 0, starts % dilation, starts)


def max_pool2d_with_indices(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
                            padding: IntList = (0, 0), dilation: IntList = (1, 1),
                            ceil_mode: bool = False, *, out: np.ndarray,
                            indices: np.ndarray) -> None:
    """Max over windows; ``indices`` = flat h*W+w input index of the (first) max, nan wins."""
    del ceil_mode  # the output size (from out.shape) already reflects it
    x, out, indices = _batched(self, out, indices)
    win = _Window.of(kernel_size, stride, padding, dilation, out.shape[2:])
    width = x.shape[3]
    rows, cols = win.starts(0), win.starts(1)
    out.fill(-np.inf)
    indices[...] = (_first_valid(rows, win.dilation[0])[:, None] * width
                    + _first_valid(cols, win.dilation[1]))
    take, nan = np.empty(out.shape, bool), np.empty(out.shape, bool)
    for i, j, tap in win.taps(win.pad(x, -np.inf)):
        np.greater(tap, out, out=take)
        np.logical_or(take, np.isnan(tap, out=nan), out=take)
        np.copyto(out, tap, where=take)
        tap_index = ((rows + i * win.dilation[0])[:, None] * width
                     + cols + j * win.dilation[1])
        np.copyto(indices, tap_index, where=take)


def _pool_counts(win: _Window, axis: int, size: int, count_include_pad: bool) -> np.ndarray:
    """Per-output window extent along one axis, as torch's avg_pool2d divisor."""
    start = win.starts(axis)
    end = np.minimum(start + win.kernel[axis], size + win.padding[axis])
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def avg_pool2d(self: np.ndarray, kernel_size: IntList, stride: IntList = (),
               padding: IntList = (0, 0), ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None, *, out: np.ndarray) -> None:
    """Window sums (accumulated tap by tap into out) divided per torch's divisor rules."""
    del ceil_mode  # reflected in out.shape
    x, out = _batched(self, out)
    win = _Window.of(kernel_size, stride, padding, 1, out.shape[2:])
    for i, j, tap in win.taps(win.pad(x, 0)):
        if i == j == 0:
            np.copyto(out, tap)
        else:
            np.add(out, tap, out=out)
    if divisor_override:
        np.divide(out, divisor_override, out=out)
    else:
        counts = [_pool_counts(win, axis, x.shape[2 + axis], count_include_pad) for axis in (0, 1)]
        np.divide(out, np.outer(*counts), out=out)


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
                      out0: np.ndarray, out1: np.ndarray, out2: np.ndarray) -> None:
    """Normalise over the trailing ``normalized_shape`` dims; out1 = mean, out2 = rstd.

    out1/out2 have the input's leading dims and size-1 normalised dims (keepdims shape).
    The variance is a row-wise dot of the centred values (in out0), so no temporaries.
    """
    k = len(normalized_shape)
    np.mean(input, axis=tuple(range(input.ndim - k, input.ndim)), keepdims=True, out=out1)
    np.subtract(input, out1, out=out0)
    rows = out0.reshape((-1, math.prod(normalized_shape)), copy=False)
    rstd = out2.reshape(-1, copy=False)
    np.einsum("ij,ij->i", rows, rows, out=rstd)
    np.divide(rstd, rows.shape[1], out=rstd)
    np.add(rstd, eps, out=rstd)
    np.sqrt(rstd, out=rstd)
    np.reciprocal(rstd, out=rstd)
    np.multiply(out0, out2, out=out0)
    if weight is not None:
        np.multiply(out0, weight, out=out0)
    if bias is not None:
        np.add(out0, bias, out=out0)


def embedding(weight: np.ndarray, indices: np.ndarray, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False, *,
              out: np.ndarray) -> None:
    """out = weight[indices] (padding_idx/scale_grad_by_freq/sparse only affect gradients)."""
    del padding_idx, scale_grad_by_freq, sparse
    if indices.size and (indices.min() < 0 or indices.max() >= weight.shape[0]):
        raise IndexError(f"embedding index out of range [0, {weight.shape[0]})")
    np.take(weight, indices, axis=0, out=out, mode="clip")  # "raise" would buffer the output


KERNELS: dict[str, Kernel] = {
    "aten::convolution.out": Kernel(convolution, FLOAT),
    "aten::max_pool2d_with_indices.out": Kernel(max_pool2d_with_indices, FLOAT),
    "aten::avg_pool2d.out": Kernel(avg_pool2d, FLOAT),
    "aten::_native_batch_norm_legit_no_training.out": Kernel(batch_norm_no_training, FLOAT),
    "aten::native_layer_norm.out": Kernel(native_layer_norm, FLOAT),
    "aten::embedding.out": Kernel(embedding, NUMERIC),
}
