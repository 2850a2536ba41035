"""Buffer requests from a graph: one per owned storage, live from its write to its last read.

Step ``i`` is the i-th node. Graph inputs are written before step 0; graph outputs stay live to
the end of the program; a view keeps its root storage alive. Constants are not planned: they are
used in place from the bundle's segments; nor is state, which has a memory of its own.
"""

from __future__ import annotations

from toolchain.ir import SCRATCH_ARGS, Graph, node_inputs
from toolchain.memory_plan.types import BufferRequest

ALIGNMENT = 64


def buffer_requests(graph: Graph) -> list[BufferRequest]:
    """One request per input/activation/scratch root storage, in first-write order."""
    steps = len(graph.nodes)
    start = {name: 0 for name in graph.inputs}
    end: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.outputs:
            start.setdefault(graph.storage_of(name), i)
        for key in SCRATCH_ARGS:
            if key in node.args:
                start[node.args[key].name] = i
        for name in node_inputs(node):
            end[graph.storage_of(name)] = i + 1
    for name in graph.outputs:
        end[graph.storage_of(name)] = steps
    return [
        BufferRequest(
            id=name,
            size=max(graph.tensors[name].nbytes, 1),
            start=first,
            end=max(end.get(name, first + 1), first + 1),
            alignment=ALIGNMENT,
            tier=graph.tensors[name].tier,
        )
        for name, first in start.items() if graph.tensors[name].kind != "state"
    ]
