"""Pass: evaluate at export every call whose inputs are all constants.

Rewrites: a node reading only constants (weights, folded values, or nothing, like ``full``) is
    run once with the runtime's own numpy kernel and its outputs become constants (one whose
    elements are all equal, like a mask made with ``full``, is stored as one element broadcast
    by zero strides, so it costs nothing in the bundle), unless one of them is in
    ``graph.run_time`` (a value following a symbolic dim, like ``arange(L)``); a
    non-contiguous view of a constant (a weight ``permute``/``transpose``) becomes a contiguous
    constant of its own, so kernels read weights in the layout they use. Broadcast views (a zero
    stride) stay views: materialising them would only grow the bundle; so do views of a
    constant that is also read in its own layout (tied weights: an embedding table that is also
    the transposed LM head), which the bundle then holds once, and so do transposed (N, K)
    weights read only as ``mat2`` of products with few rows (``linalg.row_blocked``: the
    kernel runs over row blocks of that layout; not in a symbolic export's samples, whose row
    counts follow a dim). The same view made more than once (a weight
    transposed at every step of an unrolled loop) becomes one constant.
Requires: "out_variant" (kernels are looked up by out-variant name).
Ensures: "consts_folded": no node but those writing ``run_time`` values has only constant
    inputs; constant views are contiguous, broadcasts, or row-blocked weights.
"""

from __future__ import annotations

import numpy as np

from runtime_py.kernels import KERNELS, numpy_mode
from runtime_py.kernels.linalg import row_blocked
from toolchain.ir import Graph, Node, Ref, Tensor, node_inputs

_PRODUCTS = {"aten::addmm.out": "mat1", "aten::mm.out": "self"}  # op -> its left operand


def fold_constants(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    kept = []
    for node in graph.nodes:
        if (node.op in KERNELS and all(graph.is_const(n) for n in node_inputs(node))
                and graph.run_time.isdisjoint(node.outputs)):
            _evaluate(graph, node)
        else:
            kept.append(node)
    graph.nodes = kept
    readers: dict[str, list[Node]] = {}  # tensor -> the nodes reading it
    for node in graph.nodes:
        for n in node_inputs(node):
            readers.setdefault(n, []).append(node)
    direct = {graph.storage_of(n) for n in readers if graph.tensors[n].is_contiguous}
    made: dict[tuple, str] = {}  # (root, shape, strides, offset) -> the constant made of it
    for name, t in list(graph.tensors.items()):
        if (t.view_of and graph.is_const(name) and not t.is_contiguous and 0 not in t.strides
                and t.view_of not in direct
                and not _row_blocked_weight(graph, name, readers.get(name, []))):
            key = (t.view_of, t.shape, t.strides, t.offset)
            if key in made:  # the same view again (a weight transposed once per step)
                graph.rename(name, made[key])
                del graph.tensors[name]
                continue
            made[key] = name
            data = np.ascontiguousarray(graph.const_value(name))
            t.view_of, t.strides, t.offset, t.kind, t.data = None, None, 0, "const", data
    graph.ensured.add("consts_folded")
    return graph


def _row_blocked_weight(graph: Graph, name: str, readers: list[Node]) -> bool:
    """Whether ``name`` is the transpose of a whole contiguous (N, K) constant that every one of
    its ``readers`` takes as ``mat2`` of a product ``row_blocked`` wants in that layout."""
    t, root = graph.tensors[name], graph.tensors[graph.storage_of(name)]
    if (not graph.static_shapes or len(t.shape) != 2 or t.offset
            or root.shape != t.shape[::-1] or t.element_strides() != (1, t.shape[0])):
        return False
    return bool(readers) and all(
        node.op in _PRODUCTS and node.args.get("mat2") == Ref(name)
        and _blocked_rows(graph, node.args[_PRODUCTS[node.op]], t) for node in readers)


def _blocked_rows(graph: Graph, left: object, weight: Tensor) -> bool:
    rows = graph.tensors[left.name].shape[0] if isinstance(left, Ref) else None
    return isinstance(rows, int) and row_blocked(rows, *weight.shape, weight.dtype)


def _evaluate(graph: Graph, node: Node) -> None:
    outs = {k: np.empty(graph.tensors[o].shape, graph.tensors[o].dtype)
            for k, o in zip(node.out_names, node.outputs, strict=True)}
    args = {k: _value(graph, v) for k, v in node.args.items() if k not in node.out_names}
    with numpy_mode():
        KERNELS[node.op].fn(**args, **outs)
    for name, value in zip(node.outputs, outs.values(), strict=True):
        t = graph.tensors[name]
        if value.size > 1 and _uniform(value):
            root = f"{name}_value"
            graph.tensors[root] = Tensor(root, (1,), t.dtype, "const", value.reshape(-1)[:1].copy())
            for view in [t, *(v for v in graph.tensors.values() if v.view_of == name)]:
                view.view_of, view.strides, view.offset = root, (0,) * len(view.shape), 0
        else:
            t.kind, t.data = "const", value


def _uniform(value: np.ndarray) -> bool:
    """Whether every element equals the first (NaNs count as equal)."""
    first = value.reshape(-1)[0]
    same = value == first
    if value.dtype.kind == "f" and first != first:
        same = np.isnan(value)
    return bool(same.all())


def _value(graph: Graph, v: object) -> object:
    if isinstance(v, Ref):
        return graph.const_value(v.name)
    if isinstance(v, list) and any(isinstance(x, Ref) for x in v):  # None entries stay None
        return [graph.const_value(x.name) if isinstance(x, Ref) else x for x in v]
    return tuple(v) if isinstance(v, list) else v
