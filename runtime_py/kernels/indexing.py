"""Indexing and data-movement kernels: gather, index_select, index, index_put, slice/select
scatter, constant padding, roll, flip, repeat, sort, topk, tril/triu.

Reads at data-dependent positions go through ``np.take``, which writes into ``out``: along one
axis directly (index_select, ``index`` with one index tensor; ``np.take`` copies a strided
``self`` first), else (gather, several index tensors) by element offsets into the
memory span of ``self``, built in a planned scratch (``_lookup``), so ``self`` may be any view.
index_put writes with numpy's indexed assignment / ``np.add.at``, which check every index before
writing. Reads check their indices with a min/max reduction: out of range raises IndexError;
negative indices count from the end where torch allows it (index, index_put), not in gather and
index_select. Boolean-mask indices (data-dependent shapes) raise NotImplementedError.

sort/topk order with a stable argsort, which numpy only returns as a fresh array: each run
allocates that ``self``-sized int64 array (topk then sorts its values in it). Ties keep their
original order (descending too); nan is the largest value, as in torch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_py.kernels import Bound, Kernel, rules
from runtime_py.kernels._common import ALL, INT8, NUMERIC, Workspace, workspace_bytes

Indices = Sequence[np.ndarray | None]
Shape = tuple[int, ...]
Key = tuple[int | slice | np.ndarray, ...]


def _along(dim: int, key: int | slice, ndim: int) -> Key:
    """An index applying ``key`` to dim ``dim`` (may be negative) of an ``ndim``-dim array."""
    return (slice(None),) * (dim % ndim) + (key,)


def _copies(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> Bound:
    """One call copying each (destination, source) pair, in order."""

    def run() -> None:
        for dst, src in pairs:
            np.copyto(dst, src)

    return run


def _check(index: np.ndarray, n: int, negative: bool) -> bool:
    """Raise IndexError unless every index is in [0, n) ([-n, n) if ``negative``); return
    whether any is negative."""
    if not index.size:
        return False
    lo, hi = np.minimum.reduce(index, axis=None), np.maximum.reduce(index, axis=None)
    low = -n if negative else 0
    if lo < low or hi >= n:
        raise IndexError(f"index out of range [{low}, {n}): found {lo if lo < low else hi}")
    return bool(lo < 0)


def take(self: np.ndarray, axis: int, index: np.ndarray, out: np.ndarray,
         negative: bool) -> Bound:
    """The call: out = ``self`` indexed along ``axis`` by ``index`` (its dims replace that
    axis), indices checked first (``_check``)."""
    n = self.shape[axis]

    def run() -> None:
        _check(index, n, negative)
        np.take(self, index, axis=axis, out=out, mode="wrap")  # "raise" would buffer out

    return run


def _span(a: np.ndarray) -> tuple[np.ndarray, Shape]:
    """(1-D view of the memory from ``a``'s first element to its last, ``a``'s strides in
    elements): element ``i`` of ``a`` is at ``sum(i * strides)`` in the view."""
    if min(a.strides, default=0) < 0:
        raise ValueError("indexing needs non-negative strides (as the runtime's views have)")
    steps = tuple(s // a.itemsize for s in a.strides)
    span = 1 + sum((n - 1) * s for n, s in zip(a.shape, steps, strict=True)) if a.size else 0
    return np.lib.stride_tricks.as_strided(a, (span,), (a.itemsize,), writeable=False), steps


Term = tuple[int, np.ndarray, bool]  # (self dim, index in out's dims, negative allowed)


def _lookup(self: np.ndarray, terms: Sequence[Term], kept: dict[int, int], out: np.ndarray,
            ws: Workspace) -> Bound:
    """out = ``self`` at element offsets built in ``ws``: the sum over ``terms`` of index *
    stride, plus for each ``kept`` dim (self dim -> out axis) the position along that out axis
    * stride. The first term is written straight into the offsets, later ones into their own
    region first."""
    flat, steps = _span(self)
    offsets = ws.take(out.shape, np.int64)
    parts = [offsets, *(ws.take(index.shape, np.int64) for _, index, _ in terms[1:])]
    ramps = [(np.arange(out.shape[axis]) * steps[d]).reshape(
        [n if a == axis else 1 for a, n in enumerate(out.shape)]) for d, axis in kept.items()]

    def run() -> None:
        for (d, index, negative), part in zip(terms, parts, strict=True):
            n = self.shape[d]
            if _check(index, n, negative):
                np.remainder(index, n, out=part, dtype=np.int64)
                np.multiply(part, steps[d], part)
            else:
                np.multiply(index, steps[d], out=part, dtype=np.int64)
            if part is not offsets:
                np.add(offsets, part, offsets)
        for ramp in ramps:
            np.add(offsets, ramp, offsets)
        np.take(flat, offsets, out=out, mode="clip")

    return run


def _offsets_bytes(*shapes: Sequence[int]) -> int:
    return workspace_bytes(*((shape, np.int64) for shape in shapes))


def gather(self: np.ndarray, dim: int, index: np.ndarray, *, sparse_grad: bool = False,
           out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """out[i] = self[i with its ``dim`` entry replaced by index[i]] (``out`` shaped like
    ``index``, which may be smaller than ``self`` off ``dim``)."""
    del sparse_grad  # gradients only
    if not index.size:
        return _copies([])
    self, index, out = np.atleast_1d(self, index, out)
    dim %= self.ndim
    kept = {d: d for d in range(self.ndim) if d != dim}
    return _lookup(self, [(dim, index, False)], kept, out, Workspace(scratch))


def _gather_scratch(index: np.ndarray, **_: object) -> int:
    return _offsets_bytes(np.shape(index))


def index_select(self: np.ndarray, dim: int, index: np.ndarray, *, out: np.ndarray) -> Bound:
    return take(self, dim, index.reshape(-1), out, negative=False)


def _index_tensors(indices: Indices) -> list[tuple[int, np.ndarray]]:
    """(dim, index tensor) of the non-None entries of an advanced index."""
    used = [(d, index) for d, index in enumerate(indices) if index is not None]
    if any(index.dtype.kind in "bu" for _, index in used):
        raise NotImplementedError("boolean-mask indices give data-dependent shapes: "
                                  "index with int64 positions instead")
    if not used:
        raise ValueError("advanced indexing needs at least one index tensor")
    return used


@dataclass(frozen=True)
class _Layout:
    """Where advanced indexing puts the dims: as torch (and numpy) does, the broadcast index
    dims replace the indexed dims if those are adjacent, else they come first."""

    shape: Shape  # of the result
    first: int  # result axis of the first broadcast index dim
    width: int  # number of broadcast index dims
    kept: dict[int, int]  # self dim taken whole -> result axis

    @classmethod
    def of(cls, shape: Shape, used: list[tuple[int, np.ndarray]]) -> _Layout:
        dims = [d for d, _ in used]
        bshape = np.broadcast_shapes(*(index.shape for _, index in used))
        first = dims[0] if dims[-1] - dims[0] == len(dims) - 1 else 0
        rest = [d for d in range(len(shape)) if d not in dims]
        kept = {d: r if r < first else r + len(bshape) for r, d in enumerate(rest)}
        result = [shape[d] for d in rest]
        result[first:first] = bshape
        return cls(tuple(result), first, len(bshape), kept)

    def place(self, index: np.ndarray) -> np.ndarray:
        """``index`` as a view with the result's dims (size 1 outside its broadcast dims)."""
        after = len(self.shape) - self.first - self.width
        return index[(None,) * (self.first + self.width - index.ndim) + (...,) + (None,) * after]


