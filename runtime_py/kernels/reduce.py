"""Reduction kernels: mean/sum/amax/amin over dims, softmax and log-softmax."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from runtime_py.kernels import Kernel
from runtime_py.kernels._common import ALL, FLOAT, NUMERIC, KernelFn, reduce_axes


def _accumulate(reducer: Callable[..., np.ndarray]) -> KernelFn:
    """mean/sum: ``fn(self, dim, keepdim, dtype, out)``, accumulating in the out dtype."""

    def kernel(self: np.ndarray, dim: Sequence[int] | None = None, keepdim: bool = False, *,
               dtype: str | None = None, out: np.ndarray) -> None:
        del dtype  # the requested dtype is the out dtype
        reducer(self, axis=reduce_axes(dim), keepdims=keepdim, out=out, dtype=out.dtype)

    return kernel


def _extremum(reducer: Callable[..., np.ndarray]) -> KernelFn:
    """amax/amin: ``fn(self, dim, keepdim, out)``; empty dim reduces all dims."""

    def kernel(self: np.ndarray, dim: Sequence[int] = (), keepdim: bool = False, *,
               out: np.ndarray) -> None:
        reducer(self, axis=reduce_axes(dim), keepdims=keepdim, out=out)

    return kernel


def _shifted_exp(self: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    """out = exp(x - max); returns the (reduced-size, keepdims) max."""
    peak = np.max(self, axis=dim, keepdims=True)
    np.subtract(self, peak, out=out)
    np.exp(out, out=out)
    return peak


def softmax(self: np.ndarray, dim: int, half_to_float: bool, *,
            out: np.ndarray) -> None:
    """exp(x - max) / sum(exp(x - max)) along ``dim`` (a fully -inf row gives nan, like torch)."""
    del half_to_float  # float16 inputs are not supported
    with np.errstate(invalid="ignore"):
        _shifted_exp(self, dim, out)
        np.divide(out, np.sum(out, axis=dim, keepdims=True), out=out)


def log_softmax(self: np.ndarray, dim: int, half_to_float: bool, *,
                out: np.ndarray) -> None:
    """x - max - log(sum(exp(x - max))), recomputing x - max to avoid an out-sized temporary."""
    del half_to_float
    with np.errstate(invalid="ignore", divide="ignore"):
        peak = _shifted_exp(self, dim, out)
        log_norm = np.log(np.sum(out, axis=dim, keepdims=True))
        np.subtract(self, np.add(peak, log_norm, out=peak), out=out)


_mean = _accumulate(np.mean)
_sum = _accumulate(np.sum)

KERNELS: dict[str, Kernel] = {
    "aten::mean.out": Kernel(_mean, FLOAT),
    "aten::mean.dtype_out": Kernel(_mean, FLOAT),
    "aten::sum.IntList_out": Kernel(_sum, NUMERIC),
    "aten::sum.out": Kernel(_sum, NUMERIC),
    "aten::amax.out": Kernel(_extremum(np.amax), ALL),
    "aten::amin.out": Kernel(_extremum(np.amin), ALL),
    "aten::_softmax.out": Kernel(softmax, FLOAT),
    "aten::_log_softmax.out": Kernel(log_softmax, FLOAT),
}
