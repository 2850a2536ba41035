"""Reduction kernels: mean/sum/prod/amax/amin/any/all, arg-max/min, max/min with indices, norms,
variance over dims; cumsum, softmax and log-softmax along one.

Variance and norms build their elementwise terms in a planned self-sized scratch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from runtime_py.kernels import Bound, Kernel, elementwise, linalg, rules
from runtime_py.kernels._common import (
    ALL,
    BOOL,
    FLOAT,
    NUMERIC,
    KernelFn,
    Workspace,
    like_self,
    reduce_axes,
    view_as,
    workspace_bytes,
)

INDEX = frozenset({"int64"})  # argmax/argmin outputs


def _accumulate(reducer: Callable[..., np.ndarray]) -> KernelFn:
    """mean/sum/prod: ``fn(self, dim, keepdim, dtype, out)``, accumulating in the out dtype."""

    def kernel(self: np.ndarray, dim: Sequence[int] | int | None = None, keepdim: bool = False, *,
               dtype: str | None = None, out: np.ndarray) -> None:
        del dtype  # the requested dtype is the out dtype
        reducer(self, axis=reduce_axes(dim), keepdims=keepdim, out=out, dtype=out.dtype)

    return kernel


def _as_product(fn: KernelFn, mean: bool) -> Callable[..., Bound]:
    """sum (or mean) as ``fn``, except a float32 reduction over ``self``'s last dims, which is
    a matrix-vector product: (rows, n) @ a column of n ones (of 1 / n for the mean). One BLAS
    call for any shape, where numpy's reduction loops over rows (a squeeze-excite block's mean
    over 576 3x3 maps: 1.5 us vs np.mean's 10.8)."""

    def prepare(self: np.ndarray, dim: Sequence[int] | int | None = None, keepdim: bool = False,
                *, dtype: str | None = None, out: np.ndarray) -> Bound:
        reduced = sorted(rules.axes(dim, self.ndim))
        n = math.prod(self.shape[a] for a in reduced)
        trailing = reduced == list(range(self.ndim - len(reduced), self.ndim))
        if trailing and n and out.size and self.dtype == out.dtype == np.float32:
            rows, column = view_as(self, (out.size, n)), view_as(out, (out.size, 1))
            if rows is not None and column is not None:
                weights = np.full((n, 1), 1 / n if mean else 1, np.float32)
                return linalg.product(rows, weights, column)
        return functools.partial(fn, self, dim, keepdim, dtype=dtype, out=out)

    return prepare


def _extremum(reducer: Callable[..., np.ndarray]) -> KernelFn:
    """amax/amin: ``fn(self, dim, keepdim, out)``; empty dim reduces all dims."""

    def kernel(self: np.ndarray, dim: Sequence[int] = (), keepdim: bool = False, *,
               out: np.ndarray) -> None:
        reducer(self, axis=reduce_axes(dim), keepdims=keepdim, out=out)

    return kernel


def _truth(reducer: Callable[..., np.ndarray]) -> KernelFn:
    """any/all: ``fn(self, dim, keepdim, out)`` to a bool out; dim is an int, a list (empty
    reduces nothing, as in torch) or None (all dims)."""

    def kernel(self: np.ndarray, dim: Sequence[int] | int | None = None, keepdim: bool = False,
               *, out: np.ndarray) -> None:
        axis = (dim,) if isinstance(dim, int) else dim
        reducer(self, axis=axis, keepdims=keepdim, out=out)

    return kernel


def _arg_extremum(reducer: Callable[..., np.ndarray]) -> KernelFn:
    """argmax/argmin: ``fn(self, dim, keepdim, out)``, dim None for the flat index. numpy, like
    torch, returns the first index among ties and treats nan as the extremum (its first one);
    along a dim other than a contiguous last one it copies ``self`` first."""

    def kernel(self: np.ndarray, dim: int | None = None, keepdim: bool = False, *,
               out: np.ndarray) -> None:
        reducer(self, axis=dim, keepdims=keepdim, out=out)

    return kernel


def max_dim(self: np.ndarray, dim: int, keepdim: bool = False, *, max: np.ndarray,
            max_values: np.ndarray) -> None:
    """The max along ``dim`` (``max``) and its first index (``max_values``); nan wins."""
    np.amax(self, axis=dim, keepdims=keepdim, out=max)
    np.argmax(self, axis=dim, keepdims=keepdim, out=max_values)


def min_dim(self: np.ndarray, dim: int, keepdim: bool = False, *, min: np.ndarray,
            min_indices: np.ndarray) -> None:
    """The min along ``dim`` (``min``) and its first index (``min_indices``); nan wins."""
    np.amin(self, axis=dim, keepdims=keepdim, out=min)
    np.argmin(self, axis=dim, keepdims=keepdim, out=min_indices)


