"""Elementwise kernels vs. torch: shapes, broadcasting, layouts, dtypes, scalar operands."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from kernel_harness import (
    LAYOUTS,
    check_op,
    coarse,
    out_variant,
    random,
    to_kernel_arg,
    with_layout,
)

from runtime_py.kernels import KERNELS
from runtime_py.kernels._common import TILED_ELEMENTS, out_shaped
from runtime_py.kernels.nn import stored_channels_last
from toolchain.export.out_variant import canonical_name

aten = torch.ops.aten

# (self shape, other shape): equal, trailing broadcast, two-sided broadcast, 0-d.
BROADCAST = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ())]
ARITH = {"add": aten.add.Tensor, "sub": aten.sub.Tensor, "mul": aten.mul.Tensor,
         "maximum": aten.maximum.default, "minimum": aten.minimum.default}
DTYPES = [torch.float32, torch.int64, torch.bool]


def _supported(name: str, dtype: torch.dtype) -> bool:
    return not (dtype == torch.bool and name == "sub")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape_a", "shape_b"), BROADCAST)
@pytest.mark.parametrize("name", sorted(ARITH))
def test_binary_arithmetic(name: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...],
                           dtype: torch.dtype, layout: str) -> None:
    if not _supported(name, dtype):
        pytest.skip(f"torch has no {name} for {dtype}")
    a = with_layout(random(shape_a, dtype), layout)
    check_op(ARITH[name], self=a, other=random(shape_b, dtype))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("shape_a", "shape_b"), BROADCAST)
def test_div(shape_a: tuple[int, ...], shape_b: tuple[int, ...], layout: str) -> None:
    b = random(shape_b)
    b = b + torch.where(b < 0, -0.5, 0.5)  # keep away from zero
    check_op(aten.div.Tensor, self=with_layout(random(shape_a), layout), other=b)


@pytest.mark.parametrize("op", [aten.add.Tensor, aten.sub.Tensor, aten.add.Scalar,
                                aten.sub.Scalar])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("alpha", [1, 2, -3])
def test_alpha(op: torch._ops.OpOverload, dtype: torch.dtype, alpha: int) -> None:
    other = random((4,), dtype) if "Tensor" in str(op) else 3
    check_op(op, self=random((2, 4), dtype), other=other, alpha=alpha)


@pytest.mark.parametrize("op", [aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor,
                                aten.div.Tensor, aten.add.Scalar, aten.mul.Scalar,
                                aten.div.Scalar, aten.sub.Scalar])
@pytest.mark.parametrize(("dtype", "scalar"), [(torch.float32, 1), (torch.float32, 0.25),
                                               (torch.int64, 3), (torch.int64, 2.5),
                                               (torch.bool, 2)])
def test_python_scalar_operand(op: torch._ops.OpOverload, dtype: torch.dtype,
                               scalar: float) -> None:
    """A scalar in a Tensor or Scalar slot (``x + 1`` exports as add.Tensor(x, 1))."""
    if dtype == torch.bool and ("sub" in str(op) or "div" in str(op)):
        pytest.skip("no bool sub; bool div is plain float division, covered elsewhere")
    check_op(op, self=random((3, 4), dtype), other=scalar)


def test_scalar_self() -> None:
    """``1 - z`` exports as sub.Tensor(1, z)."""
    check_op(aten.sub.Tensor, self=1, other=random((2, 3)))


@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(torch.float32, torch.int64),
                                                  (torch.int64, torch.float32),
                                                  (torch.bool, torch.float32),
                                                  (torch.bool, torch.int64)])
@pytest.mark.parametrize("op", [aten.add.Tensor, aten.mul.Tensor, aten.div.Tensor])
def test_type_promotion(op: torch._ops.OpOverload, a_dtype: torch.dtype,
                        b_dtype: torch.dtype) -> None:
    b = random((3, 4), b_dtype)
    b = torch.where(b == 0, torch.ones_like(b), b) if op is aten.div.Tensor else b
    check_op(op, self=random((3, 4), a_dtype), other=b)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("scalar", [False, True])
def test_div_rounding_mode(mode: str | None, dtype: torch.dtype, scalar: bool) -> None:
    a = random((4, 5), dtype, scale=10)
    if scalar:
        check_op(aten.div.Scalar_mode, self=a, other=-3, rounding_mode=mode)
    else:
        b = random((5,), dtype, scale=3)
        b = torch.where(b == 0, torch.full_like(b, 2), b)
        check_op(aten.div.Tensor_mode, self=a, other=b, rounding_mode=mode)


COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape_a", "shape_b"), BROADCAST)
@pytest.mark.parametrize("name", COMPARISONS)
def test_compare_tensor(name: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...],
                        dtype: torch.dtype) -> None:
    a = with_layout(coarse(shape_a, dtype), "transposed")
    check_op(getattr(aten, name).Tensor, self=a, other=coarse(shape_b, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("scalar", [0, 1, -0.5])
@pytest.mark.parametrize("name", COMPARISONS)
def test_compare_scalar(name: str, scalar: float, dtype: torch.dtype) -> None:
    check_op(getattr(aten, name).Scalar, self=coarse((3, 5), dtype), other=scalar)


@pytest.mark.parametrize("name", ["and", "or", "xor"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_logical_binary(name: str, dtype: torch.dtype) -> None:
    a = coarse((3, 4), dtype)
    check_op(getattr(aten, f"logical_{name}").default, self=a, other=coarse((4,), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_logical_not(dtype: torch.dtype, layout: str) -> None:
    check_op(aten.logical_not.default, self=with_layout(coarse((3, 4), dtype), layout))


# name -> (op, input transform making the input valid for the op).
FLOAT_UNARY = {
    "exp": (aten.exp.default, None), "tanh": (aten.tanh.default, None),
    "log": (aten.log.default, torch.abs), "sqrt": (aten.sqrt.default, torch.abs),
    "rsqrt": (aten.rsqrt.default, torch.abs), "reciprocal": (aten.reciprocal.default, None),
    "sigmoid": (aten.sigmoid.default, None), "erf": (aten.erf.default, None),
    "silu": (aten.silu.default, None), "relu": (aten.relu.default, None),
    "hardsigmoid": (aten.hardsigmoid.default, None),
    "hardswish": (aten.hardswish.default, None), "neg": (aten.neg.default, None),
    "abs": (aten.abs.default, None), "leaky_relu": (aten.leaky_relu.default, None),
    "sin": (aten.sin.default, None), "cos": (aten.cos.default, None),
    "log1p": (aten.log1p.default, torch.abs), "expm1": (aten.expm1.default, None),
    "log2": (aten.log2.default, torch.abs), "elu": (aten.elu.default, None),
}
SHAPES = [(7,), (3, 5), (2, 3, 4, 5)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(FLOAT_UNARY))
def test_unary(name: str, shape: tuple[int, ...], layout: str) -> None:
    op, valid = FLOAT_UNARY[name]
    x = random(shape, scale=4)
    check_op(op, self=with_layout(valid(x) if valid else x, layout))


@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh", "erf", "reciprocal", "log", "sqrt",
                                  "sin", "cos", "log1p", "expm1", "log2", "elu", "relu"])
def test_unary_special_values(name: str) -> None:
    """Overflow, zero, infinities and nan (e.g. sigmoid(-100) -> 0, not an exp overflow)."""
    x = torch.tensor([-100.0, -30.0, -0.0, 0.0, 30.0, 100.0, float("inf"), -float("inf"),
                      float("nan"), 1e-30])
    check_op(FLOAT_UNARY[name][0], self=x)


@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh", "sqrt", "sin", "cos", "log1p",
                                  "expm1", "log2"])
def test_unary_int_input(name: str) -> None:
    """Float ops on int64 inputs produce float32."""
    check_op(FLOAT_UNARY[name][0], self=random((3, 4), torch.int64).abs())


@pytest.mark.parametrize("name", ["relu", "neg", "abs"])
def test_unary_int(name: str) -> None:
    check_op(FLOAT_UNARY[name][0], self=random((3, 4), torch.int64))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gelu(approximate: str, layout: str) -> None:
    x = torch.cat([random((200,), scale=4), torch.tensor([-1e30, -12.0, -5.0, 0.0, 5.0])])
    check_op(aten.gelu.default, self=with_layout(x.reshape(5, 41), layout),
             approximate=approximate)


def test_gelu_is_within_6e7_of_exact() -> None:
    """Against float64 torch on a dense grid, tighter than the other tests' 1e-6: float32 torch
    itself drifts past 1e-6 near x = -3.4 (1 + erf cancels there)."""
    x = torch.cat([torch.linspace(-10, 10, 200001), torch.tensor([-3e38, -1e10, 1e10, 3e38])])
    want = torch.nn.functional.gelu(x.double()).numpy()
    out = np.empty(x.shape, np.float32)
    KERNELS["aten::gelu.out"].fn(self=x.numpy(), out=out)
    np.testing.assert_allclose(out, want, rtol=0, atol=6e-7)


@pytest.mark.parametrize("slope", [0.01, 0.2, -0.5, 2.0])
def test_leaky_relu_slope(slope: float) -> None:
    check_op(aten.leaky_relu.default, self=random((4, 6)), negative_slope=slope)


@pytest.mark.parametrize(("lo", "hi"), [(-1.0, 1.0), (0.0, 6.0), (-0.5, 0.25)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_hardtanh(lo: float, hi: float, layout: str) -> None:
    x = with_layout(random((4, 6), scale=4), layout)
    check_op(aten.hardtanh.default, self=x, min_val=lo, max_val=hi)


@pytest.mark.parametrize(("lo", "hi"), [(0, None), (None, 6), (-1.5, 2.5), (3, -3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_clamp_scalar(lo: float | None, hi: float | None, dtype: torch.dtype) -> None:
    if dtype == torch.int64 and isinstance(lo, float):
        pytest.skip("float bounds promote an int clamp in torch")
    x = random((4, 6), dtype, scale=4)
    check_op(aten.clamp.default, self=x, min=lo, max=hi)


def test_clamp_nan_propagates() -> None:
    check_op(aten.clamp.default, self=torch.tensor([float("nan"), -9.0, 9.0]), min=-1, max=1)


@pytest.mark.parametrize("bounds", ["min", "max", "both"])
def test_clamp_tensor(bounds: str) -> None:
    lo = random((6,)) - 1 if bounds != "max" else None
    hi = random((4, 1)) + 1 if bounds != "min" else None
    check_op(aten.clamp.Tensor, self=random((4, 6), scale=3), min=lo, max=hi)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 0, 2.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_pow_tensor_scalar(exponent: float, dtype: torch.dtype) -> None:
    if dtype == torch.int64 and exponent == -1:
        pytest.skip("torch rejects negative integer powers of integers")
    x = random((3, 5), dtype, scale=2).abs() + (0.1 if dtype.is_floating_point else 0)
    check_op(aten.pow.Tensor_Scalar, self=with_layout(x, "transposed"), exponent=exponent)
    if dtype.is_floating_point:  # negative bases (nan for 0.5 and 2.5, as torch)
        check_op(aten.pow.Tensor_Scalar, self=-x, exponent=exponent)


@pytest.mark.parametrize("exponent", [2, 3, 2.0, 3.0])
def test_small_integer_powers_are_products_as_in_torch(exponent: float) -> None:
    """A float tensor squared or cubed: numpy products, bit-identical to torch's (negative
    bases, -0, infinities, nan, overflow), never numpy's power."""
    x = torch.cat([random((64,), scale=3), torch.tensor(
        [-0.0, 0.0, float("inf"), -float("inf"), float("nan"), -3e13, 1e-30, -1e-20])])
    out = np.empty(x.shape, np.float32)
    run = KERNELS["aten::pow.Tensor_Scalar_out"].bind(
        {"self": x.numpy(), "exponent": exponent, "out": out})
    assert "power" not in repr(run) and "pow_" not in repr(run)
    run()
    np.testing.assert_array_equal(out, torch.pow(x, exponent).numpy(), strict=True)


