"""Pass: fail export if any op has no runtime kernel, listing all of them at once.

Rewrites: nothing.
Requires: "out_variant" (kernel names are out-variant names).
Ensures: "supported": every node's op is a key of the runtime's kernel registry.
"""

from __future__ import annotations

import difflib

from runtime_py.kernels import KERNELS
from toolchain.errors import ExportError
from toolchain.ir import Graph


def _base(op: str) -> str:
    return op.partition("::")[2].partition(".")[0].strip("_")


def close_ops(op: str, n: int = 4) -> list[str]:
    """Supported kernel names whose base op name is closest to ``op``'s."""
    by_base: dict[str, list[str]] = {}
    for name in sorted(KERNELS):
        by_base.setdefault(_base(name), []).append(name)
    near = difflib.get_close_matches(_base(op), by_base, n=n, cutoff=0.4)
    return [name for base in near for name in by_base[base]][:n]


def check_supported(graph: Graph) -> Graph:
    """Raise one ExportError naming every unsupported op, its model source line and near ops."""
    missing = [node for node in graph.nodes if node.op not in KERNELS]
    if missing:
        lines = [
            f"  {node.op} at {node.source or '<unknown source>'}; supported ops close to it: "
            f"{', '.join(close_ops(node.op)) or 'none'}"
            for node in missing
        ]
        raise ExportError(
            f"{len(missing)} operator call(s)",
            "ops the NEE runtime has kernels for",
            "unsupported ops:\n" + "\n".join(lines) + "\n",
            "rewrite those model lines with supported ops, or add a kernel to "
            "runtime_py/kernels",
        )
    graph.ensured.add("supported")
    return graph
