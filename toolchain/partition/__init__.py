"""Partitioning: cluster the calls a delegate accepts into runs it can take as one call.

``schedule`` reorders the nodes topologically, continuing on the side (accepted or not) of the
node it placed last while it can, so accepted calls that are independent of the others end up
together. ``runs`` cuts the order into maximal runs of accepted calls. A contiguous run of a
topological order is free of cycles when replaced by one call: a path leaving the run and
coming back would need a node placed between two of its members. ``Boundary`` names what a run
reads from and returns to the rest of the program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from toolchain.ir import SCRATCH_ARGS, Graph, Node, node_inputs
from toolchain.memory_plan import plan_memory
from toolchain.memory_plan.lifetimes import buffer_requests

Accept = Callable[[Node], bool]


def schedule(graph: Graph, accepted: Accept) -> list[Node]:
    """A topological order of ``graph.nodes`` that switches sides as rarely as it greedily can
    (ties keep the original order)."""
    writer = {graph.storage_of(o): i for i, n in enumerate(graph.nodes) for o in n.outputs}
    needs = [{writer[r] for r in map(graph.storage_of, node_inputs(n)) if r in writer} - {i}
             for i, n in enumerate(graph.nodes)]
    users: list[list[int]] = [[] for _ in graph.nodes]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    waiting = [len(d) for d in needs]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    side = None
    while ready:
        pick = next((i for i in ready if accepted(graph.nodes[i]) == side), ready[0])
        ready.remove(pick)
        order.append(pick)
        side = accepted(graph.nodes[pick])
        for u in users[pick]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
        ready.sort()
    return [graph.nodes[i] for i in order]


def runs(nodes: list[Node], accepted: Accept) -> list[list[Node]]:
    """The maximal runs of consecutive accepted nodes."""
    found: list[list[Node]] = []
    for i, node in enumerate(nodes):
        if accepted(node):
            if i and accepted(nodes[i - 1]):
                found[-1].append(node)
            else:
                found.append([node])
    return found


@dataclass(frozen=True)
class Boundary:
    """A run's inputs (storages it reads that the rest of the program writes or holds), outputs
    (storages it writes that the rest reads or returns) and internal storages (everything else
    it writes, scratch included)."""

    inputs: list[str]
    outputs: list[str]
    internal: list[str]


def boundary(graph: Graph, run: list[Node], rest: list[Node]) -> Boundary:
    """The boundary of ``run`` inside a program whose other nodes are ``rest``."""
    written = [graph.storage_of(o) for n in run for o in n.outputs]
    written += [n.args[key].name for n in run for key in SCRATCH_ARGS if key in n.args]
    inside = set(written)
    inputs = [graph.storage_of(name) for n in run for name in node_inputs(n)
              if graph.storage_of(name) not in inside and not graph.is_const(name)]
    read_outside = {graph.storage_of(name) for n in rest for name in node_inputs(n)}
    read_outside |= {graph.storage_of(name) for name in graph.outputs}
    outputs = [r for r in written if r in read_outside]
    internal = [r for r in written if r not in read_outside]
    return Boundary(list(dict.fromkeys(inputs)), outputs, internal)


def plan_workspace(graph: Graph, run: list[Node], internal: list[str]) -> tuple[dict[str, int],
                                                                                int]:
    """Byte offsets of a run's internal storages in a memory of their own, and its size (planned
    like the arena, over the run's own steps)."""
    local = Graph(graph.tensors, run, [], [])
    keep = set(internal)
    requests = [r for r in buffer_requests(local) if r.id in keep]
    if not requests:
        return {}, 0
    plan = plan_memory(requests, planner="greedy")
    return {p.id: p.offset for p in plan.placements}, plan.arenas[0].size