def test_a_power_written_over_its_base_stays_right() -> None:
    """A bundle whose pow writes over its base (exported while the kernel was in-place safe)
    gets numpy's power, not a cube of the square."""
    x = random((16,), scale=3)
    want = torch.pow(x, 3).numpy()
    base = x.numpy().copy()
    KERNELS["aten::pow.Tensor_Scalar_out"].bind({"self": base, "exponent": 3, "out": base})()
    np.testing.assert_allclose(base, want, rtol=1e-6)


def test_pow_tensor_tensor() -> None:
    base = random((3, 4)).abs() + 0.1
    check_op(aten.pow.Tensor_Tensor, self=base, exponent=random((4,)))


@pytest.mark.parametrize("base", [2.0, 3])
def test_pow_scalar_base(base: float) -> None:
    check_op(aten.pow.Scalar, self=base, exponent=random((3, 4)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("cond_shape", "a_shape", "b_shape"),
                         [((3, 4), (3, 4), (3, 4)), ((4, 4), (), (1, 2, 4, 4)),
                          ((1, 4), (3, 1), (4,))])
def test_where(cond_shape: tuple[int, ...], a_shape: tuple[int, ...],
               b_shape: tuple[int, ...], dtype: torch.dtype) -> None:
    cond = with_layout(random(cond_shape, torch.bool), "transposed")
    check_op(aten.where.self, condition=cond, self=random(a_shape, dtype),
             other=random(b_shape, dtype))


# Halves (ties round to even), -0, infinities and nan, then random values.
ROUNDING_VALUES = torch.tensor([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 0.49999997, -3.7,
                                float("inf"), -float("inf"), float("nan"), 1e10, -7.0, 7.0])
ROUNDING = {"floor": aten.floor.default, "ceil": aten.ceil.default,
            "trunc": aten.trunc.default, "round": aten.round.default,
            "sign": aten.sign.default}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(ROUNDING))
