"""Reduction kernels: mean/sum/amax/amin over dims, softmax and log-softmax."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from runtime_py.kernels import Kernel
from runtime_py.kernels._common import (
    ALL,
    FLOAT,
    NUMERIC,
    KernelFn,
    Workspace,
    reduce_axes,
    workspace_bytes,
)


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


def _stat_shape(shape: tuple[int, ...], dim: int) -> list[int]:
    """The keepdims shape (``dim`` reduced) of the row max / normaliser."""
    stat = list(shape)
    stat[dim] = 1
    return stat


def _shifted(self: np.ndarray, dim: int, out: np.ndarray, stat: np.ndarray) -> None:
    """out = x - max(x) along ``dim`` (max computed into ``stat`` first: out may be self)."""
    np.max(self, axis=dim, keepdims=True, out=stat)
    np.subtract(self, stat, out=out)


def softmax(self: np.ndarray, dim: int, half_to_float: bool, *, out: np.ndarray,
            scratch: np.ndarray | None = None) -> None:
    """exp(x - max) / sum(exp(x - max)) along ``dim`` (a fully -inf row gives nan, like torch)."""
    del half_to_float  # float16 inputs are not supported
    stat = Workspace(scratch).take(_stat_shape(self.shape, dim), "float32")
    with np.errstate(invalid="ignore"):
        _shifted(self, dim, out, stat)
        np.exp(out, out=out)
        np.divide(out, np.sum(out, axis=dim, keepdims=True, out=stat), out=out)


def log_softmax(self: np.ndarray, dim: int, half_to_float: bool, *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> None:
    """x - max - log(sum(exp(x - max))), exp(x - max) in scratch so ``out`` may be ``self``."""
    del half_to_float
    ws = Workspace(scratch)
    stat, exp = ws.take(_stat_shape(self.shape, dim), "float32"), ws.take(out.shape, out.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        _shifted(self, dim, out, stat)
        np.exp(out, out=exp)
        np.log(np.sum(exp, axis=dim, keepdims=True, out=stat), out=stat)
        np.subtract(out, stat, out=out)


def _softmax_scratch(self: np.ndarray, dim: int, log: bool = False, **_: object) -> int:
    return workspace_bytes((_stat_shape(self.shape, dim), "float32"),
                           *([(self.shape, "float32")] if log else []))


_mean = _accumulate(np.mean)
_sum = _accumulate(np.sum)

KERNELS: dict[str, Kernel] = {
    "aten::mean.out": Kernel(_mean, FLOAT),
    "aten::mean.dtype_out": Kernel(_mean, FLOAT),
    "aten::sum.IntList_out": Kernel(_sum, NUMERIC),
    "aten::sum.out": Kernel(_sum, NUMERIC),
    "aten::amax.out": Kernel(_extremum(np.amax), ALL),
    "aten::amin.out": Kernel(_extremum(np.amin), ALL),
    "aten::_softmax.out": Kernel(softmax, FLOAT, inplace=True, scratch=_softmax_scratch),
    "aten::_log_softmax.out": Kernel(log_softmax, FLOAT, inplace=True,
                                     scratch=functools.partial(_softmax_scratch, log=True)),
}
