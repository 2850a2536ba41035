"""Elementwise kernels: arithmetic, comparisons, activations, where/clamp/pow.

Arithmetic ops compute in the out dtype (torch's result dtype) by passing ``dtype=out.dtype``,
so numpy casts inputs chunk-wise instead of materialising converted copies. Composite
activations chain in-place ufuncs on ``out``; those that read ``self`` again after writing
keep their intermediate in the planned scratch, so every kernel here is in-place safe.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from runtime_py.kernels import Bound, Kernel
from runtime_py.kernels._common import (
    ALL,
    BOOL,
    FLOAT,
    NUMERIC,
    KernelFn,
    Workspace,
    like_self,
    out_shaped,
    workspace_bytes,
)

Scalar = int | float | bool
ArrayOrScalar = np.ndarray | Scalar


def _unary(ufunc: np.ufunc) -> KernelFn:
    """``fn(self, out)`` applying ``ufunc`` in the out dtype."""

    def kernel(self: np.ndarray, *, out: np.ndarray) -> None:
        ufunc(self, out=out, dtype=out.dtype)

    return kernel


def _ufunc_into(ufunc: np.ufunc, a: ArrayOrScalar, b: ArrayOrScalar, out: np.ndarray) -> Bound:
    """``ufunc(a, b)`` into ``out`` in its dtype; an operand with ``out``'s element count is
    viewed in ``out``'s shape (it differs by size-1 dims only), so numpy takes its no-broadcast
    path."""
    a, b, dtype = out_shaped(a, out), out_shaped(b, out), out.dtype

    def run() -> None:
        ufunc(a, b, out=out, dtype=dtype)

    return run


def _binary(ufunc: np.ufunc) -> Callable[..., Bound]:
    """``prepare(self, other, out)`` applying ``ufunc`` in the out dtype (Tensor/Scalar)."""

    def prepare(self: ArrayOrScalar, other: ArrayOrScalar, *, out: np.ndarray) -> Bound:
        return _ufunc_into(ufunc, self, other, out)

    return prepare


def _binary_alpha(ufunc: np.ufunc) -> Callable[..., Bound]:
    """``prepare(self, other, alpha, out)`` = ``ufunc(self, alpha * other)`` (add/sub)."""

    def prepare(self: ArrayOrScalar, other: ArrayOrScalar, alpha: Scalar = 1, *,
                out: np.ndarray) -> Bound:
        if alpha == 1:
            return _ufunc_into(ufunc, self, other, out)

        def run() -> None:  # rare: an other-sized temporary for the scaled operand
            ufunc(self, np.multiply(other, alpha, dtype=out.dtype), out=out, dtype=out.dtype)

        return run

    return prepare


def _logical(ufunc: np.ufunc) -> KernelFn:
    """Comparison/logical ``ufunc`` in numpy's promoted input type, written to a bool out."""

    def kernel(self: ArrayOrScalar, other: ArrayOrScalar, *, out: np.ndarray) -> None:
        ufunc(self, other, out=out)

    return kernel


def div_mode(self: ArrayOrScalar, other: ArrayOrScalar, *, rounding_mode: str | None = None,
             out: np.ndarray) -> None:
    """``div`` with ``rounding_mode`` None (true division), "trunc" or "floor"."""
    if rounding_mode == "floor":
        np.floor_divide(self, other, out=out, dtype=out.dtype)
    elif rounding_mode == "trunc" and out.dtype.kind != "f":
        np.floor_divide(np.subtract(self, np.fmod(self, other)), other, out=out)  # exact for ints
    else:
        np.true_divide(self, other, out=out, dtype=out.dtype)
        if rounding_mode == "trunc":
            np.trunc(out, out=out)


def pow_(self: ArrayOrScalar, exponent: ArrayOrScalar, *, out: np.ndarray) -> None:
    """self ** exponent (Tensor/Scalar base and exponent)."""
    np.power(self, exponent, out=out, dtype=out.dtype)


def logical_not(self: np.ndarray, *, out: np.ndarray) -> None:
    np.logical_not(self, out=out)


def rsqrt(self: np.ndarray, *, out: np.ndarray) -> None:
    np.sqrt(self, out=out, dtype=out.dtype)
    np.divide(1, out, out=out)


def sigmoid(self: np.ndarray, *, out: np.ndarray) -> None:
    """1 / (1 + exp(-x)); exp overflow to inf gives the correct 0."""
    np.negative(self, out=out, dtype=out.dtype)
    np.exp(out, out=out)
    np.add(out, 1, out=out)
    np.divide(1, out, out=out)


