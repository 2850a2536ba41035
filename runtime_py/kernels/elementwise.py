"""Elementwise kernels: arithmetic, comparisons, activations, where/clamp/pow.

Arithmetic ops compute in the out dtype (torch's result dtype) by passing ``dtype=out.dtype``,
so numpy casts inputs chunk-wise instead of materialising converted copies. Composite
activations chain in-place ufuncs on ``out``.
"""

from __future__ import annotations

import math

import numpy as np

from runtime_py.kernels import Kernel
from runtime_py.kernels._common import ALL, BOOL, FLOAT, NUMERIC, KernelFn, quiet

Scalar = int | float | bool
ArrayOrScalar = np.ndarray | Scalar


def _unary(ufunc: np.ufunc) -> KernelFn:
    """``fn(self, out)`` applying ``ufunc`` in the out dtype."""

    @quiet
    def kernel(self: np.ndarray, *, out: np.ndarray) -> None:
        ufunc(self, out=out, dtype=out.dtype)

    return kernel


def _binary(ufunc: np.ufunc) -> KernelFn:
    """``fn(self, other, out)`` applying ``ufunc`` in the out dtype (Tensor/Scalar overloads)."""

    @quiet
    def kernel(self: ArrayOrScalar, other: ArrayOrScalar, *, out: np.ndarray) -> None:
        ufunc(self, other, out=out, dtype=out.dtype)

    return kernel


def _binary_alpha(ufunc: np.ufunc) -> KernelFn:
    """``fn(self, other, alpha, out)`` = ``ufunc(self, alpha * other)`` (add/sub)."""

    def kernel(self: ArrayOrScalar, other: ArrayOrScalar, alpha: Scalar = 1, *,
               out: np.ndarray) -> None:
        if alpha != 1:  # rare: an other-sized temporary for the scaled operand
            other = np.multiply(other, alpha, dtype=out.dtype)
        ufunc(self, other, out=out, dtype=out.dtype)

    return kernel


def _logical(ufunc: np.ufunc) -> KernelFn:
    """Comparison/logical ``ufunc`` in numpy's promoted input type, written to a bool out."""

    @quiet
    def kernel(self: ArrayOrScalar, other: ArrayOrScalar, *, out: np.ndarray) -> None:
        ufunc(self, other, out=out)

    return kernel


@quiet
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


@quiet
def pow_(self: ArrayOrScalar, exponent: ArrayOrScalar, *, out: np.ndarray) -> None:
    """self ** exponent (Tensor/Scalar base and exponent)."""
    np.power(self, exponent, out=out, dtype=out.dtype)


def logical_not(self: np.ndarray, *, out: np.ndarray) -> None:
    np.logical_not(self, out=out)


def rsqrt(self: np.ndarray, *, out: np.ndarray) -> None:
    with np.errstate(divide="ignore", invalid="ignore"):
        np.sqrt(self, out=out, dtype=out.dtype)
        np.divide(1, out, out=out)


def sigmoid(self: np.ndarray, *, out: np.ndarray) -> None:
    """1 / (1 + exp(-x)); exp overflow to inf gives the correct 0."""
    with np.errstate(over="ignore"):
        np.negative(self, out=out, dtype=out.dtype)
        np.exp(out, out=out)
    np.add(out, 1, out=out)
    np.divide(1, out, out=out)


def silu(self: np.ndarray, *, out: np.ndarray) -> None:
    sigmoid(self, out=out)
    np.multiply(out, self, out=out)


def relu(self: np.ndarray, *, out: np.ndarray) -> None:
    np.maximum(self, 0, out=out, dtype=out.dtype)


def leaky_relu(self: np.ndarray, negative_slope: float = 0.01, *, out: np.ndarray) -> None:
    np.multiply(self, negative_slope, out=out, dtype=out.dtype)
    np.copyto(out, self, where=self > 0)


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


def hardswish(self: np.ndarray, *, out: np.ndarray) -> None:
    """x * clamp(x + 3, 0, 6) / 6."""
    np.add(self, 3, out=out, dtype=out.dtype)
    np.clip(out, 0, 6, out=out)
    np.multiply(out, self, out=out)
    np.divide(out, 6, out=out)


# Rational approximation of erf on [-4, 4] (odd numerator, even denominator), the float32
# scheme of Eigen/XLA; |x| > 4 rounds to +-1 in float32. Coefficients highest degree first.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def _horner(x2: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    acc = np.full_like(x2, coeffs[0])
    for c in coeffs[1:]:
        np.multiply(acc, x2, out=acc)
        np.add(acc, c, out=acc)
    return acc


