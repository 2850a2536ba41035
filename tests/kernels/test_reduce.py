"""Reduction and softmax kernels vs. torch."""

from __future__ import annotations

import pytest
import torch
from kernel_harness import LAYOUTS, check_op, coarse, random, with_layout

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