def index(self: np.ndarray, indices: Indices, *, out: np.ndarray,
          scratch: np.ndarray | None = None) -> Bound:
    """``self[indices]`` (None entries take the whole dim), negative indices from the end."""
    used = _index_tensors(indices)
    if len(used) == 1:
        return take(self, *used[0], out, negative=True)
    layout = _Layout.of(self.shape, used)
    terms = [(d, layout.place(index), True) for d, index in used]
    return _lookup(self, terms, layout.kept, out, Workspace(scratch))


def _index_scratch(self: np.ndarray, indices: Indices, **_: object) -> int:
    used = _index_tensors(indices)
    if len(used) == 1:
        return 0
    return _offsets_bytes(_Layout.of(np.shape(self), used).shape,
                          *(index.shape for _, index in used[1:]))


def index_put(self: np.ndarray, indices: Indices, values: np.ndarray, accumulate: bool = False,
              *, out: np.ndarray) -> Bound:
    """``self`` with ``[indices] = values`` (``+=``, duplicates adding up, if ``accumulate``);
    ``out`` may be ``self``."""
    _index_tensors(indices)
    key = tuple(slice(None) if index is None else index for index in indices)

    def run() -> None:
        np.copyto(out, self)
        if accumulate:
            np.add.at(out, key, values)
        else:
            out[key] = values

    return run


