"""Matmul kernels vs. torch.

Tolerance rtol 1e-4 / atol 1e-5: BLAS and torch sum the K products in different orders, so
float32 results differ by a few ulp of the partial sums, which exceeds 1e-5 relative on
outputs that are small through cancellation.
"""

from __future__ import annotations

import pytest
import torch
from kernel_harness import LAYOUTS, check_op, random, with_layout

aten = torch.ops.aten
TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.mark.parametrize("layout_b", LAYOUTS)
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize(("m", "k", "n"), [(1, 16, 32), (4, 33, 10), (7, 1, 5)])
def test_mm(m: int, k: int, n: int, layout_a: str, layout_b: str) -> None:
    a, b = with_layout(random((m, k)), layout_a), with_layout(random((k, n)), layout_b)
    check_op(aten.mm.default, self=a, mat2=b, **TOL)


def test_mm_int64() -> None:
    check_op(aten.mm.default, self=random((3, 4), torch.int64), mat2=random((4, 5), torch.int64))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("b", "m", "k", "n"), [(4, 32, 32, 32), (3, 5, 7, 2), (1, 1, 8, 1)])
def test_bmm(b: int, m: int, k: int, n: int, layout: str) -> None:
    x, y = with_layout(random((b, m, k)), layout), with_layout(random((b, k, n)), layout)
    check_op(aten.bmm.default, self=x, mat2=y, **TOL)


@pytest.mark.parametrize(("beta", "alpha"), [(1, 1), (0.5, 2), (0, 1), (1, -1)])
@pytest.mark.parametrize("bias_shape", [(10,), (4, 10), (1, 10)])
def test_addmm(bias_shape: tuple[int, ...], beta: float, alpha: float) -> None:
    """As nn.Linear exports it: addmm(bias, x, weight.t()) with a transposed weight view."""
    weight = random((10, 16))
    check_op(aten.addmm.default, self=random(bias_shape), mat1=random((4, 16)), mat2=weight.t(),
             beta=beta, alpha=alpha, **TOL)


def test_addmm_beta_zero_ignores_nan_bias() -> None:
    check_op(aten.addmm.default, self=torch.full((3,), float("nan")), mat1=random((2, 4)),
             mat2=random((4, 3)), beta=0, **TOL)
