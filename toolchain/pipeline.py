"""The export pipeline: capture -> passes -> plan -> kernel list -> serialize.

``PASSES`` is the one literal, ordered list of graph passes. Ordering notes:
- alias_views first: view ops have no kernels; later passes only see compute ops and aliases.
- to_out_variant after alias_views: view ops have no out overloads.
- check_supported last: it checks the final kernel names against the runtime registry.
"""

from __future__ import annotations

from collections.abc import Callable

from toolchain.ir import Graph
from toolchain.passes.alias_views import alias_views
from toolchain.passes.check_supported import check_supported
from toolchain.passes.to_out_variant import to_out_variant
from toolchain.verify import verify

Pass = Callable[[Graph], Graph]

PASSES: list[Pass] = [
    alias_views,
    to_out_variant,
    check_supported,
]


def run_passes(graph: Graph, *, verify_each: bool = True) -> Graph:
    """Run PASSES in order, verifying the graph after each one when ``verify_each``."""
    if verify_each:
        verify(graph, after="capture")
    for p in PASSES:
        graph = p(graph)
        if verify_each:
            verify(graph, after=p.__name__)
    return graph
