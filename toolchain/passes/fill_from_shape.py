"""Pass: calls whose result depends only on a shape become ``full`` of that shape.

Rewrites: ``full_like(x, v)``, ``zeros_like``/``ones_like``/``empty_like``, ``new_full``/
    ``new_zeros``/``new_ones``/``new_empty`` and ``zeros``/``ones``/``empty`` become
    ``aten::full.default(size=<output shape>, fill_value=v)`` (0 for zeros and empty, 1 for ones).
    The tensor they were made "like" is no longer read, so the call has no inputs and
    ``fold_constants`` evaluates it at export (attention masks built with ``full_like``).
Requires: captured graph (functional ops; the output tensor carries the dtype).
Ensures: no call in FILL_VALUE remains.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolchain.ir import Graph


def _arg(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda args: args[name]


def _constant(value: int) -> Callable[[dict[str, Any]], Any]:
    return lambda args: value


# op -> the fill value, from the call's arguments
FILL_VALUE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "aten::full_like.default": _arg("fill_value"),
    "aten::new_full.default": _arg("fill_value"),
    **{f"aten::{op}": _constant(0) for op in (
        "zeros_like.default", "empty_like.default", "new_zeros.default", "new_empty.default",
        "zeros.default", "empty.memory_format", "empty_strided.default")},
    **{f"aten::{op}": _constant(1) for op in (
        "ones_like.default", "new_ones.default", "ones.default")},
}


def fill_from_shape(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    for node in graph.nodes:
        if node.op in FILL_VALUE:
            shape = list(graph.tensors[node.outputs[0]].shape)
            node.op, node.args = "aten::full.default", {
                "size": shape, "fill_value": FILL_VALUE[node.op](node.args)}
    return graph