def _scatter(self: np.ndarray, src: np.ndarray, key: Key, out: np.ndarray) -> Bound:
    """``self`` with ``[key] = src`` (converted to self's dtype, as torch copies); ``out`` may
    be ``self`` (copying it then does nothing)."""
    region = out[key]

    def run() -> None:
        np.copyto(out, self)
        np.copyto(region, src, casting="unsafe")

    return run


def slice_scatter(self: np.ndarray, src: np.ndarray, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1, *, out: np.ndarray) -> Bound:
    return _scatter(self, src, _along(dim, slice(start, end, step), out.ndim), out)


def select_scatter(self: np.ndarray, src: np.ndarray, dim: int, index: int, *,
                   out: np.ndarray) -> Bound:
    return _scatter(self, src, _along(dim, index, out.ndim), out)


def constant_pad_nd(self: np.ndarray, pad: Sequence[int], value: float = 0, *,
                    out: np.ndarray) -> Bound:
    """(before, after) pads from the last dim backwards; negative ones crop. The borders are
    filled with ``value`` (cast as torch: truncated for ints), the rest copied."""
    src, dst, borders = [slice(None)] * self.ndim, [slice(None)] * self.ndim, []
    for k, (before, after) in enumerate(zip(pad[::2], pad[1::2], strict=True)):
        d = self.ndim - 1 - k
        start, lo = max(0, -before), max(0, before)
        length = max(0, self.shape[d] - start - max(0, -after))
        src[d], dst[d] = slice(start, start + length), slice(lo, lo + length)
        borders += [out[_along(d, slice(None, lo), out.ndim)],
                    out[_along(d, slice(lo + length, None), out.ndim)]]
    regions = [region for region in borders if region.size]
    interior = out[tuple(dst)], self[tuple(src)]

    def run() -> None:
        for region in regions:
            region.fill(value)
        np.copyto(*interior)

    return run


