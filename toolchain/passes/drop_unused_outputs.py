"""Pass: switch multi-output calls whose extra outputs nobody reads to single-output kernels.

Rewrites: ``aten::max_pool2d_with_indices.out(..., out=Y, indices=I)`` with ``I`` unread becomes
    ``nee::max_pool2d.out(..., out=Y)``: no int64 index plane is planned or computed.
Requires: "out_variant" (matches out-variant names); runs before add_scratch, which sizes the
    workspace of the final kernel.
Ensures: no call in SINGLE_OUTPUT keeps an unread output listed there.
"""

from __future__ import annotations

from runtime_py.kernels import KERNELS
from toolchain.ir import Graph, node_inputs

# op -> (replacement op, out argument it no longer writes)
SINGLE_OUTPUT = {
    "aten::max_pool2d_with_indices.out": ("nee::max_pool2d.out", "indices"),
}


def drop_unused_outputs(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    read = {graph.storage_of(n) for node in graph.nodes for n in node_inputs(node)}
    read |= {graph.storage_of(n) for n in graph.outputs}
    for node in graph.nodes:
        if node.op not in SINGLE_OUTPUT or SINGLE_OUTPUT[node.op][0] not in KERNELS:
            continue
        replacement, dropped = SINGLE_OUTPUT[node.op]
        k = node.out_names.index(dropped)
        if node.outputs[k] not in read:
            del graph.tensors[node.outputs[k]], node.args[dropped]
            node.op = replacement
            node.out_names = node.out_names[:k] + node.out_names[k + 1:]
            node.outputs = node.outputs[:k] + node.outputs[k + 1:]
    return graph
