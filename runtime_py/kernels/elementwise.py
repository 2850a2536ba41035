"""Elementwise kernels: arithmetic, rounding, bitwise, comparisons, activations, where/clamp/pow.

Arithmetic ops compute in the out dtype (torch's result dtype) by passing ``dtype=out.dtype``,
so numpy casts inputs chunk-wise instead of materialising converted copies. Composite
activations chain in-place ufuncs on ``out``; those that read ``self`` again after writing
keep their intermediate in the planned scratch, so every kernel here is in-place safe.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime_py.kernels import Bound, Kernel, rules, run_all, then
from runtime_py.kernels._common import (
    ALL,
    BOOL,
    CLIP,
    FLOAT,
    NUMERIC,
    ONE,
    KernelFn,
    Workspace,
    copier,
    f32,
    like_self,
    out_shaped,
    storage_ordered,
    view_as,
    workspace_bytes,
)

Scalar = int | float | bool
ArrayOrScalar = np.ndarray | Scalar

INTEGRAL = ALL - FLOAT  # bitwise ops: bool and int64


def _unary(ufunc: np.ufunc) -> Callable[..., Bound]:
    """``prepare(self, out)`` applying ``ufunc`` in the out dtype."""

    def prepare(self: np.ndarray, *, out: np.ndarray) -> Bound:
        return _ufunc_into(ufunc, (self,), out)

    return prepare


def _ufunc_into(ufunc: np.ufunc, operands: tuple[ArrayOrScalar, ...], out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
    """``ufunc(*operands)`` into ``out`` in its dtype; an operand with ``out``'s element count is
    viewed in ``out``'s shape (it differs by size-1 dims only), so numpy takes its no-broadcast
    path, and so is a small constant (``out_shaped``). Where every operand already has out's
    dtype (a float scalar made a float32 constant), the call is the ufunc itself with ``out``
    positional: no Python frame, no keywords (0.1-0.15 us a call less); one broadcast over
    short rows is expanded first (``_expanded``, in ``scratch`` if given)."""
    operands = tuple(_as_out_dtype(out_shaped(x, out), out) for x in operands)
    if ufunc in _KEYWORD_OUT:
        return functools.partial(ufunc, *operands, out=out, dtype=out.dtype)
    if all(isinstance(x, np.ndarray) and x.dtype == out.dtype for x in operands):
        return (_expanded(ufunc, operands, out, scratch)
                or functools.partial(ufunc, *operands, out))
    dtype = out.dtype

    def run() -> None:
        ufunc(*operands, out=out, dtype=dtype)

    return run


# A float32 operand broadcast over rows of fewer than SHORT_ROW trailing elements ((C, 1, 1)
# over (C, H, W): a squeeze-excite gate), at least MIN_ROWS of them, is first expanded into
# scratch (or out) by one BLAS outer product with a row of ones (exact: x * 1), then combined
# with the other operand at numpy's same-shape speed. With the kernels' UFUNC_BUFSIZE (32, so
# numpy allocates no buffers) numpy broadcasts such rows buffered, paying per row (one core,
# gate times maps: (576, 9) 8.7 -> 2.1 us, (240, 36) 9.0 -> 2.5, (96, 36) 3.6 -> 1.5, (72,
# 144) 3.1 -> 2.7; (32, 256) 1.9 -> 2.3 and (16, 576) 1.5 -> 2.5 lose). With 512-element
# buffers, which numpy allocates per call, the broadcast takes 2.6 us at (576, 9) (so the
# attention kernel, run with those, gains nothing from it).
SHORT_ROW, MIN_ROWS = 160, 32


# The other way round, a float32 operand that is one short run repeated over at least MIN_ROWS
# leading positions ((1, 1, 1, C) over a channels-last (1, H, W, C) map, in its memory order:
# a squeeze-excite gate again) is first tiled, at each run, into scratch along the map's last
# axes (``_leading_tile``: W x C), and the op then runs over rows of that length. 1 thread,
# the kernel with 32-element buffers, gate times maps, broadcast / tiled: 48 x 48 x 32 108 -> 13
# us, 48 x 48 x 16 73 -> 8.1, 24 x 24 x 72 31 -> 7.6, 24 x 24 x 16 19 -> 3.7, 12 x 12 x 120 9.1
# -> 3.8, 6 x 6 x 96 3.1 -> 2.2 (the outer product above, out-sized: 1.1-2.2x the tiled time).
# Whole models (``bench/choices.py --choice leading-tiles``): efficientnet_b0 0.986,
# mobilenet_v3_large 0.995 (docs/cpu-speed.md, "Matrix-vector convolutions, gates over channels-last
# maps").
LEADING_TILES = True


def _expanded(ufunc: np.ufunc, operands: tuple[np.ndarray, ...], out: np.ndarray,
              scratch: np.ndarray | None) -> Bound | None:
    """The call computing a binary float32 ``ufunc`` with one operand expanded first
    (SHORT_ROW) into ``scratch`` (``_expansion_bytes``), or without one into ``out`` if neither
    operand shares its memory, or tiled into ``scratch`` (``_tiled``), if it applies; else
    None."""
    if len(operands) != 2 or out.dtype != np.float32:
        return None
    for i, (a, other) in enumerate((operands, operands[::-1])):
        if other.shape != out.shape:
            continue
        rows = _trailing_rows(a.shape, out.shape)
        if rows is None:
            tiled = _tiled(ufunc, a, other, out, scratch, i)
            if tiled is not None:
                return tiled
            continue
        if scratch is not None and scratch.nbytes >= _expansion_bytes(a.shape, out.shape):
            target = Workspace(scratch).take(out.shape, out.dtype)
        elif scratch is None and not np.may_share_memory(out, other) and \
                not np.may_share_memory(out, a):
            target = out
        else:
            return None
        column = view_as(a, (rows, 1))  # None for a permuted gate
        if column is None or not column.flags.c_contiguous:  # np.dot would copy it
            return None
        matrix = target.reshape(rows, -1)
        expand = functools.partial(np.dot, column, np.ones((1, matrix.shape[1]), out.dtype),
                                   matrix)
        first, second = (target, other) if i == 0 else (other, target)
        return then(expand, functools.partial(ufunc, first, second, out))
    return None


def _tiled(ufunc: np.ufunc, a: np.ndarray, other: np.ndarray, out: np.ndarray,
           scratch: np.ndarray | None, first: int) -> Bound | None:
    """The call computing ``ufunc`` of ``a`` (operand ``first``) and ``other`` (out's shape)
    with ``a`` tiled into ``scratch`` first (``_leading_tile``), if it applies; else None."""
    start = _leading_tile(a.shape, out.shape)
    if start is None or scratch is None or \
            scratch.nbytes < workspace_bytes((out.shape[start:], out.dtype)):
        return None
    tile = Workspace(scratch).take(out.shape[start:], out.dtype)
    rows, width = math.prod(out.shape[:start]), tile.size
    flat_other, flat_out = view_as(other, (rows, width)), view_as(out, (rows, width))
    if flat_other is None or flat_out is None:
        return None
    source = a.reshape((1,) * (out.ndim - a.ndim) + a.shape)[(0,) * start]
    row = tile.reshape(1, width)
    pair = (row, flat_other) if first == 0 else (flat_other, row)
    return then(copier(tile, source), functools.partial(ufunc, *pair, flat_out))


def _leading_tile(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> int | None:
    """The first of the trailing dims a tile of an operand of ``shape`` spans (``_tiled``), if
    it is one run of under SHORT_ROW elements repeated over at least MIN_ROWS leading positions
    of ``out_shape``: the dims its run spans and the one before them; else None. The tile's
    copy then loops over that dim's runs, the op over the rows before it: at most half the
    runs numpy's broadcast loops over (not so for a (1, 1, H, W) mask over (1, C, H, W))."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    lead = next((d for d in range(len(shape)) if shape[d] != 1), len(shape))
    run, runs = math.prod(out_shape[lead:]), math.prod(out_shape[:lead])
    if not LEADING_TILES or lead == 0 or shape[lead:] != tuple(out_shape[lead:]) or not (
            1 < run < SHORT_ROW and runs >= MIN_ROWS):
        return None
    loops = out_shape[lead - 1] + math.prod(out_shape[:lead - 1])
    return lead - 1 if 2 * loops <= runs else None


def _expansion_bytes(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> int:
    """Scratch bytes to expand a float32 operand of ``shape`` to ``out_shape`` (``_expanded``):
    out-sized where it broadcasts over short trailing rows (``_trailing_rows``), a tile's where
    it repeats one short run (``_leading_tile``); else 0."""
    if _trailing_rows(shape, out_shape) is not None:
        return workspace_bytes((out_shape, np.float32))
    start = _leading_tile(shape, out_shape)
    return 0 if start is None else workspace_bytes((out_shape[start:], np.float32))


def spread_bytes(rows: tuple[int, ...]) -> int:
    """Scratch for ``by_rows`` over ``rows`` (2-D rows only; 0 if they are long or few). With
    the kernels' 32-element ufunc buffers numpy broadcasts a row statistic over short rows
    piece by piece: attention scores (128, 32) 4.4 -> 1.5 us a pass, swin's softmax (1728, 36)
    50 -> 11 us, its layer norm (576, 96) 18.4 -> 8.9 us."""
    return _expansion_bytes((rows[0], 1), rows) if len(rows) == 2 else 0


def by_rows(ufunc: np.ufunc, rows: np.ndarray, stat: np.ndarray,
            spread: np.ndarray | None) -> Bound:
    """The call computing rows = ufunc(rows, stat) in place for a (rows, 1) statistic: spread
    over short rows in ``spread`` first (``_expanded``; ``spread_bytes`` of it), else numpy's
    broadcast."""
    return (_expanded(ufunc, (rows, stat), rows, spread)
            or functools.partial(ufunc, rows, stat, rows))


def _expand_scratch(self: ArrayOrScalar, other: ArrayOrScalar, budget: int | None = None,
                    **_: object) -> int:
    """Scratch of a binary op: an out-sized float32 region where one operand is expanded
    (``_expanded``); none within a smaller ``budget`` (numpy's broadcast then)."""
    if not all(isinstance(x, np.ndarray) and x.dtype == np.float32 for x in (self, other)):
        return 0
    shape = np.broadcast_shapes(self.shape, other.shape)
    need = max(_expansion_bytes(a.shape, shape) if b.shape == shape else 0
               for a, b in ((self, other), (other, self)))
    return need if budget is None or need <= budget else 0


def _trailing_rows(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> int | None:
    """The number of rows if an operand of ``shape`` broadcasts to ``out_shape`` over its
    trailing dims only, as at least MIN_ROWS rows of under SHORT_ROW elements (and more than
    one); else None."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    k = len(shape)
    while k and shape[k - 1] == 1:
        k -= 1
    rows, length = math.prod(out_shape[:k]), math.prod(out_shape[k:])
    if shape[:k] != tuple(out_shape[:k]) or not (rows >= MIN_ROWS and 1 < length < SHORT_ROW):
        return None
    return rows


# numpy 2.4 deprecates a positional out for these (a DeprecationWarning on every call)
_KEYWORD_OUT = (np.maximum, np.minimum)


def _as_out_dtype(x: ArrayOrScalar, out: np.ndarray) -> ArrayOrScalar:
    """A Python number for a float32 out as a float32 constant (numpy would cast it so)."""
    if isinstance(x, int | float) and out.dtype == np.float32:
        return f32(x)
    return x


def _binary(ufunc: np.ufunc) -> Callable[..., Bound]:
    """``prepare(self, other, out)`` applying ``ufunc`` in the out dtype (Tensor/Scalar)."""

    def prepare(self: ArrayOrScalar, other: ArrayOrScalar, *, out: np.ndarray,
                scratch: np.ndarray | None = None) -> Bound:
        return _ufunc_into(ufunc, (self, other), out, scratch)

    return prepare


def _nonzero_divisor(other: ArrayOrScalar) -> None:
    if not np.all(other):
        raise ZeroDivisionError("integer fmod/remainder by zero")


def _division(ufunc: np.ufunc) -> Callable[..., Bound]:
    """fmod/remainder: ``_binary(ufunc)``, but an integer division by zero raises
    ZeroDivisionError as in torch (numpy gives 0): a Scalar divisor is checked once here (at
    load), a Tensor one before each call. (Float remainder differs from torch only in the sign
    of a zero result: numpy gives the divisor's, torch the dividend's.)"""
    binary = _binary(ufunc)

    def prepare(self: ArrayOrScalar, other: ArrayOrScalar, *, out: np.ndarray) -> Bound:
        run = binary(self, other, out=out)
        if out.dtype.kind == "f":
            return run
        if isinstance(other, np.ndarray):
            return then(functools.partial(_nonzero_divisor, other), run)
        _nonzero_divisor(other)
        return run

    return prepare


def _binary_alpha(ufunc: np.ufunc) -> Callable[..., Bound]:
    """``prepare(self, other, alpha, out)`` = ``ufunc(self, alpha * other)`` (add/sub)."""

    def prepare(self: ArrayOrScalar, other: ArrayOrScalar, alpha: Scalar = 1, *,
                out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
        if alpha == 1:
            return _ufunc_into(ufunc, (self, other), out, scratch)

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
            np.trunc(out, out)


def pow_(self: ArrayOrScalar, exponent: ArrayOrScalar, *, out: np.ndarray) -> None:
    """self ** exponent (Tensor/Scalar base and exponent)."""
    np.power(self, exponent, out=out, dtype=out.dtype)


def _power(self: np.ndarray, exponent: ArrayOrScalar, *, out: np.ndarray) -> Bound:
    """self ** a scalar exponent; a float tensor squared or cubed as products, (x * x) * x as
    torch computes them: numpy's float32 power of a negative base takes a slow path (43 ns an
    element against 0.2 for the two products; GPT-2's GELU cube was two thirds of its time). Not
    in place: the cube reads ``self`` after writing ``out`` (an older bundle's ``out`` over
    ``self`` gets numpy's power)."""
    if (self.dtype == out.dtype and out.dtype.kind == "f" and np.ndim(exponent) == 0
            and exponent in (2, 3) and not np.may_share_memory(self, out)):
        square = functools.partial(np.multiply, self, self, out)
        return square if exponent == 2 else run_all(
            square, functools.partial(np.multiply, out, self, out))
    return functools.partial(pow_, self, exponent, out=out)


def logical_not(self: np.ndarray, *, out: np.ndarray) -> None:
    np.logical_not(self, out)


def round_(self: np.ndarray, *, decimals: int = 0, out: np.ndarray) -> None:
    """Half to even, as torch; ``decimals`` != 0 scales by 10**decimals in float32 (torch
    does the same: rint(x * 10**d) / 10**d, or rint(x / 10**-d) * 10**-d)."""
    np.round(self, decimals, out=out)


def sign(self: np.ndarray, *, out: np.ndarray) -> None:
    """-1, 0 or 1 (bool: self). torch gives 0 for nan: fmin sends nan to 2, fmod(2, 2) = 0."""
    if out.dtype == np.bool_:
        np.copyto(out, self)
        return
    np.sign(self, out=out, dtype=out.dtype)
    if out.dtype.kind == "f":
        np.fmin(out, 2, out)
        np.fmod(out, 2, out)


_HALF, _THREE = f32(0.5), f32(3)


def rsqrt(self: np.ndarray, *, out: np.ndarray) -> Bound:
    return then(_ufunc_into(np.sqrt, (self,), out), functools.partial(np.divide, ONE, out, out))


def sigmoid(self: np.ndarray, *, out: np.ndarray) -> Bound:
    """1 / (1 + exp(-x)); exp overflow to inf gives the correct 0."""
    return run_all(_ufunc_into(np.negative, (self,), out), functools.partial(np.exp, out, out),
                   functools.partial(np.add, out, ONE, out),
                   functools.partial(np.divide, ONE, out, out))


def silu(self: np.ndarray, *, out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """x * sigmoid(x) as h + h tanh(h), h = x / 2 (four passes, tanh being numpy's cheapest
    transcendental), h in scratch so ``out`` may be ``self``."""
    half = Workspace(scratch).take(out.shape, out.dtype)
    return run_all(_ufunc_into(np.multiply, (self, _HALF), half),
                   functools.partial(np.tanh, half, out),
                   functools.partial(np.multiply, out, half, out),
                   functools.partial(np.add, out, half, out))


_ZERO, _INF = f32(0), f32(math.inf)


def relu(self: np.ndarray, *, out: np.ndarray) -> Bound:
    """max(x, 0); a float one as clip(x, 0, inf): numpy 2.4's maximum against a scalar runs
    without SIMD (3-4x the time of clip's), and clip gives the same nan, -0 and infinities."""
    if out.dtype.kind == "f":
        return _ufunc_into(CLIP, (self, _ZERO, _INF), out)
    return _ufunc_into(np.maximum, (self, 0), out)


def leaky_relu(self: np.ndarray, negative_slope: float = 0.01, *, out: np.ndarray,
               scratch: np.ndarray | None = None) -> Bound:
    """x, times ``negative_slope`` where x < 0 (a bool mask in scratch)."""
    negative = Workspace(scratch).take(out.shape, np.bool_)

    def run() -> None:
        np.less(self, 0, negative)
        np.copyto(out, self)
        np.multiply(out, negative_slope, out, where=negative)

    return run


def elu(self: np.ndarray, alpha: Scalar = 1, scale: Scalar = 1, input_scale: Scalar = 1, *,
        out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """scale * x for x > 0, else alpha * scale * (exp(input_scale * x) - 1) (nan stays nan);
    the branch mask is in scratch, so ``out`` may be ``self``."""
    mask = Workspace(scratch).take(out.shape, np.bool_)

    def run() -> None:
        np.less_equal(self, 0, mask)
        np.copyto(out, self)
        np.multiply(out, input_scale, out, where=mask)
        np.expm1(out, out, where=mask)
        np.multiply(out, alpha * scale, out, where=mask)
        if scale != 1:
            np.logical_not(mask, mask)
            np.multiply(out, scale, out, where=mask)

    return run


def hardtanh(self: np.ndarray, min_val: float = -1, max_val: float = 1, *,
             out: np.ndarray) -> Bound:
    return _ufunc_into(CLIP, (self, min_val, max_val), out)


def clamp(self: np.ndarray, min: ArrayOrScalar | None = None,
          max: ArrayOrScalar | None = None, *, out: np.ndarray) -> Bound:
    """min(max(x, min), max), for Scalar or Tensor bounds (either may be None)."""
    if min is None or max is None:
        return functools.partial(np.clip, self, min, max, out)
    return _ufunc_into(CLIP, (self, min, max), out)


_SIX, _SIXTH = f32(6), f32(1 / 6)  # a multiply is half the cost of a divide


def hardsigmoid(self: np.ndarray, *, out: np.ndarray) -> Bound:
    """clamp(x + 3, 0, 6) / 6."""
    return run_all(_ufunc_into(np.add, (self, _THREE), out),
                   functools.partial(CLIP, out, _ZERO, _SIX, out),
                   functools.partial(np.multiply, out, _SIXTH, out))


def hardswish(self: np.ndarray, *, out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """x * clamp(x + 3, 0, 6) / 6, the clamp in scratch so ``out`` may be ``self``."""
    gate = Workspace(scratch).take(out.shape, out.dtype)
    return run_all(_ufunc_into(np.add, (self, _THREE), gate),
                   functools.partial(CLIP, gate, _ZERO, _SIX, gate),
                   functools.partial(np.multiply, self, gate, out),
                   functools.partial(np.multiply, out, _SIXTH, out))


# Rational approximation of erf on [-4, 4] (odd numerator, even denominator), the float32
# scheme of Eigen/XLA; |x| > 4 rounds to +-1 in float32. Coefficients highest degree first.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def _horner(x2: np.ndarray, coeffs: tuple[float, ...], acc: np.ndarray) -> None:
    acc.fill(coeffs[0])
    for c in coeffs[1:]:
        np.multiply(acc, x2, acc)
        np.add(acc, c, acc)


_MINUS_FOUR, _FOUR = f32(-4), f32(4)


def erf(self: np.ndarray, *, out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """erf in float32 (numpy has none), out may be self; x^2 and the numerator, then the
    denominator, in two out-sized scratch regions."""
    ws = Workspace(scratch)
    x2, acc = ws.take(out.shape, out.dtype), ws.take(out.shape, out.dtype)

    def run() -> None:
        CLIP(self, _MINUS_FOUR, _FOUR, out, dtype=out.dtype)
        np.square(out, x2)
        _horner(x2, _ERF_P, acc)
        np.multiply(out, acc, out)
        _horner(x2, _ERF_Q, acc)
        np.divide(out, acc, out)

    return run


_SQRT_2_OVER_PI, _TANH_CUBIC = f32(math.sqrt(2 / math.pi)), f32(0.044715)
# GELU's normal CDF as (1 + tanh(x Q(x^2))) / 2: Q, highest degree first, is a degree-6 fit of
# artanh(erf(x / sqrt 2)) / x on |x| <= 4 sqrt 2, weighted by erf's sensitivity to it. Within
# 6e-7 of the exact GELU everywhere (float32 torch itself is off by up to 1.1e-6 near x = -3.4),
# in 18 numpy passes where an erf series takes about 30. Beyond 4 sqrt 2, |x Q(x^2)| only grows
# (from 9.7, where tanh is +-1 in float32, to inf), so no clip is needed: a huge negative x
# gives -0 as torch does.
_GELU_Q = tuple(map(f32, (1.7563148471e-09, -1.3226807737e-07, 3.9647984263e-06,
                          -5.5306458160e-05, -3.2594417687e-05, 3.6333084132e-02,
                          7.9788494155e-01)))


def gelu(self: np.ndarray, *, approximate: str = "none", out: np.ndarray,
         scratch: np.ndarray | None = None) -> Bound:
    """x/2 (1 + erf(x / sqrt 2)) (see _GELU_Q); approximate="tanh": x/2 (1 + tanh(c (x +
    0.044715 x^3))). The bracket is built in scratch, so ``out`` may be ``self``."""
    ws = Workspace(scratch)
    t = ws.take(out.shape, out.dtype)
    square = t if approximate == "tanh" else ws.take(out.shape, out.dtype)
    dtype = out.dtype

    def bracket() -> None:  # t = x Q(x^2), or c (x + 0.044715 x^3)
        np.square(self, square, dtype=dtype)
        if approximate == "tanh":
            np.multiply(t, _TANH_CUBIC, t)
            np.add(t, ONE, t)
            np.multiply(t, self, t)
            np.multiply(t, _SQRT_2_OVER_PI, t)
            return
        np.multiply(square, _GELU_Q[0], t)
        for c in _GELU_Q[1:-1]:
            np.add(t, c, t)
            np.multiply(t, square, t)
        np.add(t, _GELU_Q[-1], t)
        np.multiply(t, self, t)

    def run() -> None:
        bracket()
        np.tanh(t, t)
        np.multiply(t, _HALF, t)  # halved before the product: x near float32's max stays finite
        np.add(t, _HALF, t)
        np.multiply(t, self, out)

    return run


def _gelu_scratch(self: np.ndarray, approximate: str = "none", **_: object) -> int:
    return like_self(1 if approximate == "tanh" else 2)(self)


def where(condition: np.ndarray, self: ArrayOrScalar, other: ArrayOrScalar, *,
          out: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """self where condition else other; ``out`` may be any input (a bool mask in scratch)."""
    if np.may_share_memory(out, self):  # self is in place already: fill where not condition
        keep = Workspace(scratch).take(out.shape, np.bool_)
        np.logical_not(condition, keep)
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


# Shape and dtype rules (``rules``): torch's broadcasting and type promotion, and its checks
# of the ops' scalar arguments.
_PROMOTED = rules.elementwise("self", "other")
_TRUE_DIVISION = rules.elementwise("self", "other", result=rules.to_float)
_COMPARED = rules.elementwise("self", "other", result=rules.to_bool)
_UNARY = rules.elementwise("self")
_FLOAT_RESULT = rules.elementwise("self", result=rules.to_float)
_TRUTH = rules.elementwise("self", result=rules.to_bool)


def _alpha(*, out: np.ndarray, alpha: Scalar = 1, **_: object) -> None:
    """torch's alpha_check on the result dtype (out's, checked before): a bool alpha for bool
    results only, a float one for float results only."""
    rules.number(alpha, "alpha")
    if ((isinstance(alpha, bool) and out.dtype != np.bool_)
            or (isinstance(alpha, float) and out.dtype.kind != "f")):
        raise ValueError(f"alpha {alpha!r} for a {out.dtype} result")


def _no_bool(*, self: ArrayOrScalar, other: ArrayOrScalar, **_: object) -> None:
    """torch's sub_check: no bool operand."""
    if rules.result_type(self) == np.bool_ or rules.result_type(other) == np.bool_:
        rules.refuse({"self": self, "other": other}, "subtraction of a bool")


def _division_mode(*, rounding_mode: str | None = None, **args: object) -> None:
    """div with ``rounding_mode`` None (true division: float results), "trunc" or "floor"."""
    if rounding_mode not in (None, "trunc", "floor"):
        raise ValueError(f"rounding_mode {rounding_mode!r}: None, 'trunc' or 'floor'")
    (_TRUE_DIVISION if rounding_mode is None else _PROMOTED)(**args)


def _integer_power(*, exponent: ArrayOrScalar, out: np.ndarray, **_: object) -> None:
    """torch refuses an integer base to a negative integer Scalar exponent."""
    if (out.dtype.kind != "f" and isinstance(exponent, int) and not isinstance(exponent, bool)
            and exponent < 0):
        raise ValueError(f"integers to the negative integer power {exponent}")


def _approximate(*, approximate: str = "none", **_: object) -> None:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu approximate {approximate!r}: 'none' or 'tanh'")


def _bounds(*, min: ArrayOrScalar | None = None, max: ArrayOrScalar | None = None,
            **_: object) -> None:
    if min is None and max is None:
        raise ValueError("clamp without min and max")


def _decimals(*, decimals: int = 0, **_: object) -> None:
    rules.integer(decimals, "decimals")


def _condition(*, condition: np.ndarray, **_: object) -> None:
    rules.tensor(condition, "condition", frozenset({rules.BOOL}))


_ADDITION = rules.all_of(_PROMOTED, _alpha)
_SUBTRACTION = rules.all_of(_PROMOTED, _alpha, _no_bool)
_POWER = rules.all_of(rules.elementwise("self", "exponent"), _integer_power)
_CLAMP = rules.all_of(rules.elementwise("self", "min", "max", optional=("min", "max")), _bounds)
_WHERE = rules.all_of(rules.elementwise("condition", "self", "other", typed=("self", "other")),
                      _condition)


def _binary_keys(op: str, dtypes: frozenset[str], prepare: Callable[..., Bound],
                 overloads: tuple[str, ...] = ("out", "Scalar_out"),
                 check: rules.Rule = _PROMOTED,
                 scratch: Callable[..., int] | None = None) -> dict[str, Kernel]:
    """The Tensor (``op.out``) and Scalar (``op.Scalar_out``) overloads (or ``overloads``)
    share one kernel."""
    return {f"aten::{op}.{overload}": _prepared(prepare, dtypes, check, scratch)
            for overload in overloads}


def _inplace(fn: KernelFn, dtypes: frozenset[str], check: rules.Rule,
             scratch: Callable[..., int] | None = None) -> Kernel:
    """Every kernel here is in-place safe: ``out`` may be any same-shaped input."""
    return Kernel(fn, dtypes, inplace=True, scratch=scratch, check=check)


def _prepared(prepare: Callable[..., Bound], dtypes: frozenset[str], check: rules.Rule,
              scratch: Callable[..., int] | None = None) -> Kernel:
    """``_inplace`` for a kernel written as ``prepare``; it binds (and sizes its scratch) over
    its arguments in out's memory order (``_over_storage``)."""
    return Kernel.prepared(_over_storage(prepare), dtypes, inplace=True, check=check,
                           scratch=scratch and _over_storage(scratch))


def _over_storage(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` over ``storage_ordered`` arguments: an op over a channels-last map (a strided
    (N, C, H, W) view) runs over its contiguous (N, H, W, C) view, where numpy's loops over
    the strided one took up to 4x the time (hardswish over 24 x 24 x 24)."""

    @functools.wraps(fn)
    def ordered(**args: Any) -> Any:
        return fn(**storage_ordered(args))

    return ordered


BLOCK_ELEMENTS = 32 * 1024  # unary chains run in blocks this big: their passes stay in cache


def _blocks(a: np.ndarray) -> list[np.ndarray]:
    """``a`` cut along its first dim longer than 1 into views of about BLOCK_ELEMENTS."""
    axis = next((d for d, n in enumerate(a.shape) if n > 1), None)
    if axis is None:
        return [a]
    step = max(1, BLOCK_ELEMENTS // math.prod(a.shape[axis + 1:]))
    lead = (slice(None),) * axis
    return [a[(*lead, slice(i, i + step))] for i in range(0, a.shape[axis], step)]


def _in_blocks(block: Callable[..., Bound], dtypes: frozenset[str], scratch: Callable[..., int],
               check: rules.Rule = _UNARY) -> Kernel:
    """A unary chain of passes, prepared by ``block(self, ..., out, scratch)``, run block by
    block (``_blocks``): 1.5x faster for GELU's then 19 passes at 221k elements, and the
    scratch is one block's."""

    @functools.wraps(block)
    def prepare(self: np.ndarray, *, out: np.ndarray, **args: object) -> Bound:
        calls = [block(part, out=dst, **args)
                 for part, dst in zip(_blocks(self), _blocks(out), strict=True)]
        return calls[0] if len(calls) == 1 else run_all(*calls)

    def block_scratch(self: np.ndarray, **args: object) -> int:
        return scratch(_blocks(self)[0], **args)

    return Kernel.prepared(_over_storage(prepare), dtypes, inplace=True,
                           scratch=_over_storage(block_scratch), check=check)


_COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}

_FLOAT_UNARY = {name: _unary(getattr(np, name)) for name in
                ("exp", "log", "sqrt", "reciprocal", "tanh", "sin", "cos", "log1p", "expm1",
                 "log2")}

_ROUNDING = {name: _unary(getattr(np, name)) for name in ("floor", "ceil", "trunc")}

_TENSOR_SCALAR = ("Tensor_out", "Scalar_out")
_TENSOR_SCALAR_SELF = (*_TENSOR_SCALAR, "Scalar_Tensor_out")  # and a Scalar self

KERNELS: dict[str, Kernel] = {
    **_binary_keys("add", ALL, _binary_alpha(np.add), check=_ADDITION, scratch=_expand_scratch),
    **_binary_keys("sub", NUMERIC, _binary_alpha(np.subtract), check=_SUBTRACTION,
                   scratch=_expand_scratch),
    **_binary_keys("mul", ALL, _binary(np.multiply), scratch=_expand_scratch),
    **_binary_keys("div", FLOAT, _binary(np.true_divide), check=_TRUE_DIVISION,
                   scratch=_expand_scratch),
    "aten::div.out_mode": _inplace(div_mode, NUMERIC, _division_mode),
    "aten::div.Scalar_mode_out": _inplace(div_mode, NUMERIC, _division_mode),
    **_binary_keys("fmod", NUMERIC, _division(np.fmod), _TENSOR_SCALAR),
    **_binary_keys("remainder", NUMERIC, _division(np.remainder), _TENSOR_SCALAR_SELF),
    "aten::maximum.out": _prepared(_binary(np.maximum), ALL, _PROMOTED),
    "aten::minimum.out": _prepared(_binary(np.minimum), ALL, _PROMOTED),
    "aten::pow.Tensor_Scalar_out": Kernel.prepared(_power, NUMERIC, check=_POWER),
    **{f"aten::pow.{overload}": _inplace(pow_, NUMERIC, _POWER)
       for overload in ("Tensor_Tensor_out", "Scalar_out")},
    **{f"aten::{name}.{overload}": _inplace(_logical(ufunc), BOOL, _COMPARED)
       for name, ufunc in _COMPARISONS.items() for overload in ("Scalar_out", "Tensor_out")},
    **{f"aten::logical_{name}.out": _inplace(_logical(getattr(np, f"logical_{name}")), BOOL,
                                             _COMPARED)
       for name in ("and", "or", "xor")},
    "aten::logical_not.out": _inplace(logical_not, BOOL, _TRUTH),
    **_binary_keys("bitwise_and", INTEGRAL, _binary(np.bitwise_and), _TENSOR_SCALAR_SELF),
    **_binary_keys("bitwise_or", INTEGRAL, _binary(np.bitwise_or), _TENSOR_SCALAR_SELF),
    **_binary_keys("bitwise_xor", INTEGRAL, _binary(np.bitwise_xor), _TENSOR_SCALAR_SELF),
    "aten::bitwise_not.out": _prepared(_unary(np.invert), INTEGRAL, _UNARY),
    "aten::isnan.out": _prepared(_unary(np.isnan), BOOL, _TRUTH),
    "aten::isinf.out": _prepared(_unary(np.isinf), BOOL, _TRUTH),
    **{f"aten::{name}.out": _prepared(fn, FLOAT, _FLOAT_RESULT)
       for name, fn in _FLOAT_UNARY.items()},
    "aten::neg.out": _prepared(_unary(np.negative), NUMERIC, _UNARY),
    "aten::abs.out": _prepared(_unary(np.absolute), NUMERIC, _UNARY),
    **{f"aten::{name}.out": _prepared(fn, NUMERIC, _UNARY) for name, fn in _ROUNDING.items()},
    "aten::round.out": _inplace(round_, NUMERIC, _UNARY),
    "aten::round.decimals_out": _inplace(round_, FLOAT, rules.all_of(_UNARY, _decimals)),
    "aten::sign.out": _inplace(sign, ALL, _UNARY),
    "aten::rsqrt.out": _prepared(rsqrt, FLOAT, _FLOAT_RESULT),
    "aten::erf.out": _in_blocks(erf, FLOAT, like_self(2), _FLOAT_RESULT),
    "aten::sigmoid.out": _prepared(sigmoid, FLOAT, _FLOAT_RESULT),
    "aten::silu.out": _in_blocks(silu, FLOAT, like_self(1)),
    "aten::gelu.out": _in_blocks(gelu, FLOAT, _gelu_scratch, rules.all_of(_UNARY, _approximate)),
    "aten::relu.out": _prepared(relu, NUMERIC, _UNARY),
    "aten::leaky_relu.out": _in_blocks(leaky_relu, FLOAT, like_self(1, "bool"),
                                       rules.all_of(_UNARY, rules.numbers("negative_slope"))),
    "aten::elu.out": _in_blocks(elu, FLOAT, like_self(1, "bool"), rules.all_of(
        _UNARY, rules.numbers("alpha", "scale", "input_scale"))),
    "aten::hardtanh.out": _prepared(hardtanh, FLOAT,
                                    rules.all_of(_UNARY, rules.numbers("min_val", "max_val"))),
    "aten::hardsigmoid.out": _prepared(hardsigmoid, FLOAT, _UNARY),
    "aten::hardswish.out": _in_blocks(hardswish, FLOAT, like_self(1)),
    "aten::clamp.out": _prepared(clamp, NUMERIC, _CLAMP),
    "aten::clamp.Tensor_out": _prepared(clamp, NUMERIC, _CLAMP),
    "aten::where.self_out": _inplace(where, ALL, _WHERE, _where_scratch),
}
