"""Pass: fail export if any call has no runtime kernel for its dtype or arguments, listing all.

Rewrites: nothing.
Requires: "out_variant" (kernel names are out-variant names).
Ensures: "supported": every node's op is a key of the runtime's kernel registry, the kernel
    supports the dtype of the node's first output (the selective-build key) and no argument
    value the kernel does not implement (ARGUMENT_LIMITS) is passed.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from runtime_py.kernels import KERNELS
from toolchain.errors import UnsupportedModelError
from toolchain.ir import Graph, Node

SHOWN_SOURCES = 3  # source lines listed per unsupported op

# Argument values a kernel does not implement: op -> check naming the problem (or None).
ARGUMENT_LIMITS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "aten::convolution.out": lambda a: "transposed=True" if a.get("transposed") else None,
    "nee::scaled_dot_product_attention.out":
        lambda a: f"dropout_p={a['dropout_p']}" if a.get("dropout_p") else None,
}


def _base(op: str) -> str:
    return op.partition("::")[2].partition(".")[0].strip("_")


def _similarity(a: str, b: str) -> float:
    """How related two base op names are: 0 unless one is a word-prefix of the other (``full``
    and ``full_like``, another overload of the same op) with most letters shared, or they are
    spelled nearly alike (``max_pool3d`` and ``max_pool2d``); else their spelling ratio."""
    ratio = difflib.SequenceMatcher(None, a, b).ratio()
    words_a, words_b = a.split("_"), b.split("_")
    n = min(len(words_a), len(words_b))
    return ratio if ratio >= 0.8 or (words_a[:n] == words_b[:n] and ratio >= 0.5) else 0.0


def close_ops(op: str, n: int = 4) -> list[str]:
    """Supported kernel names related to ``op`` (see ``_similarity``), closest first."""
    scored = [(_similarity(_base(op), _base(name)), name) for name in sorted(KERNELS)]
    return [name for score, name in sorted(scored, key=lambda s: -s[0]) if score > 0][:n]


def _problem(graph: Graph, node: Node) -> tuple[str, str] | None:
    """What is unsupported about this call and a note on it (the group it is reported in)."""
    if node.op not in KERNELS:
        near = close_ops(node.op)
        return node.op, f"; supported ops close to it: {', '.join(near)}" if near else ""
    dtype = graph.tensors[node.outputs[0]].dtype
    if dtype not in KERNELS[node.op].dtypes:
        return (f"{node.op} on {dtype}",
                f"; this kernel supports {', '.join(sorted(KERNELS[node.op].dtypes))}")
    limit = ARGUMENT_LIMITS.get(node.op)
    found = limit(node.args) if limit else None
    return (f"{node.op} with {found}", ", which its kernel does not implement") if found else None


def group_lines(problem: tuple[str, str], nodes: list[Node]) -> list[str]:
    """Report lines of one problem (what, note): its call count, the high-level calls it came
    from and its first source lines."""
    calls = sorted({n.call for n in nodes if n.call})
    origin = f", from {', '.join(calls)}" if calls else ""
    sources = list(dict.fromkeys(n.source or "<unknown source>" for n in nodes))
    more = len(sources) - SHOWN_SOURCES
    count = f"{len(nodes)} call{'s' if len(nodes) > 1 else ''}"
    return ([f"  {problem[0]} ({count}{origin}){problem[1]}"]
            + [f"    at {s}" for s in sources[:SHOWN_SOURCES]]
            + ([f"    ... and {more} more source line(s)"] if more > 0 else []))


def check_supported(graph: Graph) -> Graph:
    """Raise one ExportError naming every unsupported op once, with its call count, the
    high-level calls it came from and its first source lines."""
    groups: dict[tuple[str, str], list[Node]] = {}
    for node in graph.all_nodes():  # delegated calls too: their reference runs on the CPU
        problem = _problem(graph, node)
        if problem is not None:
            groups.setdefault(problem, []).append(node)
    if groups:
        lines = [line for problem, nodes in groups.items() for line in group_lines(problem, nodes)]
        raise UnsupportedModelError(
            f"{sum(map(len, groups.values()))} operator call(s) of {len(groups)} kind(s)",
            "a NEE runtime kernel for each op, dtype and argument",
            "unsupported calls:\n" + "\n".join(lines) + "\n",
            "rewrite those model lines with supported ops, or add a kernel to "
            "runtime_py/kernels",
        )
    graph.ensured.add("supported")
    return graph
