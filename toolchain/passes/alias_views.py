"""Pass: turn view operators into zero-copy aliases of their input's storage.

Rewrites: every view op (view/reshape/permute/expand/slice/select/squeeze/split/...) is removed;
    its output tensor gets ``view_of`` (the root storage), element ``strides`` and ``offset``. A
    reshape of data that cannot be described by strides gets a contiguous ``aten::clone`` first.
    A ``clone`` or same-dtype ``_to_copy`` of data already contiguous in NEE's layout is an
    alias too (graphs are functional, and in-place reuse later checks every reader of a
    storage).
Requires: captured graph (functional ATen ops).
Ensures: "views_aliased": no view op remains; every view points at a root storage and fits in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from toolchain.ir import Graph, Node, Ref, Tensor, contiguous_strides

Layout = tuple[tuple[int, ...], int]  # (element strides, element offset)


def alias_views(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    nodes: list[Node] = []
    for node in graph.nodes:
        rule = VIEW_RULES.get(node.op)
        if rule is None:
            if not _copy_of_contiguous(graph, node):
                nodes.append(node)
                continue
            rule = _clone
        base = graph.tensors[node.args["self"].name]
        layouts = rule(base, node, [graph.tensors[o] for o in node.outputs])
        if layouts is None:  # not expressible as a view of this layout: copy first
            base = _contiguous_copy(graph, nodes, node, base)
            layouts = rule(base, node, [graph.tensors[o] for o in node.outputs])
        for out, (strides, offset) in zip(node.outputs, layouts, strict=True):
            _alias(graph.tensors[out], base, strides, offset)
    graph.nodes = nodes
    graph.ensured.add("views_aliased")
    return graph


def _alias(view: Tensor, base: Tensor, strides: tuple[int, ...], offset: int) -> None:
    view.view_of = base.view_of or base.name
    view.strides = strides
    view.offset = base.offset + offset


def _contiguous_copy(graph: Graph, nodes: list[Node], node: Node, base: Tensor) -> Tensor:
    name = f"{node.outputs[0]}_contiguous"
    graph.tensors[name] = Tensor(name, base.shape, base.dtype, "activation")
    nodes.append(Node("aten::clone.default", {"self": Ref(base.name)}, [name], node.source))
    return graph.tensors[name]


def reshape_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                    new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides viewing ``shape``/``strides`` data as ``new_shape``, or None if impossible.

    As torch's computeStride: input dims are grouped into chunks contiguous in memory; each chunk
    must be split exactly by consecutive output dims.
    """
    if not shape or math.prod(shape) == 0:
        return contiguous_strides(new_shape)
    out = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    base_stride, tensor_numel, view_numel = strides[-1], 1, 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d > 0 and (shape[d - 1] == 1 or strides[d - 1] == tensor_numel * base_stride):
            continue
        while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
            out[view_d] = view_numel * base_stride
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != tensor_numel:
            return None
        if d > 0:
            base_stride, tensor_numel, view_numel = strides[d - 1], 1, 1
    return tuple(out) if view_d == -1 else None


def _reshape(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout] | None:
    strides = reshape_strides(base.shape, base.element_strides(), outs[0].shape)
    return None if strides is None else [(strides, 0)]


def _clone(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout]:
    return [(contiguous_strides(base.shape), 0)]


def _copy_of_contiguous(graph: Graph, node: Node) -> bool:
    """A copy (COPIES) of contiguous data into the same dtype: an alias suffices."""
    if node.op not in COPIES:
        return False
    base, out = graph.tensors[node.args["self"].name], graph.tensors[node.outputs[0]]
    return base.is_contiguous and base.dtype == out.dtype


def _permute(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout]:
    strides = base.element_strides()
    dims = [d % len(strides) for d in node.args["dims"]]
    return [(tuple(strides[d] for d in dims), 0)]


def _expand(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout]:
    lead = len(outs[0].shape) - len(base.shape)
    strides = [0] * lead + [
        0 if size == 1 and want != 1 else stride
        for size, stride, want in zip(base.shape, base.element_strides(), outs[0].shape[lead:],
                                      strict=True)
    ]
    return [(tuple(strides), 0)]


def _dim(node: Node, base: Tensor, default: int = 0) -> int:
    return node.args.get("dim", default) % max(len(base.shape), 1)


def _slice(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout]:
    dim, size = _dim(node, base), base.shape[_dim(node, base)]
    start, _, step = slice(node.args.get("start"), node.args.get("end"),
                           node.args.get("step", 1)).indices(size)
    strides = list(base.element_strides())
    offset = start * strides[dim] if outs[0].shape[dim] else 0
    strides[dim] *= step
    return [(tuple(strides), offset)]


def _select(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout]:
    dim = _dim(node, base)
    strides = list(base.element_strides())
    offset = (node.args["index"] % base.shape[dim]) * strides.pop(dim)
    return [(tuple(strides), offset)]


def _split(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout]:
    dim = _dim(node, base)
    strides = base.element_strides()
    layouts, start = [], 0
    for out in outs:
        layouts.append((strides, start * strides[dim]))
        start += out.shape[dim]
    return layouts


def _unbind(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout]:
    dim = _dim(node, base)
    strides = list(base.element_strides())
    step = strides.pop(dim)
    return [(tuple(strides), i * step) for i in range(len(outs))]


def _as_strided(base: Tensor, node: Node, outs: list[Tensor]) -> list[Layout] | None:
    if base.strides is not None:
        return None  # as_strided addresses raw storage: only exact on a contiguous base
    return [(tuple(node.args["stride"]), node.args.get("storage_offset") or 0)]


ViewRule = Callable[[Tensor, Node, list[Tensor]], list[Layout] | None]

VIEW_RULES: dict[str, ViewRule] = {
    "aten::view.default": _reshape,
    "aten::_unsafe_view.default": _reshape,
    "aten::reshape.default": _reshape,
    "aten::squeeze.default": _reshape,
    "aten::squeeze.dim": _reshape,
    "aten::squeeze.dims": _reshape,
    "aten::unsqueeze.default": _reshape,
    "aten::alias.default": _reshape,
    "aten::detach.default": _reshape,
    "aten::permute.default": _permute,
    "aten::expand.default": _expand,
    "aten::slice.Tensor": _slice,
    "aten::select.int": _select,
    "aten::split.Tensor": _split,
    "aten::split_with_sizes.default": _split,
    "aten::unbind.int": _unbind,
    "aten::as_strided.default": _as_strided,
}
# Copies that become aliases of contiguous data of the same dtype (else they stay copies).
COPIES = frozenset({"aten::clone.default", "aten::_to_copy.default"})
