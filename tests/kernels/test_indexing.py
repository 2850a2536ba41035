"""Indexing and data-movement kernels vs. torch: gather/index_select/index/index_put, scatters,
padding, roll/flip/repeat, sort/topk, tril/triu."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from kernel_harness import (
    LAYOUTS,
    check_op,
    check_rules,
    coarse,
    kernel_args,
    out_variant,
    random,
    run_kernel,
    to_kernel_arg,
    with_layout,
)

from runtime_py.kernels import KERNELS
from toolchain.export.out_variant import canonical_name, out_arg_names

aten = torch.ops.aten
DTYPES = [torch.float32, torch.int64, torch.bool]


def _positions(n: int, shape: tuple[int, ...], negative: bool = False,
               dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Random indices into a dim of size ``n``: in [0, n), or [-n, n) with ``negative``."""
    return torch.randint(-n if negative else 0, n, shape).to(dtype)


def _run(op: torch._ops.OpOverload, **kwargs: Any) -> dict[str, np.ndarray]:
    """The outputs of ``op``'s kernel (bound to a planned scratch) on ``kwargs``; its rule
    refuses wrong outs (``check_rules``)."""
    out_op = out_variant(op)
    kernel = KERNELS[canonical_name(out_op)]
    outs = {name: np.empty_like(want.numpy()) for name, want in
            zip(out_arg_names(out_op._schema), op(**kwargs), strict=True)}
    args = kernel_args(out_op, kwargs)
    run_kernel(kernel, args, outs, scratch=True)
    check_rules(canonical_name(out_op), args, outs)
    return outs


def _call(name: str, **kwargs: Any) -> None:
    """Call kernel ``name`` on kernel args (no torch reference: for the error cases)."""
    KERNELS[name].fn(**{k: to_kernel_arg(v) for k, v in kwargs.items()})


# (self shape, dim, index shape): index dims other than ``dim`` may be smaller than self's.
GATHER = [((3, 4, 5), 1, (3, 2, 5)), ((3, 4, 5), -1, (2, 4, 7)), ((3, 4, 5), 0, (6, 1, 5)),
          ((5,), 0, (3,)), ((4, 6), 0, (0, 6)), ((), 0, ())]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dim", "index_shape"), GATHER)
def test_gather(shape: tuple[int, ...], dim: int, index_shape: tuple[int, ...],
                dtype: torch.dtype, layout: str) -> None:
    n = shape[dim] if shape else 1
    index = with_layout(_positions(n, index_shape), layout)
    check_op(aten.gather.default, self=with_layout(random(shape, dtype), layout), dim=dim,
             index=index)


def test_gather_of_broadcast_view() -> None:
    """A zero-stride (expanded) self is read through its strides, not copied."""
    check_op(aten.gather.default, self=random((1, 5)).expand(4, 5), dim=1,
             index=_positions(5, (4, 3)))


@pytest.mark.parametrize("bad", [-1, 4])
def test_gather_out_of_range(bad: int) -> None:
    out = np.zeros((2, 1), np.float32)
    with pytest.raises(IndexError):
        _call("aten::gather.out", self=random((2, 4)), dim=1,
              index=torch.tensor([[0], [bad]]), out=out)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_shape", [(3,), (1,), (0,), (), (7,)])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dim: int, index_shape: tuple[int, ...], dtype: torch.dtype,
                      layout: str) -> None:
    x = with_layout(random((4, 5, 6), dtype), layout)
    check_op(aten.index_select.default, self=x, dim=dim,
             index=_positions(x.shape[dim], index_shape))


@pytest.mark.parametrize("bad", [-1, 5])
def test_index_select_out_of_range(bad: int) -> None:
    with pytest.raises(IndexError):
        _call("aten::index_select.out", self=random((2, 5)), dim=1,
              index=torch.tensor([0, bad]), out=np.zeros((2, 2), np.float32))


# Index lists over a (4, 5, 6, 7) self: None takes the whole dim; one index shape per entry.
INDEX_LISTS = {
    "first": [(3,)],
    "middle": [None, (2, 2)],
    "last": [None, None, None, (4,)],
    "scalar": [None, ()],
    "empty": [None, (0,)],
    "adjacent": [(3,), (3,)],
    "adjacent-middle": [None, (2, 1), (3,)],
    "split": [(3,), None, (3,)],
    "split-broadcast": [(2, 3), None, None, (3,)],
    "all": [(2, 1, 1, 1), (3, 1, 1), (1, 1), (1,)],
}
SELF_SHAPE = (4, 5, 6, 7)


