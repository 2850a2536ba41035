"""Reduction kernels: mean/sum/amax/amin over dims, softmax and log-softmax."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from runtime_py.kernels import Bound, Kernel
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


def _rows_along(self: np.ndarray, dim: int, out: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                        np.ndarray]:
    """(``self``, ``out``) with ``dim`` last, and the rows of ``out`` to work on: a 2-D
    (rows, n) view when ``dim`` is the last dim (numpy iterates 2-D broadcasts with the least
    bookkeeping), else ``out`` with ``dim`` moved last."""
    if dim % self.ndim != self.ndim - 1:
        self, out = np.moveaxis(self, dim, -1), np.moveaxis(out, dim, -1)
    return self, out, out.reshape(-1, out.shape[-1]) if out.flags.c_contiguous else out


def _softmax(self: np.ndarray, dim: int, out: np.ndarray, scratch: np.ndarray | None,
             log: bool) -> Bound:
    """softmax or log_softmax of ``self`` along ``dim``: x - max(x) and the row statistic are
    computed in ``out`` (a copy of ``self``, so ``out`` may be ``self``); log_softmax keeps
    exp(x - max) in scratch."""
    self, out, rows = _rows_along(self, dim, out)
    ws = Workspace(scratch)
    stat = ws.take((*rows.shape[:-1], 1), "float32")
    exp = ws.take(rows.shape, "float32") if log else rows

    def run() -> None:
        np.copyto(out, self)
        np.maximum.reduce(rows, axis=-1, keepdims=True, out=stat)
        np.subtract(rows, stat, out=rows)
        np.exp(rows, out=exp)
        np.add.reduce(exp, axis=-1, keepdims=True, out=stat)
        if log:
            np.log(stat, out=stat)
            np.subtract(rows, stat, out=rows)
        else:
            np.divide(rows, stat, out=rows)

    return run


def softmax(self: np.ndarray, dim: int, half_to_float: bool, *, out: np.ndarray,
            scratch: np.ndarray | None = None) -> Bound:
    """exp(x - max) / sum(exp(x - max)) along ``dim`` (a fully -inf row gives nan, like torch);
    ``half_to_float`` is moot: float16 inputs are not supported."""
    return _softmax(self, dim, out, scratch, log=False)


def log_softmax(self: np.ndarray, dim: int, half_to_float: bool, *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
    """x - max - log(sum(exp(x - max))) along ``dim``."""
    return _softmax(self, dim, out, scratch, log=True)


def _softmax_scratch(self: np.ndarray, dim: int, log: bool = False, **_: object) -> int:
    stat = (self.size // max(1, self.shape[dim]) if self.ndim else 1, 1)
    return workspace_bytes((stat, "float32"), *([(self.shape, "float32")] if log else []))


_mean = _accumulate(np.mean)
_sum = _accumulate(np.sum)

KERNELS: dict[str, Kernel] = {
    "aten::mean.out": Kernel(_mean, FLOAT),
    "aten::mean.dtype_out": Kernel(_mean, FLOAT),
    "aten::sum.IntList_out": Kernel(_sum, NUMERIC),
    "aten::sum.out": Kernel(_sum, NUMERIC),
    "aten::amax.out": Kernel(_extremum(np.amax), ALL),
    "aten::amin.out": Kernel(_extremum(np.amin), ALL),
    "aten::_softmax.out": Kernel.prepared(softmax, FLOAT, inplace=True,
                                          scratch=_softmax_scratch),
    "aten::_log_softmax.out": Kernel.prepared(log_softmax, FLOAT, inplace=True,
                                              scratch=functools.partial(_softmax_scratch,
                                                                        log=True)),
}