def erf(self: np.ndarray, *, out: np.ndarray) -> None:
    """erf in float32 (numpy has none). Needs 3 out-sized scratch arrays (x^2, p, q)."""
    np.clip(self, -4, 4, out=out, dtype=out.dtype)
    x2 = np.square(out)
    np.multiply(out, _horner(x2, _ERF_P), out=out)
    np.divide(out, _horner(x2, _ERF_Q), out=out)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def gelu(self: np.ndarray, *, approximate: str = "none", out: np.ndarray) -> None:
    """x/2 (1 + erf(x / sqrt 2)); approximate="tanh": x/2 (1 + tanh(c (x + 0.044715 x^3)))."""
    if approximate == "tanh":
        np.square(self, out=out, dtype=out.dtype)
        np.multiply(out, 0.044715, out=out)
        np.add(out, 1, out=out)
        np.multiply(out, self, out=out)
        np.multiply(out, _SQRT_2_OVER_PI, out=out)
        np.tanh(out, out=out)
    else:
        np.multiply(self, math.sqrt(0.5), out=out, dtype=out.dtype)
        erf(out, out=out)
    np.add(out, 1, out=out)
    np.multiply(out, self, out=out)
    np.multiply(out, 0.5, out=out)


def where(condition: np.ndarray, self: ArrayOrScalar, other: ArrayOrScalar, *,
          out: np.ndarray) -> None:
    np.copyto(out, other)
    np.copyto(out, self, where=condition)


def _binary_keys(op: str, dtypes: frozenset[str], fn: KernelFn) -> dict[str, Kernel]:
    """The Tensor (``op.out``) and Scalar (``op.Scalar_out``) overloads share one kernel."""
    return {f"aten::{op}.out": Kernel(fn, dtypes), f"aten::{op}.Scalar_out": Kernel(fn, dtypes)}


_COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}

_FLOAT_UNARY = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
                "reciprocal": np.reciprocal}

KERNELS: dict[str, Kernel] = {
    **_binary_keys("add", ALL, _binary_alpha(np.add)),
    **_binary_keys("sub", NUMERIC, _binary_alpha(np.subtract)),
    **_binary_keys("mul", ALL, _binary(np.multiply)),
    **_binary_keys("div", FLOAT, _binary(np.true_divide)),
    "aten::div.out_mode": Kernel(div_mode, NUMERIC),
    "aten::div.Scalar_mode_out": Kernel(div_mode, NUMERIC),
    "aten::maximum.out": Kernel(_binary(np.maximum), ALL),
    "aten::minimum.out": Kernel(_binary(np.minimum), ALL),
    **{f"aten::pow.{overload}": Kernel(pow_, NUMERIC)
       for overload in ("Tensor_Scalar_out", "Tensor_Tensor_out", "Scalar_out")},
    **{f"aten::{name}.{overload}": Kernel(_logical(ufunc), BOOL)
       for name, ufunc in _COMPARISONS.items() for overload in ("Scalar_out", "Tensor_out")},
    **{f"aten::logical_{name}.out": Kernel(_logical(getattr(np, f"logical_{name}")), BOOL)
       for name in ("and", "or", "xor")},
    "aten::logical_not.out": Kernel(logical_not, BOOL),
    **{f"aten::{name}.out": Kernel(_unary(ufunc), FLOAT) for name, ufunc in _FLOAT_UNARY.items()},
    "aten::neg.out": Kernel(_unary(np.negative), NUMERIC),
    "aten::abs.out": Kernel(_unary(np.absolute), NUMERIC),
    "aten::rsqrt.out": Kernel(rsqrt, FLOAT),
    "aten::erf.out": Kernel(erf, FLOAT),
    "aten::sigmoid.out": Kernel(sigmoid, FLOAT),
    "aten::silu.out": Kernel(silu, FLOAT),
    "aten::gelu.out": Kernel(gelu, FLOAT),
    "aten::relu.out": Kernel(relu, NUMERIC),
    "aten::leaky_relu.out": Kernel(leaky_relu, FLOAT),
    "aten::hardtanh.out": Kernel(hardtanh, FLOAT),
    "aten::hardsigmoid.out": Kernel(hardsigmoid, FLOAT),
    "aten::hardswish.out": Kernel(hardswish, FLOAT),
    "aten::clamp.out": Kernel(clamp, NUMERIC),
    "aten::clamp.Tensor_out": Kernel(clamp, NUMERIC),
    "aten::where.self_out": Kernel(where, ALL),
}