def _index_list(case: str, make: Any) -> list[torch.Tensor | None]:
    return [None if shape is None else make(SELF_SHAPE[d], shape)
            for d, shape in enumerate(INDEX_LISTS[case])]


def _distinct_list(case: str) -> list[torch.Tensor | None]:
    """``case``'s index list, every index of the broadcast shape, with distinct positions
    (some counted from the end)."""
    shapes = INDEX_LISTS[case]
    dims = [d for d, shape in enumerate(shapes) if shape is not None]
    bshape = torch.broadcast_shapes(*(shapes[d] for d in dims))
    sizes = [SELF_SHAPE[d] for d in dims]
    flat = torch.randperm(int(np.prod(sizes)))[:int(np.prod(bshape))].reshape(bshape)
    picked = dict(zip(dims, torch.unravel_index(flat, sizes), strict=True))
    return [None if d not in picked else
            torch.where(torch.rand(bshape) < 0.5, picked[d] - SELF_SHAPE[d], picked[d])
            for d in range(len(shapes))]


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(INDEX_LISTS))
def test_index(case: str, layout: str, index_dtype: torch.dtype) -> None:
    """Negative indices count from the end; split index dims go first, as torch."""
    indices = _index_list(case, lambda n, shape: _positions(n, shape, True, index_dtype))
    check_op(aten.index.Tensor, self=with_layout(random(SELF_SHAPE), layout), indices=indices)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["first", "split"])
def test_index_dtypes(case: str, dtype: torch.dtype) -> None:
    indices = _index_list(case, lambda n, shape: _positions(n, shape, True))
    check_op(aten.index.Tensor, self=random(SELF_SHAPE, dtype), indices=indices)


def test_index_of_transposed_index() -> None:
    rows, cols = with_layout(_positions(4, (3, 2)), "transposed"), _positions(6, (3, 2))
    check_op(aten.index.Tensor, self=random((4, 6)), indices=[rows, cols])


@pytest.mark.parametrize("case", ["first", "split"])
@pytest.mark.parametrize("bad", [-5, 4])
def test_index_out_of_range(case: str, bad: int) -> None:
    """Dim 0 has size 4: -5 and 4 are out of range; neither write happens."""
    indices = _index_list(case, lambda n, shape: torch.zeros(shape, dtype=torch.int64))
    indices[0] = torch.full(INDEX_LISTS[case][0], bad)
    want_shape = aten.index.Tensor(random(SELF_SHAPE), [i if i is None else i * 0
                                                        for i in indices]).shape
    with pytest.raises(IndexError):
        _call("aten::index.Tensor_out", self=random(SELF_SHAPE), indices=indices,
              out=np.zeros(want_shape, np.float32))


@pytest.mark.parametrize("name", ["aten::index.Tensor_out", "aten::index_put.out"])
def test_bool_mask_index_is_rejected(name: str) -> None:
    mask = torch.tensor([True, False, True])
    extra = {"values": torch.tensor(1.0)} if "put" in name else {}
    with pytest.raises(NotImplementedError, match="boolean-mask"):
        _call(name, self=random((3, 2)), indices=[mask], **extra, out=np.zeros((2, 2)))


@pytest.mark.parametrize("values", ["full", "row", "one"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(INDEX_LISTS))
def test_index_put(case: str, layout: str, values: str) -> None:
    """Distinct positions (torch leaves the winner of duplicates unspecified); values of the
    indexed shape, broadcast from its last dim, or a single value."""
    indices = _distinct_list(case)
    shape = aten.index.Tensor(random(SELF_SHAPE), indices).shape
    value_shape = {"full": shape, "row": shape[-1:], "one": ()}[values]
    check_op(aten.index_put.default, self=with_layout(random(SELF_SHAPE), layout),
             indices=indices, values=random(value_shape))


@pytest.mark.parametrize("case", sorted(INDEX_LISTS))
def test_index_put_int8(case: str) -> None:
    """int8 rows written into an int8 tensor (an int8 KV cache)."""
    indices = _distinct_list(case)
    shape = aten.index.Tensor(random(SELF_SHAPE), indices).shape
    as_int8 = lambda s: random(s, torch.float32, scale=60).round().clamp(-127, 127).to(torch.int8)  # noqa: E731
    check_op(aten.index_put.default, self=as_int8(SELF_SHAPE), indices=indices,
             values=as_int8(shape))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["first", "adjacent", "split", "all"])
def test_index_put_accumulate(case: str, dtype: torch.dtype) -> None:
    """Repeated positions add up (bool: or)."""
    indices = _index_list(case, lambda n, shape: _positions(min(n, 2), shape, True))
    shape = aten.index.Tensor(random(SELF_SHAPE), indices).shape
    check_op(aten.index_put.default, self=random(SELF_SHAPE, dtype), indices=indices,
             values=random(shape, dtype), accumulate=True)


