"""Copy, conversion, concatenation and factory kernels vs. torch."""

from __future__ import annotations

import pytest
import torch
from kernel_harness import LAYOUTS, check_op, random, with_layout

aten = torch.ops.aten
DTYPES = [torch.float32, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_clone(layout: str, dtype: torch.dtype) -> None:
    check_op(aten.clone.default, self=with_layout(random((3, 4, 5), dtype), layout))


def test_clone_of_permuted_view() -> None:
    """As the transformer exports it: clone(permute(x)) materialises the permutation."""
    check_op(aten.clone.default, self=random((1, 4, 32, 8)).permute(0, 2, 1, 3))


@pytest.mark.parametrize("target", DTYPES)
@pytest.mark.parametrize("source", DTYPES)
def test_to_copy(source: torch.dtype, target: torch.dtype) -> None:
    """dtype conversion, incl. float -> int truncation toward zero and nonzero -> True."""
    x = with_layout(random((4, 5), source, scale=3), "transposed")
    check_op(aten._to_copy.default, self=x, dtype=target)


@pytest.mark.parametrize(("source", "target"), [(torch.float32, torch.int8),
                                                (torch.int8, torch.float32),
                                                (torch.int8, torch.int64)])
def test_to_copy_int8(source: torch.dtype, target: torch.dtype) -> None:
    """int8 in and out (an int8 KV cache quantizes on write, dequantizes on read), values in
    the int8 range."""
    values = random((4, 5), torch.float32, scale=60).round().clamp(-127, 127)
    x = with_layout(values.to(source), "transposed")
    check_op(aten._to_copy.default, self=x, dtype=target)


@pytest.mark.parametrize(("self_shape", "src_shape"), [((3, 4), (3, 4)), ((3, 4), (4,)),
                                                       ((2, 3), ())])
def test_copy(self_shape: tuple[int, ...], src_shape: tuple[int, ...]) -> None:
    """copy(self, src): src broadcast into self's shape and dtype."""
    check_op(aten.copy.default, self=random(self_shape), src=random(src_shape, torch.int64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shapes", "dim"), [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 5)], 1),
                                             ([(2, 3, 4), (2, 3, 2)], -1), ([(5,), (0,)], 0)])
def test_cat(shapes: list[tuple[int, ...]], dim: int, dtype: torch.dtype) -> None:
    tensors = [with_layout(random(s, dtype), layout) for s, layout in
               zip(shapes, LAYOUTS, strict=False)]
    check_op(aten.cat.default, tensors=tensors, dim=dim)


def test_cat_skips_legacy_empty() -> None:
    check_op(aten.cat.default, tensors=[random((2, 3)), torch.empty(0), random((1, 3))], dim=0)


@pytest.mark.parametrize(("dtype", "value"), [(torch.float32, 0), (torch.float32, -2.5),
                                              (torch.int64, 7), (torch.bool, True)])
def test_full(dtype: torch.dtype, value: float) -> None:
    check_op(aten.full.default, size=[2, 3], fill_value=value, dtype=dtype)


@pytest.mark.parametrize(("dtype", "value"), [(torch.float32, float("-inf")),
                                              (torch.int64, 3), (torch.bool, False)])
def test_scalar_tensor(dtype: torch.dtype, value: float) -> None:
    check_op(aten.scalar_tensor.default, s=value, dtype=dtype)


@pytest.mark.parametrize(("start", "end", "step", "dtype"),
                         [(0, 32, 1, None), (2, 11, 3, torch.int64), (-1.0, 2.0, 0.25, None),
                          (0, 1, 0.1, torch.float32), (5, -5, -2, None)])
def test_arange_start_step(start: float, end: float, step: float,
                           dtype: torch.dtype | None) -> None:
    check_op(aten.arange.start_step, start=start, end=end, step=step, dtype=dtype)


@pytest.mark.parametrize("end", [7, 2.5])
def test_arange_end(end: float) -> None:
    check_op(aten.arange.default, end=end)
