"""Pass: let in-place-safe elementwise calls write over an input that dies at that call.

Rewrites: when a node's kernel is ``Kernel.inplace`` and one of its tensor inputs covers a whole
    input/activation storage with the output's shape and dtype, no other argument of the node is
    a different view of that storage, and no later node (nor the graph output) reads it, the
    output becomes a contiguous alias of that storage, and views of the output are re-rooted
    onto it. The planner then sees one buffer where there were two.
Requires: "out_variant"; runs after every pass that adds, removes or reorders nodes.
Ensures: "inplace_reused": an output that is a view aliases, whole, a storage its node reads.
"""

from __future__ import annotations

from runtime_py.kernels import KERNELS
from toolchain.ir import Graph, Node, contiguous_strides, node_inputs


def reuse_inputs(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    last_read: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node_inputs(node):
            last_read[graph.storage_of(name)] = i
    for name in graph.outputs:
        last_read[graph.storage_of(name)] = len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        kernel = KERNELS.get(node.op)
        if (kernel is None or not kernel.inplace or len(node.outputs) != 1
                or graph.tensors[node.outputs[0]].view_of):  # already written in place
            continue
        donor = _donor(graph, node, i, last_read)
        if donor is not None:
            alias_output(graph, node.outputs[0], donor)
            last_read[donor] = last_read.pop(node.outputs[0], i)
    graph.ensured.add("inplace_reused")
    return graph


def _donor(graph: Graph, node: Node, step: int, last_read: dict[str, int]) -> str | None:
    out = graph.tensors[node.outputs[0]]
    inputs = node_inputs(node)
    for name in inputs:
        t, root = graph.tensors[name], graph.tensors[graph.storage_of(name)]
        other_views = any(graph.storage_of(n) == root.name and n != name for n in inputs)
        if (root.kind in ("activation", "input") and last_read.get(root.name) == step
                and not other_views
                and t.is_contiguous and t.offset == 0
                and t.nbytes == root.nbytes
                and t.shape == out.shape and t.dtype == out.dtype):
            return root.name
    return None


def alias_output(graph: Graph, out: str, donor: str) -> None:
    """Make ``out`` a whole contiguous view of the storage ``donor`` (its views re-rooted)."""
    for t in graph.tensors.values():
        if t.view_of == out:
            t.view_of = donor
    t = graph.tensors[out]
    t.view_of, t.strides, t.offset = donor, contiguous_strides(t.shape), 0