@pytest.mark.parametrize(("dim", "start", "end", "step", "src_len"),
                         [(0, None, None, 1, 4), (1, 1, 4, 1, 3), (-1, 0, None, 2, 3),
                          (1, -3, None, 1, 3), (2, 2, 100, 2, 2), (0, 3, 1, 1, 0),
                          (1, -100, 2, 1, 2)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_slice_scatter(dim: int, start: int | None, end: int | None, step: int, src_len: int,
                       dtype: torch.dtype, layout: str) -> None:
    x = random((4, 5, 6), dtype)
    src_shape = list(x.shape)
    src_shape[dim] = src_len
    check_op(aten.slice_scatter.default, self=with_layout(x, layout),
             src=with_layout(random(src_shape, dtype), layout), dim=dim, start=start, end=end,
             step=step)


@pytest.mark.parametrize(("dim", "index"), [(0, 0), (1, -1), (-1, 3), (2, -6)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_select_scatter(dim: int, index: int, dtype: torch.dtype, layout: str) -> None:
    x = with_layout(random((4, 5, 6), dtype), layout)
    src = random([n for d, n in enumerate(x.shape) if d != dim % 3], dtype)
    check_op(aten.select_scatter.default, self=x, src=src, dim=dim, index=index)


@pytest.mark.parametrize("pad", [[1, 2], [0, 0, 2, 1], [1, 1, 1, 1, 1, 1], [-1, 2], [-2, -3],
                                 [2, -1, -1, 0], [0, 0, 0, 0, 0, 0], [-5, 1]])
@pytest.mark.parametrize(("dtype", "value"), [(torch.float32, 0), (torch.float32, -1.5),
                                              (torch.int64, 7), (torch.int64, -2.7),
                                              (torch.bool, True)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_constant_pad_nd(pad: list[int], dtype: torch.dtype, value: float,
                         layout: str) -> None:
    """Negative pads crop (also all of a dim: [-5, 1] leaves only padding)."""
    check_op(aten.constant_pad_nd.default, self=with_layout(random((2, 3, 5), dtype), layout),
             pad=pad, value=value)


@pytest.mark.parametrize(("shifts", "dims"), [([1], [0]), ([-2], [1]), ([7], [-1]),
                                              ([1, 3], [0, 2]), ([2, -1], [1, 1]),
                                              ([5], []), ([-13], []), ([0], [1]),
                                              ([1, 1, 1], [0, 1, 2])])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_roll(shifts: list[int], dims: list[int], dtype: torch.dtype, layout: str) -> None:
    """Shifts beyond the size wrap; a dim given twice rolls by the sum; no dims: flattened."""
    check_op(aten.roll.default, self=with_layout(random((3, 4, 5), dtype), layout),
             shifts=shifts, dims=dims)


@pytest.mark.parametrize("dims", [[0], [-1], [0, 2], [1, -1, 0], []])
@pytest.mark.parametrize("dtype", [*DTYPES, torch.int8])  # int8: a reversed quantized sequence
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flip(dims: list[int], dtype: torch.dtype, layout: str) -> None:
    check_op(aten.flip.default, self=with_layout(random((3, 4, 5), dtype), layout), dims=dims)


@pytest.mark.parametrize(("shape", "repeats"), [((2, 3), [1, 1]), ((2, 3), [2, 3]),
                                                ((2, 3), [3, 1, 2]), ((4,), [2, 2, 2]),
                                                ((2, 3), [0, 2]), ((), [3]), ((3, 1), [1, 4])])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_repeat(shape: tuple[int, ...], repeats: list[int], dtype: torch.dtype,
                layout: str) -> None:
    check_op(aten.repeat.default, self=with_layout(random(shape, dtype), layout),
             repeats=repeats)


SORT_SHAPES = [((6, 40), -1), ((6, 40), 0), ((3, 4, 5), 1), ((7,), 0), ((), 0), ((0, 3), 0)]


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("shape", "dim"), SORT_SHAPES)
def test_sort_stable(shape: tuple[int, ...], dim: int, layout: str, dtype: torch.dtype,
                     descending: bool) -> None:
    """Many ties: stable indices match torch exactly, descending too."""
    check_op(aten.sort.stable, self=with_layout(coarse(shape, dtype), layout), stable=True,
             dim=dim, descending=descending)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan(descending: bool) -> None:
    """nan sorts as the largest value (last ascending, first descending)."""
    x = torch.tensor([[1.0, float("nan"), -2.0, float("inf"), float("nan"), -float("inf")]])
    check_op(aten.sort.stable, self=x, stable=True, descending=descending)


def _check_order(x: torch.Tensor, dim: int, got: dict[str, np.ndarray],
                 want: torch.Tensor) -> None:
    """``got`` values equal torch's ``want`` values and are ``x`` at ``got`` indices."""
    np.testing.assert_array_equal(got["values"], want.numpy())
    picked = torch.gather(x, dim, torch.from_numpy(got["indices"])).numpy()
    np.testing.assert_array_equal(picked, got["values"])


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dim"), SORT_SHAPES[:3])
def test_sort_unstable(shape: tuple[int, ...], dim: int, dtype: torch.dtype,
                       descending: bool) -> None:
    """torch's unstable sort orders ties its own way; ours (stable) is as valid: the values
    match and the indices are a permutation picking them."""
    x = coarse(shape, dtype)
    got = _run(aten.sort.default, self=x, dim=dim, descending=descending)
    _check_order(x, dim, got, torch.sort(x, dim, descending).values)
    assert (np.sort(got["indices"], axis=dim) == np.arange(x.shape[dim]).reshape(
        [-1 if d == dim % x.ndim else 1 for d in range(x.ndim)])).all()


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("shape", "dim"), [((4, 9), -1), ((5, 6), 0), ((3, 5, 4), 1), ((7,), 0)])
def test_topk_distinct(shape: tuple[int, ...], dim: int, layout: str, dtype: torch.dtype,
                       k: int, largest: bool) -> None:
    """Without ties the result is unique: values and indices match torch."""
    x = torch.randperm(int(np.prod(shape))).reshape(shape).to(dtype) - 20
    check_op(aten.topk.default, self=with_layout(x, layout), k=k, dim=dim, largest=largest)


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 4, 9])
@pytest.mark.parametrize(("shape", "dim"), [((6, 9), -1), ((9, 5), 0)])
def test_topk_ties(shape: tuple[int, ...], dim: int, k: int, largest: bool,
                   sorted_: bool) -> None:
    """With ties torch's indices are unspecified. Guaranteed: the values (always sorted)
    match torch's sorted ones, the indices pick them, and among equal values the first come
    first (the head of a stable sort)."""
    x = coarse(shape)
    got = _run(aten.topk.default, self=x, k=k, dim=dim, largest=largest, sorted=sorted_)
    want = torch.topk(x, k, dim, largest, sorted=True).values
    _check_order(x, dim, got, want)
    stable = torch.sort(x, dim=dim, descending=largest, stable=True).indices
    np.testing.assert_array_equal(got["indices"], stable.narrow(dim, 0, k).numpy())


def test_topk_nan_is_largest() -> None:
    x = torch.tensor([[1.0, float("nan"), 3.0, -float("inf"), 2.0]])
    check_op(aten.topk.default, self=x, k=2)
    check_op(aten.topk.default, self=x, k=4, largest=False)


def test_topk_of_scalar() -> None:
    check_op(aten.topk.default, self=torch.tensor(2.5), k=1)


@pytest.mark.parametrize("op", [aten.tril.default, aten.triu.default])
@pytest.mark.parametrize("diagonal", [-7, -2, 0, 1, 3, 9])
@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (2, 3, 5, 5), (1, 1), (0, 3)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_triangle(op: torch._ops.OpOverload, diagonal: int, shape: tuple[int, ...],
                  layout: str) -> None:
    check_op(op, self=with_layout(random(shape), layout), diagonal=diagonal)


@pytest.mark.parametrize("op", [aten.tril.default, aten.triu.default])
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_triangle_dtypes(op: torch._ops.OpOverload, dtype: torch.dtype) -> None:
    check_op(op, self=with_layout(random((2, 4, 3), dtype), "strided"), diagonal=-1)


@pytest.mark.parametrize("op", [aten.tril.default, aten.triu.default])
def test_triangle_zeroes_nan_and_inf(op: torch._ops.OpOverload) -> None:
    x = torch.tensor([[float("nan"), float("inf")], [-float("inf"), float("nan")]])
    check_op(op, self=x)


@pytest.mark.parametrize("src_dtype", [torch.int64, torch.bool, torch.float32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatters_convert_src(dtype: torch.dtype, src_dtype: torch.dtype) -> None:
    """src of another dtype is converted to self's, as torch copies it."""
    x = random((4, 5), dtype)
    src = random((4, 2), src_dtype, scale=3)
    check_op(aten.slice_scatter.default, self=x, src=src, dim=1, start=1, step=2)
    check_op(aten.select_scatter.default, self=x, src=src[:, 0], dim=1, index=2)