def _rolled(src: np.ndarray, dst: np.ndarray, shifts: Sequence[int],
            dims: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(dst block, src block) pairs of a roll: every dim rolled by a net nonzero shift splits
    both into two blocks."""
    net: dict[int, int] = {}
    for shift, dim in zip(shifts, dims, strict=True):
        net[dim % src.ndim] = net.get(dim % src.ndim, 0) + shift
    cuts: list[list[tuple[slice, slice]]] = [[(slice(None), slice(None))]] * src.ndim
    for d, shift in net.items():
        n = src.shape[d]
        s = shift % n if n else 0
        if s:
            cuts[d] = [(slice(s, None), slice(None, n - s)), (slice(None, s), slice(n - s, None))]
    return [(dst[tuple(to for to, _ in blocks)], src[tuple(fro for _, fro in blocks)])
            for blocks in itertools.product(*cuts)]


def roll(self: np.ndarray, shifts: Sequence[int], dims: Sequence[int] = (), *,
         out: np.ndarray) -> Bound:
    """Elements shifted cyclically along ``dims``; no dims: along the flattened tensor."""
    shifts, dims = ((v,) if isinstance(v, int) else v for v in (shifts, dims))  # int[1] args
    if dims:
        return _copies(_rolled(self, out, shifts, dims))
    flat = out.reshape(-1)
    if self.flags.c_contiguous:
        return _copies(_rolled(self.reshape(-1), flat, shifts, (0,)))

    def run() -> None:  # flattening a strided self copies it, at every run
        _copies(_rolled(self.reshape(-1), flat, shifts, (0,)))()

    return run


def flip(self: np.ndarray, dims: Sequence[int], *, out: np.ndarray) -> Bound:
    return _copies([(out, np.flip(self, tuple(dims)))])


def repeat(self: np.ndarray, repeats: Sequence[int], *, out: np.ndarray) -> Bound:
    """``self`` (its shape left-padded with 1s to len(repeats)) tiled: ``out`` viewed as
    (r0, n0, r1, n1, ...) gets ``self`` broadcast along every r."""
    padded = self[(None,) * (len(repeats) - self.ndim)]
    dst = out.reshape([x for pair in zip(repeats, padded.shape, strict=True) for x in pair])
    return _copies([(dst, np.expand_dims(padded, tuple(range(0, dst.ndim, 2))))])


def _argsort(x: np.ndarray, dim: int, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """(stable argsort of ``x`` along ``dim``, the fresh C-contiguous array holding it: numpy's
    argsort has no out=). Descending keeps equal elements in order too and puts nan first, as
    torch."""
    if not descending:
        order = np.argsort(x, axis=dim, kind="stable")
        return order, order
    order = np.argsort(np.flip(x, dim), axis=dim, kind="stable")
    np.subtract(x.shape[dim] - 1, order, order)
    return np.flip(order, dim), order


def _sort_into(x: np.ndarray, dim: int, descending: bool, dst: np.ndarray) -> Bound:
    """The call sorting ``x`` along ``dim`` into ``dst``: copied, then sorted in place (in a
    reversed view if descending)."""
    ascending = np.flip(dst, dim) if descending else dst

    def run() -> None:
        np.copyto(ascending, x)
        ascending.sort(axis=dim, kind="stable")  # stable: equal -0.0/0.0 keep argsort's order

    return run


def sort(self: np.ndarray, dim: int = -1, descending: bool = False, *,
         stable: bool | None = None, values: np.ndarray, indices: np.ndarray) -> Bound:
    """Always stable (a valid order where torch's is not)."""
    del stable
    self, values, indices = np.atleast_1d(self, values, indices)
    sort_values = _sort_into(self, dim, descending, values)

    def run() -> None:
        np.copyto(indices, _argsort(self, dim, descending)[0])
        sort_values()

    return run


def topk(self: np.ndarray, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *,
         values: np.ndarray, indices: np.ndarray) -> Bound:
    """The ``k`` largest (smallest) along ``dim``, always sorted; of equal elements the first
    ones, in order (torch's choice among ties is unspecified). The values are the head of
    ``self`` sorted in the argsort's array, free once the indices are copied out."""
    del sorted
    self, values, indices = np.atleast_1d(self, values, indices)
    head = _along(dim, slice(None, k), self.ndim)

    def run() -> None:
        order, memory = _argsort(self, dim, largest)
        np.copyto(indices, order[head])
        ranked = memory.reshape(-1).view(np.uint8)[:self.nbytes].view(self.dtype)
        ranked = ranked.reshape(self.shape)
        _sort_into(self, dim, largest, ranked)()
        np.copyto(values, ranked[head])

    return run


def _triangle(upper: bool) -> Callable[..., Bound]:
    """tril/triu: ``self`` with the elements below/above ``diagonal`` of the last two dims
    zeroed (``out`` may be ``self``)."""

    def prepare(self: np.ndarray, diagonal: int = 0, *, out: np.ndarray) -> Bound:
        rows, cols = out.shape[-2:]
        offset = np.arange(rows + cols) - rows  # column - row of a position, from its diagonal
        drop = offset < diagonal if upper else offset > diagonal
        # mask[i, j] = drop[rows - i + j]: a (rows, cols) view of rows + cols flags
        mask = np.lib.stride_tricks.as_strided(drop[rows:], (rows, cols),
                                               (-drop.itemsize, drop.itemsize), writeable=False)
        zero = np.zeros((), out.dtype)

        def run() -> None:
            np.copyto(out, self)
            np.copyto(out, zero, where=mask)

        return run

    return prepare


# Shape and dtype rules (``rules``): out shapes as torch gives them; index tensors int64 or
# int32 (bool masks: NotImplementedError); values out of range are run-time IndexErrors.


def _like_self(self: np.ndarray, out: np.ndarray, inputs: dict[str, object]) -> None:
    rules.expect(out, rules.tensor(self, "self").shape, self.dtype, inputs)


def _check_gather(self: np.ndarray, dim: int, index: np.ndarray, *, out: np.ndarray,
                  **_: object) -> None:
    """An index of self's rank, at most self's size off ``dim``, gives out of its shape (an
    empty index of any shape and dtype, as torch)."""
    inputs = {"self": rules.tensor(self, "self"), "dim": dim, "index": rules.tensor(index, "index")}
    d = rules.axis(dim, self.ndim)
    sizes = zip(index.shape, self.shape, strict=False)  # 0-d and 1-d tensors are alike
    if index.size and (index.dtype not in rules.INDEX or max(index.ndim, 1) != max(self.ndim, 1)
                       or any(m > n for a, (m, n) in enumerate(sizes) if a != d)):
        rules.refuse(inputs, "an int64/int32 index of self's rank, at most self's size off dim "
                     "expected")
    rules.expect(out, index.shape, self.dtype, inputs)


def _check_index_select(self: np.ndarray, dim: int, index: np.ndarray, *, out: np.ndarray,
                        **_: object) -> None:
    """A 0-d or 1-d index replaces self's ``dim`` by its length."""
    inputs = {"self": rules.tensor(self, "self"), "dim": dim,
              "index": rules.tensor(index, "index", rules.INDEX)}
    if not self.ndim:
        raise NotImplementedError("index_select of a 0-d tensor")
    d = rules.axis(dim, self.ndim)
    if index.ndim > 1:
        rules.refuse(inputs, "a 0-d or 1-d index expected")
    rules.expect(out, (*self.shape[:d], index.size, *self.shape[d + 1:]), self.dtype, inputs)


def _indexed_shape(self: np.ndarray, indices: Indices, inputs: dict[str, object]) -> Shape:
    """The shape of ``self[indices]``: at most one index per dim, index tensors broadcasting
    (``_Layout``)."""
    if not isinstance(indices, list) or len(indices) > rules.tensor(self, "self").ndim:
        rules.refuse(inputs, "more indices than dims")
    for index in indices:
        if index is not None and rules.tensor(index, "indices").dtype.kind not in "bu":
            rules.tensor(index, "indices", rules.INDEX)
    return _Layout.of(self.shape, _index_tensors(indices)).shape


def _check_index(self: np.ndarray, indices: Indices, *, out: np.ndarray, **_: object) -> None:
    inputs = {"self": self, "indices": indices}
    rules.expect(out, _indexed_shape(self, indices, inputs), self.dtype, inputs)


def _check_index_put(self: np.ndarray, indices: Indices, values: np.ndarray, *,
                     out: np.ndarray, **_: object) -> None:
    """values of self's dtype broadcast to ``self[indices]``'s shape; out as self."""
    inputs = {"self": self, "indices": indices, "values": rules.tensor(values, "values")}
    shape = _indexed_shape(self, indices, inputs)
    if values.dtype != self.dtype or not rules.broadcasts_to(values.shape, shape):
        rules.refuse(inputs, "values of another dtype, or not broadcasting to the indexed shape")
    _like_self(self, out, inputs)


def _scattered(self: np.ndarray, src: np.ndarray, region: Shape, out: np.ndarray,
               inputs: dict[str, object]) -> None:
    """src (any dtype) fills a ``region`` of self exactly; out as self."""
    if rules.tensor(src, "src").shape != region:
        rules.refuse(inputs, f"src is not of the region's shape {list(region)}")
    _like_self(self, out, inputs)


def _check_slice_scatter(self: np.ndarray, src: np.ndarray, dim: int = 0,
                         start: int | None = None, end: int | None = None, step: int = 1, *,
                         out: np.ndarray, **_: object) -> None:
    inputs = {"self": rules.tensor(self, "self"), "src": src, "dim": dim, "start": start,
              "end": end, "step": step}
    if not self.ndim:
        raise NotImplementedError("slice_scatter of a 0-d tensor")
    d = rules.axis(dim, self.ndim)
    bounds = [None if v is None else rules.integer(v, name) for v, name in ((start, "start"),
                                                                            (end, "end"))]
    n = len(range(*slice(*bounds, rules.integer(step, "step", 1)).indices(self.shape[d])))
    _scattered(self, src, (*self.shape[:d], n, *self.shape[d + 1:]), out, inputs)


def _check_select_scatter(self: np.ndarray, src: np.ndarray, dim: int, index: int, *,
                          out: np.ndarray, **_: object) -> None:
    inputs = {"self": rules.tensor(self, "self"), "src": src, "dim": dim, "index": index}
    if not self.ndim:
        raise NotImplementedError("select_scatter of a 0-d tensor")
    d = rules.axis(dim, self.ndim)
    rules.integer(index, "index", -self.shape[d], self.shape[d] - 1)
    _scattered(self, src, self.shape[:d] + self.shape[d + 1:], out, inputs)


def _check_pad(self: np.ndarray, pad: Sequence[int], value: float = 0, *, out: np.ndarray,
               **_: object) -> None:
    """(before, after) pairs for the last dims, none cropping a dim below 0."""
    inputs = {"self": rules.tensor(self, "self"), "pad": pad, "value": value}
    pads = rules.ints(pad, "pad")
    if len(pads) % 2 or len(pads) > 2 * self.ndim:
        rules.refuse(inputs, "an even number of pads, two per dim at most")
    shape = list(self.shape)
    for k, (before, after) in enumerate(zip(pads[::2], pads[1::2], strict=True)):
        shape[-1 - k] += before + after
    if min(shape, default=0) < 0:
        rules.refuse(inputs, "pads cropping a dim below 0")
    rules.fill_value(value, self.dtype, inputs)
    rules.expect(out, shape, self.dtype, inputs)


def _check_roll(self: np.ndarray, shifts: Sequence[int], dims: Sequence[int] = (), *,
                out: np.ndarray, **_: object) -> None:
    """One shift per dim, or a single one (of the flattened tensor) without dims."""
    inputs = {"self": rules.tensor(self, "self"), "shifts": shifts, "dims": dims}
    shifts, dims = rules.ints(shifts, "shifts"), rules.ints(dims, "dims")
    if len(shifts) != max(len(dims), 1):
        rules.refuse(inputs, "shifts and dims do not align")
    if dims and not self.ndim:
        raise NotImplementedError("roll of a 0-d tensor along dims")
    for d in dims:
        rules.axis(d, self.ndim)
    _like_self(self, out, inputs)


def _check_flip(self: np.ndarray, dims: Sequence[int], *, out: np.ndarray,
                **_: object) -> None:
    inputs = {"self": rules.tensor(self, "self"), "dims": dims}
    if rules.ints(dims, "dims") and not self.ndim:
        raise NotImplementedError("flip of a 0-d tensor along dims")
    found = [rules.axis(d, self.ndim) for d in rules.ints(dims, "dims")]
    if len(set(found)) < len(found):
        rules.refuse(inputs, "a dim named twice")
    _like_self(self, out, inputs)


def _check_repeat(self: np.ndarray, repeats: Sequence[int], *, out: np.ndarray,
                  **_: object) -> None:
    """At least one repeat per dim of self (whose shape is left-padded with 1s)."""
    inputs = {"self": rules.tensor(self, "self"), "repeats": repeats}
    counts = rules.ints(repeats, "repeats", 0)
    if len(counts) < self.ndim:
        rules.refuse(inputs, "fewer repeats than dims")
    padded = (1,) * (len(counts) - self.ndim) + self.shape
    rules.expect(out, [n * r for n, r in zip(padded, counts, strict=True)], self.dtype, inputs)


def _check_sort(self: np.ndarray, dim: int = -1, *, values: np.ndarray, indices: np.ndarray,
                k: int | None = None, **_: object) -> None:
    """sort (``k`` None) and topk: values in self's dtype and int64 indices, of self's shape
    with ``dim`` cut to k (0 <= k <= its size)."""
    inputs = {"self": rules.tensor(self, "self"), "dim": dim, "k": k}
    d = rules.axis(dim, self.ndim)
    shape = list(self.shape) or [1]
    if k is not None:  # (torch lets k be 0 for a 0-d self too, giving it whole)
        shape[d] = rules.integer(k, "k", 0 if self.ndim else 1, shape[d])
    shape = shape if self.ndim else []
    rules.expect(values, shape, self.dtype, inputs, "values")
    rules.expect(indices, shape, rules.INT64, inputs, "indices")


def _check_triangle(self: np.ndarray, diagonal: int = 0, *, out: np.ndarray,
                    **_: object) -> None:
    inputs = {"self": rules.tensor(self, "self"), "diagonal": diagonal}
    if self.ndim < 2:
        rules.refuse(inputs, "at least 2 dims expected")
    rules.integer(diagonal, "diagonal")
    _like_self(self, out, inputs)


KERNELS: dict[str, Kernel] = {
    "aten::gather.out": Kernel.prepared(gather, ALL, scratch=_gather_scratch,
                                        check=_check_gather),
    "aten::index_select.out": Kernel.prepared(index_select, ALL, check=_check_index_select),
    "aten::index.Tensor_out": Kernel.prepared(index, ALL, scratch=_index_scratch,
                                              check=_check_index),
    "aten::index_put.out": Kernel.prepared(index_put, ALL | INT8, inplace=True,
                                           check=_check_index_put),
    "aten::slice_scatter.out": Kernel.prepared(slice_scatter, ALL, inplace=True,
                                               check=_check_slice_scatter),
    "aten::select_scatter.out": Kernel.prepared(select_scatter, ALL, inplace=True,
                                                check=_check_select_scatter),
    "aten::constant_pad_nd.out": Kernel.prepared(constant_pad_nd, ALL, check=_check_pad),
    "aten::roll.out": Kernel.prepared(roll, ALL, check=_check_roll),
    "aten::flip.out": Kernel.prepared(flip, ALL | INT8, check=_check_flip),
    "aten::repeat.out": Kernel.prepared(repeat, ALL, check=_check_repeat),
    "aten::sort.values": Kernel.prepared(sort, ALL, check=_check_sort),
    "aten::sort.values_stable": Kernel.prepared(sort, ALL, check=_check_sort),
    "aten::topk.values": Kernel.prepared(topk, NUMERIC, check=_check_sort),
    "aten::tril.out": Kernel.prepared(_triangle(upper=False), ALL, inplace=True,
                                      check=_check_triangle),
    "aten::triu.out": Kernel.prepared(_triangle(upper=True), ALL, inplace=True,
                                      check=_check_triangle),
}
