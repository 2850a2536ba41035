"""Pass: fail export if any call has no runtime kernel for its dtype, listing all at once.

Rewrites: nothing.
Requires: "out_variant" (kernel names are out-variant names).
Ensures: "supported": every node's op is a key of the runtime's kernel registry and the kernel
    supports the dtype of the node's first output (the selective-build key).
"""

from __future__ import annotations

import difflib

from runtime_py.kernels import KERNELS
from toolchain.errors import ExportError
from toolchain.ir import Graph, Node


def _base(op: str) -> str:
    return op.partition("::")[2].partition(".")[0].strip("_")


def close_ops(op: str, n: int = 4) -> list[str]:
    """Supported kernel names whose base op name is closest to ``op``'s."""
    by_base: dict[str, list[str]] = {}
    for name in sorted(KERNELS):
        by_base.setdefault(_base(name), []).append(name)
    near = difflib.get_close_matches(_base(op), by_base, n=n, cutoff=0.4)
    return [name for base in near for name in by_base[base]][:n]


def _problem(graph: Graph, node: Node) -> str | None:
    where = f"at {node.source or '<unknown source>'}"
    if node.op not in KERNELS:
        near = ", ".join(close_ops(node.op)) or "none"
        return f"  {node.op} {where}; supported ops close to it: {near}"
    dtype = graph.tensors[node.outputs[0]].dtype
    if dtype not in KERNELS[node.op].dtypes:
        return (f"  {node.op} on {dtype} {where}; this kernel supports "
                f"{', '.join(sorted(KERNELS[node.op].dtypes))}")
    return None


def check_supported(graph: Graph) -> Graph:
    """Raise one ExportError naming every unsupported call, its model source line and near ops."""
    lines = [p for node in graph.nodes if (p := _problem(graph, node)) is not None]
    if lines:
        raise ExportError(
            f"{len(lines)} operator call(s)",
            "a NEE runtime kernel for each op and dtype",
            "unsupported calls:\n" + "\n".join(lines) + "\n",
            "rewrite those model lines with supported ops, or add a kernel to "
            "runtime_py/kernels",
        )
    graph.ensured.add("supported")
    return graph