def test_rounding(name: str, layout: str) -> None:
    x = torch.cat([ROUNDING_VALUES, random((32,), scale=4)]).reshape(6, 8)
    check_op(ROUNDING[name], self=with_layout(x, layout))


@pytest.mark.parametrize(("name", "dtype"), [*((name, torch.int64) for name in sorted(ROUNDING)),
                                           ("sign", torch.bool)])
def test_rounding_integral(name: str, dtype: torch.dtype) -> None:
    """Identity on ints (sign: -1/0/1); of the rounding ops only sign takes bools."""
    check_op(ROUNDING[name], self=random((3, 4), dtype))


@pytest.mark.parametrize("decimals", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_decimals(decimals: int, layout: str) -> None:
    x = torch.cat([random((30,), scale=300), torch.tensor([0.125, -0.125, 250.0, -350.0,
                                                           float("nan"), float("inf")])])
    check_op(aten.round.decimals, self=with_layout(x.reshape(4, 9), layout), decimals=decimals)


@pytest.mark.parametrize(("alpha", "scale", "input_scale"),
                         [(1.0, 1.0, 1.0), (0.5, 1.0, 1.0), (1.6732632, 1.0507010, 1.0),
                          (2.0, 1.5, 0.5), (-1.0, 2, 3)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_elu(alpha: float, scale: float, input_scale: float, layout: str) -> None:
    x = torch.cat([random((20,), scale=3), torch.tensor([0.0, -0.0, float("nan"), -float("inf"),
                                                         float("inf"), -100.0, 1e-8, -1e-8])])
    check_op(aten.elu.default, self=with_layout(x.reshape(4, 7), layout), alpha=alpha,
             scale=scale, input_scale=input_scale)


def _divisor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Divisors of both signs, away from zero."""
    b = random(shape, dtype, scale=3)
    if dtype.is_floating_point:
        return b + torch.where(b < 0, -0.5, 0.5)
    return torch.where(b == 0, torch.full_like(b, 3), b)


DIVISION = {"fmod": aten.fmod, "remainder": aten.remainder}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize(("shape_a", "shape_b"), BROADCAST)
@pytest.mark.parametrize("name", sorted(DIVISION))
def test_fmod_remainder(name: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...],
                        dtype: torch.dtype, layout: str) -> None:
    """Sign rules: fmod takes the dividend's sign, remainder the divisor's."""
    a = with_layout(random(shape_a, dtype, scale=10), layout)
    check_op(DIVISION[name].Tensor, self=a, other=_divisor(shape_b, dtype))


@pytest.mark.parametrize(("dtype", "scalar"), [(torch.float32, 2.5), (torch.float32, -1.5),
                                               (torch.float32, 3), (torch.int64, 3),
                                               (torch.int64, -4), (torch.int64, 2.5)])
@pytest.mark.parametrize("name", sorted(DIVISION))
def test_fmod_remainder_scalar(name: str, dtype: torch.dtype, scalar: float) -> None:
    """A Scalar divisor (an int tensor by a float scalar gives float32)."""
    check_op(DIVISION[name].Scalar, self=random((3, 5), dtype, scale=10), other=scalar)


@pytest.mark.parametrize(("dtype", "scalar"), [(torch.float32, 7.5), (torch.float32, -7),
                                               (torch.int64, 7), (torch.int64, -7)])
def test_remainder_scalar_self(dtype: torch.dtype, scalar: float) -> None:
    check_op(aten.remainder.Scalar_Tensor, self=scalar, other=_divisor((3, 4), dtype))


@pytest.mark.parametrize("name", sorted(DIVISION))
def test_fmod_remainder_special_values(name: str) -> None:
    """Infinite and zero divisors (nan), infinite dividends, nan and signed zeros."""
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([5.0, -5.0, 0.0, -0.0, 3.0, -3.0, inf, nan, 2.0, -2.0, 5.0, 1.0])
    b = torch.tensor([3.0, 3.0, -3.0, 3.0, -3.0, 3.0, 2.0, 1.0, inf, inf, 0.0, nan])
    check_op(DIVISION[name].Tensor, self=a, other=b)


@pytest.mark.parametrize("name", sorted(DIVISION))
@pytest.mark.parametrize("other", [0, torch.tensor([1, 0, 2])])
def test_integer_division_by_zero_raises(name: str, other: int | torch.Tensor) -> None:
    """torch raises for an integer fmod/remainder by zero (numpy would give 0)."""
    op = DIVISION[name].Tensor if isinstance(other, torch.Tensor) else DIVISION[name].Scalar
    a = torch.tensor([5, -5, 7])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(a, other)
    kernel = KERNELS[canonical_name(out_variant(op))]
    other_arg = other.numpy() if isinstance(other, torch.Tensor) else other
    with pytest.raises(ZeroDivisionError):
        kernel.fn(self=a.numpy(), other=other_arg, out=np.empty(3, np.int64))


BITWISE = ["and", "or", "xor"]


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
@pytest.mark.parametrize(("shape_a", "shape_b"), BROADCAST)
@pytest.mark.parametrize("name", BITWISE)
def test_bitwise_tensor(name: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...],
                        dtype: torch.dtype) -> None:
    a = with_layout(random(shape_a, dtype, scale=1000), "transposed")
    check_op(getattr(aten, f"bitwise_{name}").Tensor, self=a, other=random(shape_b, dtype))


@pytest.mark.parametrize(("dtype", "scalar"), [(torch.int64, 6), (torch.int64, -3),
                                               (torch.int64, True), (torch.bool, True),
                                               (torch.bool, False), (torch.bool, 3)])
@pytest.mark.parametrize("scalar_self", [False, True])
@pytest.mark.parametrize("name", BITWISE)
def test_bitwise_scalar(name: str, dtype: torch.dtype, scalar: int, scalar_self: bool) -> None:
    """Scalar operands (a bool tensor with an int scalar gives int64)."""
    op = getattr(aten, f"bitwise_{name}")
    x = random((3, 4), dtype)
    if scalar_self:
        check_op(op.Scalar_Tensor, self=scalar, other=x)
    else:
        check_op(op.Scalar, self=x, other=scalar)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_bitwise_not(dtype: torch.dtype, layout: str) -> None:
    check_op(aten.bitwise_not.default, self=with_layout(random((3, 4), dtype), layout))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [aten.isnan.default, aten.isinf.default])
def test_isnan_isinf(op: torch._ops.OpOverload, dtype: torch.dtype) -> None:
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, 1e38, -1.0])
    x = torch.cat([special, random((6,))]) if dtype == torch.float32 else random((12,), dtype)
    check_op(op, self=with_layout(x.reshape(3, 4), "transposed"))


@pytest.mark.parametrize("shape", [(3, 50_000), (1, 5, 120, 120), (70_000,)])
@pytest.mark.parametrize("op", [aten.gelu.default, aten.silu.default, aten.hardswish.default,
                                aten.erf.default, aten.leaky_relu.default, aten.elu.default])
def test_chains_in_blocks_over_large_tensors(op: torch._ops.OpOverload,
                                             shape: tuple[int, ...]) -> None:
    """Multi-pass activations run in cache-sized blocks (several here, the last one short);
    strided input too."""
    check_op(op, self=with_layout(random(shape, scale=3), "strided"))


def _constant(shape: tuple[int, ...]) -> np.ndarray:
    value = random(shape).numpy()
    value.flags.writeable = False
    return value


@pytest.mark.parametrize(("operand", "out_shape", "tiled"), [
    (_constant((8,)), (3, 8), True),  # a bias over rows
    (_constant((4, 1, 1)), (2, 4, 3, 3), True),  # a channel scale
    (random((8,)).numpy(), (3, 8), False),  # writable: an activation, read at run
    (_constant((8,)), (TILED_ELEMENTS // 8 + 1, 8), False),  # too large an out
    (_constant(()), (3, 8), False),  # 0-d: numpy's scalar path is fast
])
def test_small_constants_are_tiled_to_out(operand: np.ndarray, out_shape: tuple[int, ...],
                                          tiled: bool) -> None:
    """A read-only operand broadcasting to a small out is tiled to its shape at load (numpy's
    same-shape path), with its values; a writable or large one stays as it is."""
    out = np.empty(out_shape, np.float32)
    shaped = out_shaped(operand, out)
    assert (shaped is not operand) == tiled
    if tiled:
        assert shaped.shape == out_shape and not shaped.flags.writeable
        np.testing.assert_array_equal(shaped, np.broadcast_to(operand, out_shape))
    out.fill(1)
    assert np.array_equal(np.add(out, shaped), np.add(out, operand))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("where", ["scratch", "out", "in place, no scratch"])
@pytest.mark.parametrize("gate_first", [False, True])
def test_short_row_broadcast_is_expanded_first(op: str, where: str, gate_first: bool) -> None:
    """A (C, 1, 1) activation over (C, H, W) rows shorter than SHORT_ROW (a squeeze-excite
    gate) is expanded by an outer product, in scratch (as exported: the kernel asks for it) or
    in a fresh out, then combined at numpy's same-shape speed; in place without scratch it is
    numpy's broadcast. The values are the broadcast's, bit for bit, in either operand order."""
    kernel = KERNELS[f"aten::{op}.out"]
    maps, gate = random((1, 64, 3, 3)).numpy(), random((1, 64, 1, 1)).numpy() + 1
    args = {"self": gate, "other": maps} if gate_first else {"self": maps, "other": gate}
    expected = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                "div": np.true_divide}[op](args["self"], args["other"])
    need = kernel.scratch(**args)
    assert need >= expected.nbytes and kernel.scratch(**args, budget=need - 1) == 0
    out = maps if where == "in place, no scratch" else np.empty_like(maps)
    scratch = np.zeros(need, np.uint8) if where == "scratch" else None
    call = kernel.bind({**args, "out": out, "scratch": scratch})
    call()
    np.testing.assert_array_equal(out, expected)
    assert isinstance(call, functools.partial) == (where == "in place, no scratch")


@pytest.mark.parametrize(("maps", "gate"), [((1, 64, 16, 16), (1, 64, 1, 1)),  # long rows
                                            ((1, 8, 3, 3), (1, 8, 1, 1)),  # few rows
                                            ((1, 64, 3, 3), (1, 1, 3, 3))])  # leading dims
def test_other_broadcasts_ask_no_scratch(maps: tuple[int, ...], gate: tuple[int, ...]) -> None:
    assert KERNELS["aten::mul.out"].scratch(self=random(maps).numpy(),
                                            other=random(gate).numpy()) == 0


@pytest.mark.parametrize("layout", ["transposed", "strided"])
@pytest.mark.parametrize("where", ["scratch", "out"])
def test_expanded_gate_read_at_each_run(where: str, layout: str) -> None:
    """A call prepared once reads a short-row gate's current values at every run, whatever its
    layout: (2, 32, 1, 1) permuted cannot be viewed as (64, 1), and a reshape that copies at
    prepare would expand the first values forever."""
    kernel = KERNELS["aten::mul.out"]
    maps = random((2, 32, 3, 3)).numpy()
    gate = to_kernel_arg(with_layout(random((2, 32, 1, 1)), layout))
    args = {"self": maps, "other": gate}
    out = np.empty_like(maps)
    scratch = np.zeros(kernel.scratch(**args), np.uint8) if where == "scratch" else None
    call = kernel.bind({**args, "out": out, "scratch": scratch})
    call()
    gate[...] = random(gate.shape).numpy()  # new values, in place
    call()
    np.testing.assert_array_equal(out, maps * gate)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("with_scratch", [True, False])
@pytest.mark.parametrize("gate_first", [False, True])
def test_channel_row_over_channels_last_maps_is_tiled(op: str, with_scratch: bool,
                                                      gate_first: bool) -> None:
    """A (1, C, 1, 1) gate over a channels-last map is one short run repeated at every
    position of the map's storage: with the scratch the kernel asks for (one W x C row, less
    than out) it is tiled into it at each run and combined with rows of W x C values; without,
    numpy broadcasts it. Either way the values are the broadcast's, bit for bit, and a new
    gate is read at the next run."""
    kernel = KERNELS[f"aten::{op}.out"]
    maps = stored_channels_last(random((1, 16, 12, 10)).numpy())
    gate = random((1, 16, 1, 1)).numpy() + 1
    args = {"self": gate, "other": maps} if gate_first else {"self": maps, "other": gate}
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}[op]
    out = stored_channels_last(np.empty(maps.shape, np.float32))
    need = kernel.scratch(**args, out=out)
    assert 10 * 16 * 4 <= need < out.nbytes
    call = kernel.bind({**args, "out": out,
                        "scratch": np.zeros(need, np.uint8) if with_scratch else None})
    for _ in range(2):
        call()
        np.testing.assert_array_equal(out, ufunc(args["self"], args["other"]))
        gate[...] = random(gate.shape).numpy() + 1  # new values, in place


# op, its other operands' shapes (None: unary) and extra arguments
CHANNELS_LAST_OPS = {
    "add": (aten.add.Tensor, [(2, 6, 5, 4)], {}),
    "mul-by-channel": (aten.mul.Tensor, [(2, 6, 1, 1)], {}),
    "sub-by-row": (aten.sub.Tensor, [(6, 1, 1)], {}),
    "hardswish": (aten.hardswish.default, [], {}),
    "silu": (aten.silu.default, [], {}),
    "gelu": (aten.gelu.default, [], {"approximate": "tanh"}),
    "hardtanh": (aten.hardtanh.default, [], {"min_val": 0.0, "max_val": 6.0}),
}


@pytest.mark.parametrize("name", sorted(CHANNELS_LAST_OPS))
def test_channels_last_maps(name: str) -> None:
    """Over a map stored channels-last (and other operands as they come), an elementwise
    kernel writes a channels-last out with torch's values: it binds over the (N, H, W, C)
    views, broadcasting operands of fewer dims as before, its scratch (NaN bytes) sized for
    that order."""
    op, others, extra = CHANNELS_LAST_OPS[name]
    x, rest = random((2, 6, 5, 4)), [random(shape) for shape in others]
    want = op(x, *rest, **extra).numpy()
    key = canonical_name(out_variant(op))
    kernel = KERNELS[key]
    names = [a.name for a in out_variant(op)._schema.arguments if not a.kwarg_only][:1 + len(rest)]
    args = {**dict(zip(names, [stored_channels_last(x.numpy()), *(r.numpy() for r in rest)],
                       strict=True)), **extra}
    out = stored_channels_last(np.full(want.shape, np.nan, np.float32))
    size = kernel.scratch(**args, out=out) if kernel.scratch else 0
    kernel.bind({**args, "out": out, **({"scratch": np.full(size, 0xFF, np.uint8)}
                                        if kernel.scratch else {})})()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