def silu(self: np.ndarray, *, out: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """x * sigmoid(x), with sigmoid in scratch so ``out`` may be ``self``."""
    sig = Workspace(scratch).take(out.shape, out.dtype)
    sigmoid(self, out=sig)
    np.multiply(self, sig, out=out)


def relu(self: np.ndarray, *, out: np.ndarray) -> None:
    np.maximum(self, 0, out=out, dtype=out.dtype)


def leaky_relu(self: np.ndarray, negative_slope: float = 0.01, *, out: np.ndarray,
               scratch: np.ndarray | None = None) -> None:
    """x, times ``negative_slope`` where x < 0 (a bool mask in scratch)."""
    negative = Workspace(scratch).take(out.shape, np.bool_)
    np.less(self, 0, out=negative)
    np.copyto(out, self)
    np.multiply(out, negative_slope, out=out, where=negative)


def hardtanh(self: np.ndarray, min_val: float = -1, max_val: float = 1, *,
             out: np.ndarray) -> None:
    np.clip(self, min_val, max_val, out=out)


def clamp(self: np.ndarray, min: ArrayOrScalar | None = None,
          max: ArrayOrScalar | None = None, *, out: np.ndarray) -> None:
    """min(max(x, min), max), for Scalar or Tensor bounds (either may be None)."""
    np.clip(self, min, max, out=out)


def hardsigmoid(self: np.ndarray, *, out: np.ndarray) -> None:
    """clamp(x + 3, 0, 6) / 6."""
    np.add(self, 3, out=out, dtype=out.dtype)
    np.clip(out, 0, 6, out=out)
    np.divide(out, 6, out=out)


def hardswish(self: np.ndarray, *, out: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """x * clamp(x + 3, 0, 6) / 6, the clamp in scratch so ``out`` may be ``self``."""
    gate = Workspace(scratch).take(out.shape, out.dtype)
    np.add(self, 3, out=gate, dtype=out.dtype)
    np.clip(gate, 0, 6, out=gate)
    np.multiply(self, gate, out=out)
    np.divide(out, 6, out=out)


# Rational approximation of erf on [-4, 4] (odd numerator, even denominator), the float32
# scheme of Eigen/XLA; |x| > 4 rounds to +-1 in float32. Coefficients highest degree first.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def _horner(x2: np.ndarray, coeffs: tuple[float, ...], acc: np.ndarray) -> np.ndarray:
    acc.fill(coeffs[0])
    for c in coeffs[1:]:
        np.multiply(acc, x2, out=acc)
        np.add(acc, c, out=acc)
    return acc


def _erf(x: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """erf(x) into out (may be x) using two out-sized workspace regions (x^2, p then q)."""
    np.clip(x, -4, 4, out=out, dtype=out.dtype)
    x2, acc = ws.take(out.shape, out.dtype), ws.take(out.shape, out.dtype)
    np.square(out, out=x2)
    np.multiply(out, _horner(x2, _ERF_P, acc), out=out)
    np.divide(out, _horner(x2, _ERF_Q, acc), out=out)


def erf(self: np.ndarray, *, out: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """erf in float32 (numpy has none)."""
    _erf(self, out, Workspace(scratch))


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def gelu(self: np.ndarray, *, approximate: str = "none", out: np.ndarray,
         scratch: np.ndarray | None = None) -> None:
    """x/2 (1 + erf(x / sqrt 2)); approximate="tanh": x/2 (1 + tanh(c (x + 0.044715 x^3))).

    The bracket is built in scratch, so ``out`` may be ``self``.
    """
    ws = Workspace(scratch)
    t = ws.take(out.shape, out.dtype)
    if approximate == "tanh":
        np.square(self, out=t, dtype=out.dtype)
        np.multiply(t, 0.044715, out=t)
        np.add(t, 1, out=t)
        np.multiply(t, self, out=t)
        np.multiply(t, _SQRT_2_OVER_PI, out=t)
        np.tanh(t, out=t)
        np.add(t, 1, out=t)
    else:
        _one_plus_erf(self, t, ws)
    np.multiply(t, self, out=out)
    np.multiply(out, 0.5, out=out)


# Numerical Recipes' erfcc: erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), for z >= 0, with a
# relative error below 1.2e-7 everywhere, so the tails keep their precision.
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
         -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _one_plus_erf(x: np.ndarray, acc: np.ndarray, ws: Workspace) -> None:
    """``1 + erf(x / sqrt 2)`` into ``acc``, as erfc(|z|) for x < 0 and 2 - erfc(|z|) otherwise
    (no cancellation where erf is near -1); two float and one bool workspace regions."""
    z, t = ws.take(acc.shape, acc.dtype), ws.take(acc.shape, acc.dtype)
    np.abs(x, out=z, dtype=acc.dtype)
    np.multiply(z, math.sqrt(0.5), out=z)
    np.multiply(z, 0.5, out=t)
    np.add(t, 1, out=t)
    np.reciprocal(t, out=t)
    acc.fill(_ERFC[-1])
    for c in reversed(_ERFC[:-1]):
        np.multiply(acc, t, out=acc)
        np.add(acc, c, out=acc)
    np.square(z, out=z)
    np.subtract(acc, z, out=acc)
    np.exp(acc, out=acc)
    np.multiply(acc, t, out=acc)  # erfc(|z|)
    np.subtract(2, acc, out=z)
    nonnegative = ws.take(acc.shape, np.bool_)
    np.greater_equal(x, 0, out=nonnegative)
    np.copyto(acc, z, where=nonnegative)


def _gelu_scratch(self: np.ndarray, approximate: str = "none", **_: object) -> int:
    if approximate == "tanh":
        return like_self(1)(self)
    return like_self(3)(self) + workspace_bytes((np.shape(self), np.bool_))


def where(condition: np.ndarray, self: ArrayOrScalar, other: ArrayOrScalar, *,
          out: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """self where condition else other; ``out`` may be any input (a bool mask in scratch)."""
    if np.may_share_memory(out, self):  # self is in place already: fill where not condition
        keep = Workspace(scratch).take(out.shape, np.bool_)
        np.logical_not(condition, out=keep)
        np.copyto(out, other, where=keep)
        return
    if np.may_share_memory(out, condition):
        mask = Workspace(scratch).take(out.shape, np.bool_)
        np.copyto(mask, condition)
        condition = mask
    np.copyto(out, other)
    np.copyto(out, self, where=condition)


def _where_scratch(condition: np.ndarray, self: ArrayOrScalar, other: ArrayOrScalar,
                   **_: object) -> int:
    return workspace_bytes((np.broadcast_shapes(*map(np.shape, (condition, self, other))),
                            np.bool_))


def _binary_keys(op: str, dtypes: frozenset[str],
                 prepare: Callable[..., Bound]) -> dict[str, Kernel]:
    """The Tensor (``op.out``) and Scalar (``op.Scalar_out``) overloads share one kernel."""
    return {f"aten::{op}.{overload}": Kernel.prepared(prepare, dtypes, inplace=True)
            for overload in ("out", "Scalar_out")}


def _inplace(fn: KernelFn, dtypes: frozenset[str],
             scratch: Callable[..., int] | None = None) -> Kernel:
    """Every kernel here is in-place safe: ``out`` may be any same-shaped input."""
    return Kernel(fn, dtypes, inplace=True, scratch=scratch)


_COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}

_FLOAT_UNARY = {name: _unary(getattr(np, name)) for name in
                ("exp", "log", "sqrt", "reciprocal", "tanh")}

KERNELS: dict[str, Kernel] = {
    **_binary_keys("add", ALL, _binary_alpha(np.add)),
    **_binary_keys("sub", NUMERIC, _binary_alpha(np.subtract)),
    **_binary_keys("mul", ALL, _binary(np.multiply)),
    **_binary_keys("div", FLOAT, _binary(np.true_divide)),
    "aten::div.out_mode": _inplace(div_mode, NUMERIC),
    "aten::div.Scalar_mode_out": _inplace(div_mode, NUMERIC),
    "aten::maximum.out": Kernel.prepared(_binary(np.maximum), ALL, inplace=True),
    "aten::minimum.out": Kernel.prepared(_binary(np.minimum), ALL, inplace=True),
    **{f"aten::pow.{overload}": _inplace(pow_, NUMERIC)
       for overload in ("Tensor_Scalar_out", "Tensor_Tensor_out", "Scalar_out")},
    **{f"aten::{name}.{overload}": _inplace(_logical(ufunc), BOOL)
       for name, ufunc in _COMPARISONS.items() for overload in ("Scalar_out", "Tensor_out")},
    **{f"aten::logical_{name}.out": _inplace(_logical(getattr(np, f"logical_{name}")), BOOL)
       for name in ("and", "or", "xor")},
    "aten::logical_not.out": _inplace(logical_not, BOOL),
    **{f"aten::{name}.out": _inplace(fn, FLOAT) for name, fn in _FLOAT_UNARY.items()},
    "aten::neg.out": _inplace(_unary(np.negative), NUMERIC),
    "aten::abs.out": _inplace(_unary(np.absolute), NUMERIC),
    "aten::rsqrt.out": _inplace(rsqrt, FLOAT),
    "aten::erf.out": _inplace(erf, FLOAT, like_self(2)),
    "aten::sigmoid.out": _inplace(sigmoid, FLOAT),
    "aten::silu.out": _inplace(silu, FLOAT, like_self(1)),
    "aten::gelu.out": _inplace(gelu, FLOAT, _gelu_scratch),
    "aten::relu.out": _inplace(relu, NUMERIC),
    "aten::leaky_relu.out": _inplace(leaky_relu, FLOAT, like_self(1, "bool")),
    "aten::hardtanh.out": _inplace(hardtanh, FLOAT),
    "aten::hardsigmoid.out": _inplace(hardsigmoid, FLOAT),
    "aten::hardswish.out": _inplace(hardswish, FLOAT, like_self(1)),
    "aten::clamp.out": _inplace(clamp, NUMERIC),
    "aten::clamp.Tensor_out": _inplace(clamp, NUMERIC),
    "aten::where.self_out": _inplace(where, ALL, _where_scratch),
}