def cumsum(self: np.ndarray, dim: int, *, dtype: str | None = None, out: np.ndarray,
           scratch: np.ndarray | None = None) -> None:
    """Running sum along ``dim``: ``self`` cast to the out dtype (torch casts first too), then
    accumulated in place; a float sum accumulates in a float64 scratch, as torch's CPU kernel
    does (float32 drifts over long rows), ints and bools in the int64 out."""
    acc = Workspace(scratch).take(out.shape, np.float64) if out.dtype.kind == "f" else out
    np.copyto(acc, self, casting="unsafe")
    np.add.accumulate(acc, axis=dim, out=acc)
    if acc is not out:
        np.copyto(out, acc)


def _cumsum_scratch(self: np.ndarray, dtype: str | None = None, **_: object) -> int:
    """A float64 accumulator when the result (``dtype``, else self's) is float."""
    floating = np.dtype(dtype or self.dtype).kind == "f"
    return workspace_bytes((np.shape(self), np.float64)) if floating else 0


def _kept(self: np.ndarray, axis: tuple[int, ...] | None, out: np.ndarray) -> np.ndarray:
    """``out`` (the reduction of ``self`` over ``axis``) viewed with the reduced dims kept."""
    shape = list(self.shape)
    for a in range(self.ndim) if axis is None else axis:
        shape[a] = 1
    return out.reshape(shape)


def _variance(self: np.ndarray, dim: Sequence[int] | None, correction: float | None,
              var: np.ndarray, mean: np.ndarray, scratch: np.ndarray | None) -> None:
    """Two passes: the mean into ``mean`` (which may be ``var``), the squared deviations in
    scratch summed into ``var``, divided by max(0, n - correction) (None: 1) as torch."""
    axis = reduce_axes(dim)
    var_k, mean_k = _kept(self, axis, var), _kept(self, axis, mean)
    dev = Workspace(scratch).take(self.shape, var.dtype)
    np.mean(self, axis=axis, keepdims=True, out=mean_k)
    np.subtract(self, mean_k, dev)
    np.square(dev, dev)
    np.add.reduce(dev, axis=axis, keepdims=True, out=var_k)
    n = self.size // max(1, var.size)
    np.divide(var_k, max(0, n - (1 if correction is None else correction)), out=var_k)


def var(self: np.ndarray, dim: Sequence[int] | None = None, *,
        correction: float | None = None, keepdim: bool = False, out: np.ndarray,
        scratch: np.ndarray | None = None) -> None:
    """Variance over ``dim`` (None or [] for all) with ``correction``; out holds the mean first."""
    del keepdim  # out's shape tells
    _variance(self, dim, correction, out, out, scratch)


