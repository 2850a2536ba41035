"""Pass: evaluate at export every call whose inputs are all constants.

Rewrites: a node reading only constants (weights, folded values, or nothing, like ``full``) is
    run once with the runtime's own numpy kernel and its outputs become constants; a
    non-contiguous view of a constant (a weight ``permute``/``transpose``) becomes a contiguous
    constant of its own, so kernels read weights in the layout they use. Broadcast views (a zero
    stride) stay views: materialising them would only grow the bundle.
Requires: "out_variant" (kernels are looked up by out-variant name).
Ensures: "consts_folded": no node has only constant inputs; constant views are contiguous or
    broadcasts.
"""

from __future__ import annotations

import numpy as np

from runtime_py.kernels import KERNELS, numpy_mode
from toolchain.ir import Graph, Node, Ref, node_inputs


def fold_constants(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    kept = []
    for node in graph.nodes:
        if node.op in KERNELS and all(graph.is_const(n) for n in node_inputs(node)):
            _evaluate(graph, node)
        else:
            kept.append(node)
    graph.nodes = kept
    for name, t in graph.tensors.items():
        if t.view_of and graph.is_const(name) and not t.is_contiguous and 0 not in t.strides:
            data = np.ascontiguousarray(graph.const_value(name))
            t.view_of, t.strides, t.offset, t.kind, t.data = None, None, 0, "const", data
    graph.ensured.add("consts_folded")
    return graph


def _evaluate(graph: Graph, node: Node) -> None:
    outs = {k: np.empty(graph.tensors[o].shape, graph.tensors[o].dtype)
            for k, o in zip(node.out_names, node.outputs, strict=True)}
    args = {k: _value(graph, v) for k, v in node.args.items() if k not in node.out_names}
    with numpy_mode():
        KERNELS[node.op].fn(**args, **outs)
    for name, value in zip(node.outputs, outs.values(), strict=True):
        t = graph.tensors[name]
        t.kind, t.data = "const", value


def _value(graph: Graph, v: object) -> object:
    if isinstance(v, Ref):
        return graph.const_value(v.name)
    if isinstance(v, list) and v and all(isinstance(x, Ref) for x in v):
        return [graph.const_value(x.name) for x in v]
    return tuple(v) if isinstance(v, list) else v
