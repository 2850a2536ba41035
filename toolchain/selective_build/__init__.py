"""Selective build: the exact (operator, dtype) list a bundle needs from the runtime."""

from __future__ import annotations

from toolchain.ir import Graph


def kernel_list(graph: Graph) -> list[tuple[str, str]]:
    """Sorted unique (canonical op name, dtype of its first output) pairs used by ``graph``,
    delegated partitions' reference programs included (the CPU runs them on a host)."""
    return sorted({(node.op, graph.tensors[node.outputs[0]].dtype)
                   for node in graph.all_nodes()})