def var_mean(self: np.ndarray, dim: Sequence[int] | None = None, *,
             correction: float | None = None, keepdim: bool = False, out0: np.ndarray,
             out1: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """Variance (``out0``) and mean (``out1``) over ``dim``."""
    del keepdim  # the outs' shapes tell
    _variance(self, dim, correction, out0, out1, scratch)


def linalg_vector_norm(self: np.ndarray, ord: float = 2, dim: Sequence[int] | None = None,
                       keepdim: bool = False, *, dtype: str | None = None, out: np.ndarray,
                       scratch: np.ndarray | None = None) -> None:
    """sum(|x|^ord)^(1/ord) over ``dim`` (None or [] for all); ord inf/-inf: max/min |x|; ord 0:
    the count of nonzeros (nan counts). The terms are built in scratch."""
    del dtype  # the out dtype (float32)
    axis, terms = reduce_axes(dim), Workspace(scratch).take(self.shape, out.dtype)
    if ord == 0:
        np.not_equal(self, 0, terms)
        np.add.reduce(terms, axis=axis, keepdims=keepdim, out=out)
        return
    np.abs(self, terms)
    if math.isinf(ord):
        extremum = np.maximum if ord > 0 else np.minimum
        extremum.reduce(terms, axis=axis, keepdims=keepdim, out=out)
        return
    _power(terms, ord)
    np.add.reduce(terms, axis=axis, keepdims=keepdim, out=out)
    _power(out, 1 / ord)


def _power(x: np.ndarray, p: float) -> None:
    """x **= p in place (as torch: x * x for 2, sqrt for 1/2)."""
    if p == 2:
        np.square(x, x)
    elif p == 0.5:
        np.sqrt(x, x)
    elif p != 1:
        np.power(x, p, x)


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
    exp(x - max) in scratch (a 0-d ``self`` as one row of 1). Over short rows the statistic is
    spread over them in scratch first (``elementwise.by_rows``), if the scratch has the room
    (an older bundle's has not)."""
    if self.ndim == 0:
        self, out, dim = self.reshape(1), out.reshape(1), 0
    self, out, rows = _rows_along(self, dim, out)
    ws = Workspace(scratch)
    stat = ws.take((*rows.shape[:-1], 1), "float32")
    exp = ws.take(rows.shape, "float32") if log else rows
    row_sums = _row_sums(exp, stat)
    need, room = elementwise.spread_bytes(rows.shape), ws.room()
    spread = ws.take((need,), np.uint8) if room is None or room >= need else None
    centre, scale = (elementwise.by_rows(ufunc, rows, stat, spread)
                     for ufunc in (np.subtract, np.multiply))

    def run() -> None:
        np.copyto(out, self)
        np.maximum.reduce(rows, axis=-1, keepdims=True, out=stat)
        centre()
        np.exp(rows, exp)
        row_sums()
        if log:
            np.log(stat, stat)
            centre()
        else:
            np.reciprocal(stat, stat)
            scale()

    return run


def _row_sums(rows: np.ndarray, sums: np.ndarray) -> Bound:
    """The call summing ``rows`` along the last axis into ``sums`` (keepdims shape): a product
    with a ones column (one BLAS gemv, ~10x numpy's short-row sums) when ``rows`` is
    contiguous, else numpy's reduction."""
    if not rows.flags.c_contiguous:
        return functools.partial(np.add.reduce, rows, axis=-1, keepdims=True, out=sums)
    ones = np.ones((rows.shape[-1], 1), rows.dtype)
    return linalg.product(rows, ones, sums)


def softmax(self: np.ndarray, dim: int, half_to_float: bool, *, out: np.ndarray,
            scratch: np.ndarray | None = None) -> Bound:
    """exp(x - max) / sum(exp(x - max)) along ``dim`` (a fully -inf row gives nan, like torch);
    ``half_to_float`` is moot: float16 inputs are not supported."""
    return _softmax(self, dim, out, scratch, log=False)


def log_softmax(self: np.ndarray, dim: int, half_to_float: bool, *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
    """x - max - log(sum(exp(x - max))) along ``dim``."""
    return _softmax(self, dim, out, scratch, log=True)


def _softmax_scratch(self: np.ndarray, dim: int, log: bool = False, budget: int | None = None,
                     **_: object) -> int:
    """The row statistic, exp(x - max) for log_softmax, and (unless over a ``budget``) the
    statistic spread over short rows."""
    stat = (self.size // max(1, self.shape[dim]) if self.ndim else 1, 1)
    regions = [(stat, "float32"), *([(self.shape, "float32")] if log else [])]
    rows = (stat[0], self.shape[dim]) if self.ndim and dim % self.ndim == self.ndim - 1 else ()
    full = workspace_bytes(*regions, ((elementwise.spread_bytes(rows),), "uint8"))
    return full if budget is None or full <= budget else workspace_bytes(*regions)


# Out dtypes from self's dtype and the ``dtype`` argument (None: torch refuses the input).


def _same(dtype: np.dtype, _: object) -> np.dtype:
    return dtype


def _index(dtype: np.dtype, _: object) -> np.dtype:
    return rules.INT64


def _truth_dtype(dtype: np.dtype, _: object) -> np.dtype:
    """any/all give bool (uint8 for uint8)."""
    return dtype if dtype == np.uint8 else rules.BOOL


def _sum_dtype(dtype: np.dtype, requested: str | None) -> np.dtype:
    """sum/prod/cumsum: the requested dtype, else floats keep theirs, ints and bools int64."""
    if requested is not None:
        return np.dtype(requested)
    return dtype if dtype.kind == "f" else rules.INT64


def _mean_dtype(dtype: np.dtype, requested: str | None) -> np.dtype | None:
    """mean: the requested dtype or self's, a float one."""
    result = np.dtype(requested) if requested is not None else dtype
    return result if result.kind == "f" else None


def _float_dtype(dtype: np.dtype, requested: str | None) -> np.dtype | None:
    """var, vector norm: a float self; the requested dtype or self's."""
    return (np.dtype(requested) if requested is not None else dtype) if dtype.kind == "f" else None


_ONE_DIM, _OPTIONAL_DIM = (int,), (int, type(None))


def _norm_identity(self: np.ndarray, ord: float = 2, dim: Sequence[int] | None = None,
                   **_: object) -> None:
    """torch: the inf and negative norms have no identity: no empty reduction."""
    rules.number(ord, "ord")
    reduced = rules.axes(dim, self.ndim)
    if (ord < 0 or math.isinf(ord)) and any(self.shape[a] == 0 for a in reduced):
        rules.refuse({"self": self, "ord": ord, "dim": dim}, "an empty reduction")


def _check_cumsum(self: np.ndarray, dim: int, *, dtype: str | None = None, out: np.ndarray,
                  **_: object) -> None:
    """out has self's shape, in the requested dtype (else int64 for ints and bools)."""
    rules.tensor(self, "self")
    if self.ndim == 0:
        raise NotImplementedError("cumsum of a 0-d tensor")
    rules.axis(dim, self.ndim)
    rules.expect(out, self.shape, _sum_dtype(self.dtype, dtype), {"self": self, "dim": dim})


def _check_softmax(self: np.ndarray, dim: int, half_to_float: bool, *, out: np.ndarray,
                   **_: object) -> None:
    """out has float self's shape and dtype (half_to_float is for float16 inputs only)."""
    rules.tensor(self, "self", frozenset({rules.FLOAT32}))
    rules.axis(dim, self.ndim)
    if half_to_float:
        raise ValueError("half_to_float takes a float16 self")
    rules.expect(out, self.shape, self.dtype, {"self": self, "dim": dim})


_CORRECTION = rules.numbers("correction", optional=True)
_SUM = rules.reduction(("out", _sum_dtype))
_MEAN = rules.reduction(("out", _mean_dtype))
_VAR = rules.reduction(("out", _float_dtype))
_EXTREMUM = rules.reduction(("out", _same), identity=False)
_ARG_EXTREMUM = rules.reduction(("out", _index), dim_types=_OPTIONAL_DIM, identity=False)
_mean = _accumulate(np.mean)
_sum = _accumulate(np.sum)
_prod = _accumulate(np.prod)
_TRUTH = {"any": _truth(np.any), "all": _truth(np.all)}
# any/all overloads: dim an int, a list (empty: no dims) or None, none (all dims)
_TRUTH_RULES = {"out": rules.reduction(("out", _truth_dtype), dim_types=_ONE_DIM),
                "dims_out": rules.reduction(("out", _truth_dtype), empty_all=False),
                "all_out": rules.reduction(("out", _truth_dtype))}

KERNELS: dict[str, Kernel] = {
    "aten::mean.out": Kernel.prepared(_as_product(_mean, True), FLOAT, check=_MEAN),
    "aten::mean.dtype_out": Kernel.prepared(_as_product(_mean, True), FLOAT, check=_MEAN),
    "aten::sum.IntList_out": Kernel.prepared(_as_product(_sum, False), NUMERIC, check=_SUM),
    "aten::sum.out": Kernel.prepared(_as_product(_sum, False), NUMERIC, check=_SUM),
    "aten::prod.int_out": Kernel(_prod, NUMERIC,
                                 check=rules.reduction(("out", _sum_dtype), dim_types=_ONE_DIM)),
    "aten::prod.out": Kernel(_prod, NUMERIC, check=_SUM),
    "aten::amax.out": Kernel(_extremum(np.amax), ALL, check=_EXTREMUM),
    "aten::amin.out": Kernel(_extremum(np.amin), ALL, check=_EXTREMUM),
    **{f"aten::{name}.{overload}": Kernel(fn, BOOL, check=check)
       for name, fn in _TRUTH.items() for overload, check in _TRUTH_RULES.items()},
    "aten::argmax.out": Kernel(_arg_extremum(np.argmax), INDEX, check=_ARG_EXTREMUM),
    "aten::argmin.out": Kernel(_arg_extremum(np.argmin), INDEX, check=_ARG_EXTREMUM),
    "aten::max.dim_max": Kernel(max_dim, ALL, check=rules.reduction(
        ("max", _same), ("max_values", _index), dim_types=_ONE_DIM, identity=False)),
    "aten::min.dim_min": Kernel(min_dim, ALL, check=rules.reduction(
        ("min", _same), ("min_indices", _index), dim_types=_ONE_DIM, identity=False)),
    "aten::cumsum.out": Kernel(cumsum, NUMERIC, scratch=_cumsum_scratch, check=_check_cumsum),
    "aten::linalg_vector_norm.out": Kernel(linalg_vector_norm, FLOAT, scratch=like_self(1),
                                           check=rules.all_of(_VAR, _norm_identity)),
    "aten::var.correction_out": Kernel(var, FLOAT, scratch=like_self(1),
                                       check=rules.all_of(_VAR, _CORRECTION)),
    "aten::var_mean.correction_out": Kernel(var_mean, FLOAT, scratch=like_self(1),
                                            check=rules.all_of(rules.reduction(
                                                ("out0", _float_dtype), ("out1", _float_dtype)),
                                                _CORRECTION)),
    "aten::_softmax.out": Kernel.prepared(softmax, FLOAT, inplace=True,
                                          scratch=_softmax_scratch, check=_check_softmax),
    "aten::_log_softmax.out": Kernel.prepared(log_softmax, FLOAT, inplace=True,
                                              scratch=functools.partial(_softmax_scratch,
                                                                        log=True),
                                              check=_check_softmax),
}
