"""Reduction and softmax kernels vs. torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_harness import LAYOUTS, check_op, coarse, out_variant, random, with_layout

from runtime_py.kernels import KERNELS
from toolchain.export.out_variant import canonical_name

aten = torch.ops.aten

# (shape, dims): single, negative, several, all via None / [].
REDUCTIONS = [((4, 5), [1]), ((2, 3, 4, 5), [-1, -2]), ((2, 3, 4), [0, 2]), ((3, 4), None),
              ((3, 4), []), ((6,), [0])]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dim"), REDUCTIONS)
@pytest.mark.parametrize("op", [aten.mean.dim, aten.sum.dim_IntList])
def test_mean_sum(op: torch._ops.OpOverload, shape: tuple[int, ...], dim: list[int] | None,
                  keepdim: bool, layout: str) -> None:
    check_op(op, self=with_layout(random(shape), layout), dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("op", [aten.mean.dim, aten.sum.dim_IntList])
def test_trailing_reduction_is_one_product(op: torch._ops.OpOverload) -> None:
    """Over a float32 tensor's last dims the kernel is one matrix-vector product; nan and the
    infinities still reach the result, and an empty reduction gives nan (mean) or 0 (sum)."""
    x = random((2, 6, 3, 3))
    x[0, 1, 0, 0], x[0, 2, 1, 1], x[1, 3, 2, 2] = float("nan"), float("inf"), -float("inf")
    check_op(op, self=x, dim=[-1, -2], keepdim=True)
    check_op(op, self=torch.zeros(3, 0), dim=[1])
    out = np.empty((2, 6, 1, 1), np.float32)
    call = KERNELS[canonical_name(out_variant(op))].bind(
        {"self": x.numpy(), "dim": [2, 3], "keepdim": True, "out": out})
    assert call.func is np.dot


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_sum_integer_promotes_to_int64(dtype: torch.dtype) -> None:
    check_op(aten.sum.dim_IntList, self=random((3, 4), dtype), dim=[1])


def test_mean_dtype_arg() -> None:
    check_op(aten.mean.dim, self=random((3, 4), torch.int64), dim=[0], dtype=torch.float32)


@pytest.mark.parametrize("op", [aten.mean.default, aten.sum.default])
def test_full_reductions(op: torch._ops.OpOverload) -> None:
    check_op(op, self=with_layout(random((3, 4, 5)), "strided"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dim"), [((4, 5), [1]), ((2, 3, 4), [0, -1]),
                                            ((3, 4), [])])
@pytest.mark.parametrize("op", [aten.amax.default, aten.amin.default])
def test_amax_amin(op: torch._ops.OpOverload, shape: tuple[int, ...], dim: list[int],
                   keepdim: bool, dtype: torch.dtype) -> None:
    x = with_layout(coarse(shape, dtype), "transposed")
    check_op(op, self=x, dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("shape", "dim"), [((10,), 0), ((3, 7), -1), ((3, 7), 0),
                                            ((2, 4, 6, 5), 1), ((1, 4, 32, 32), -1)])
@pytest.mark.parametrize("op", [aten._softmax.default, aten._log_softmax.default])
def test_softmax(op: torch._ops.OpOverload, shape: tuple[int, ...], dim: int,
                 layout: str) -> None:
    x = with_layout(random(shape, scale=5), layout)
    check_op(op, self=x, dim=dim, half_to_float=False)


@pytest.mark.parametrize("op", [aten._softmax.default, aten._log_softmax.default])
def test_softmax_masked_rows(op: torch._ops.OpOverload) -> None:
    """Causal-mask style -inf entries, including a fully masked row (nan, as torch)."""
    x = random((4, 4)).masked_fill(torch.ones(4, 4).triu(1).bool(), float("-inf"))
    x[3] = float("-inf")
    check_op(op, self=x, dim=-1, half_to_float=False)


DTYPES = [torch.float32, torch.int64, torch.bool]
# (overload, dim): an int dim (any.dim), a list (empty reduces nothing), None, all (default).
TRUTH_DIMS = [("dim", 1), ("dim", -1), ("dims", [0, 2]), ("dims", [-1]), ("dims", []),
              ("dims", None)]


def _sparse(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Half zeros, the rest nonzero (nan among floats: truthy)."""
    x = random(shape, torch.bool).to(dtype)
    return x.masked_fill(torch.rand(shape) < 0.1, float("nan")) if dtype.is_floating_point else x


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("overload", "dim"), TRUTH_DIMS)
@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all(name: str, overload: str, dim: int | list[int] | None, keepdim: bool,
                 dtype: torch.dtype, layout: str) -> None:
    op = getattr(getattr(aten, name), overload)
    check_op(op, self=with_layout(_sparse((2, 3, 4), dtype), layout), dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all_full(name: str, dtype: torch.dtype) -> None:
    x = with_layout(_sparse((3, 4), dtype), "strided")
    check_op(getattr(aten, name).default, self=x)
    check_op(getattr(aten, name).default, self=torch.ones(3, 4, dtype=dtype))


# (shape, dim): flat (None), last, first, negative middle.
ARG_DIMS = [((3, 7), None), ((3, 7), 1), ((3, 7), 0), ((2, 3, 4), -2), ((6,), 0)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dim"), ARG_DIMS)
@pytest.mark.parametrize("op", [aten.argmax.default, aten.argmin.default])
def test_argmax_argmin(op: torch._ops.OpOverload, shape: tuple[int, ...], dim: int | None,
                       keepdim: bool, dtype: torch.dtype, layout: str) -> None:
    """Many ties: the first index wins."""
    check_op(op, self=with_layout(coarse(shape, dtype), layout), dim=dim, keepdim=keepdim)


NAN_ROWS = torch.tensor([[1.0, float("nan"), 5.0, float("nan")],
                         [float("inf"), 2.0, -float("inf"), 2.0],
                         [-1.0, -1.0, float("nan"), -7.0]])


@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("op", [aten.argmax.default, aten.argmin.default])
def test_argmax_argmin_nan(op: torch._ops.OpOverload, dim: int | None) -> None:
    """nan is both the max and the min (its first index), as in torch."""
    check_op(op, self=NAN_ROWS, dim=dim)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dim"), [(s, d) for s, d in ARG_DIMS if d is not None])
@pytest.mark.parametrize("op", [aten.max.dim, aten.min.dim])
def test_max_min_dim(op: torch._ops.OpOverload, shape: tuple[int, ...], dim: int,
                     keepdim: bool, dtype: torch.dtype, layout: str) -> None:
    """Values and the first index among ties."""
    check_op(op, self=with_layout(coarse(shape, dtype), layout), dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("op", [aten.max.dim, aten.min.dim])
def test_max_min_dim_nan(op: torch._ops.OpOverload, dim: int) -> None:
    check_op(op, self=NAN_ROWS, dim=dim)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("dtype", "out_dtype"),
                         [(torch.float32, None), (torch.int64, None), (torch.bool, None),
                          (torch.int64, torch.float32), (torch.bool, torch.float32),
                          (torch.float32, torch.int64)])
@pytest.mark.parametrize(("shape", "dim"), [((7,), 0), ((3, 5), 1), ((3, 5), -2),
                                            ((2, 3, 4), 1), ((2, 3, 4), -1)])
def test_cumsum(shape: tuple[int, ...], dim: int, dtype: torch.dtype,
                out_dtype: torch.dtype | None, layout: str) -> None:
    """Ints and bools accumulate in int64; the dtype arg casts first (float -> int truncates)."""
    x = with_layout(random(shape, dtype, scale=3), layout)
    check_op(aten.cumsum.default, self=x, dim=dim, dtype=out_dtype)


def test_cumsum_long_float_row() -> None:
    """torch accumulates float32 in double: a float32 running sum would end ~0.5% off here."""
    x = torch.full((1_000_000,), 0.1) + random((1_000_000,), scale=1e-3)
    check_op(aten.cumsum.default, self=x, dim=0)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dim"), [((3, 5), 1), ((3, 5), -2), ((2, 3, 4), 1)])
def test_prod(shape: tuple[int, ...], dim: int, keepdim: bool, dtype: torch.dtype,
              layout: str) -> None:
    """Ints and bools multiply in int64."""
    x = with_layout(coarse(shape, dtype), layout)
    check_op(aten.prod.dim_int, self=x, dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("dtype", DTYPES)
def test_prod_full(dtype: torch.dtype) -> None:
    check_op(aten.prod.default, self=with_layout(coarse((3, 4), dtype), "transposed"))


INF = float("inf")
ORDS = [2, 1, INF, -INF, 0, 3, 0.5, -1.5]
NORM_DIMS = [((4, 5), [1]), ((2, 3, 4, 5), [-1, -2]), ((2, 3, 4), [0, 2]), ((3, 4), None),
             ((3, 4), [])]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dim"), NORM_DIMS)
@pytest.mark.parametrize("ord", ORDS)
def test_vector_norm(ord: float, shape: tuple[int, ...], dim: list[int] | None,
                     keepdim: bool) -> None:
    """ord 0 counts nonzeros: its input has many zeros."""
    x = coarse(shape) if ord == 0 else random(shape, scale=2)
    check_op(aten.linalg_vector_norm.default, self=with_layout(x, "strided"), ord=ord, dim=dim,
             keepdim=keepdim)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ord", [2, 1, INF, 0])
def test_vector_norm_layouts(ord: float, layout: str) -> None:
    x = with_layout(coarse((2, 3, 4)), layout)
    check_op(aten.linalg_vector_norm.default, self=x, ord=ord, dim=[0, 2])


@pytest.mark.parametrize("ord", ORDS)
def test_vector_norm_special_values(ord: float) -> None:
    """Zeros (negative ords give 0), infinities, nan (nan counts as nonzero for ord 0)."""
    x = torch.tensor([[0.0, 1.0, -2.0], [0.0, -INF, 3.0], [float("nan"), 1.0, 0.0],
                      [0.0, 0.0, 0.0]])
    check_op(aten.linalg_vector_norm.default, self=x, ord=ord, dim=[1])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dim"), REDUCTIONS)
@pytest.mark.parametrize("op", [aten.var.correction, aten.var_mean.correction])
def test_var(op: torch._ops.OpOverload, shape: tuple[int, ...], dim: list[int] | None,
             keepdim: bool, layout: str) -> None:
    x = with_layout(random(shape, scale=3) + 5, layout)
    check_op(op, self=x, dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("dim", [[1], None])
@pytest.mark.parametrize("correction", [None, 0, 2, 0.5])
@pytest.mark.parametrize("op", [aten.var.correction, aten.var_mean.correction])
def test_var_correction(op: torch._ops.OpOverload, correction: float | None,
                        dim: list[int] | None) -> None:
    check_op(op, self=random((3, 6)), dim=dim, correction=correction)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("correction", [2, 3])
@pytest.mark.parametrize("op", [aten.var.correction, aten.var_mean.correction])
def test_var_no_degrees_of_freedom(op: torch._ops.OpOverload, correction: int) -> None:
    """correction >= n divides by 0: inf (nan for a constant row), as torch."""
    check_op(op, self=torch.tensor([[1.0, 3.0], [2.0, 2.0]]), dim=[1], correction=correction)


@pytest.mark.parametrize("op", ["aten::_softmax.out", "aten::_log_softmax.out"])
def test_softmax_spreads_its_statistic_over_short_rows(op: str) -> None:
    """Over 32+ rows shorter than elementwise.SHORT_ROW the kernel asks for room to spread the
    row statistic (numpy then runs same-shaped); with an older bundle's smaller scratch it
    broadcasts instead. Both give the same values, in place too."""
    kernel = KERNELS[op]
    x = random((2, 4, 8, 12)).numpy()
    args = {"self": x, "dim": -1, "half_to_float": False}
    full, least = kernel.scratch(**args), kernel.scratch(**args, budget=0)
    assert full - least >= x.nbytes
    results = []
    for size in (full, least):
        out = x.copy()
        kernel.bind({**args, "self": out, "out": out, "scratch": np.zeros(size, np.uint8)})()
        results.append(out)
    np.testing.assert_array_equal(*results)
    expected = (torch.log_softmax if "log" in op else torch.softmax)(torch.from_numpy(x),
                                                                    -1).numpy()
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-6)


def test_layer_norm_spreads_its_statistics_over_short_rows() -> None:
    """Layer norm over 32+ rows shorter than elementwise.SHORT_ROW asks for room to spread mean
    and rstd; with an older bundle's scratch (none) it broadcasts. Same values either way."""
    kernel = KERNELS["aten::native_layer_norm.out"]
    x, weight, bias = (random(s).numpy() for s in ((2, 20, 24), (24,), (24,)))
    args = {"input": x, "normalized_shape": (24,), "weight": weight, "bias": bias, "eps": 1e-5}
    need = kernel.scratch(**args)
    assert need >= x.nbytes and kernel.scratch(**args, budget=need - 1) == 0
    results = []
    for scratch in (np.zeros(need, np.uint8), None):
        outs = {"out0": np.empty_like(x), "out1": np.empty((2, 20, 1), np.float32),
                "out2": np.empty((2, 20, 1), np.float32)}
        kernel.bind({**args, **outs, "scratch": scratch})()
        results.append(outs["out0"])
    np.testing.assert_array_equal(*results)
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), (24,), torch.from_numpy(weight),
                                              torch.from_numpy(bias), 1e-5).numpy()
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-5)
