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

from toolchain.ir import DELEGATE_CALL, SCRATCH_ARGS, Graph, Node, Ref, node_inputs
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


def rest(run: list[Node], order: list[Node]) -> list[Node]:
    """The nodes of ``order`` outside ``run``."""
    members = {id(n) for n in run}
    return [n for n in order if id(n) not in members]


def subgraph(graph: Graph, run: list[Node], order: list[Node]) -> Graph:
    """``run`` as a program of its own: its boundary's inputs and outputs."""
    edge = boundary(graph, run, rest(run, order))
    return Graph(graph.tensors, run, edge.inputs, edge.outputs,
                 int8_rounding=graph.int8_rounding)


def tflite_reason(graph: Graph, node: Node, dtypes: tuple[str, ...], device: str,
                  compiler: str, dtype_hint: str = "") -> str:
    """Why ``node`` cannot go to a ``device`` that runs ``dtypes`` feature maps and receives its
    partitions as .tflite through ``compiler`` ("" if it can): state, another dtype (with
    ``dtype_hint`` after it), no TFLite builtin, an argument TFLite has no equivalent for."""
    from toolchain.errors import ExportError
    from toolchain.serialize.tflite_program import CONVERTERS, to_tflite

    updates = graph.state_values()
    state = [n for n in [*node_inputs(node), *node.outputs]
             if graph.tensors[graph.storage_of(n)].kind == "state" or n in updates]
    if state:
        return f"persistent state {state[0]}: kept in the CPU's memory"
    other = [n for n in [*node_inputs(node), *node.outputs]
             if graph.tensors[n].dtype not in dtypes and not graph.is_const(n)]
    if other:
        t = graph.tensors[other[0]]
        return (f"{t.dtype} tensor {t.name}: the {device} runs {', '.join(dtypes)} feature maps"
                + dtype_hint)
    if node.op not in CONVERTERS:
        return f"no TFLite builtin for it (partitions reach {compiler} as .tflite)"
    try:
        to_tflite(subgraph(graph, [node], graph.nodes))
    except ExportError as e:
        return f"not expressible in TFLite: {e}"
    return ""


def delegate_call(index: int, edge: Boundary, source: str) -> Node:
    """The ``nee::delegate_call`` node running delegate ``index`` over ``edge``."""
    args: dict = {"delegate": index, "inputs": [Ref(n) for n in edge.inputs]}
    args.update({f"out{i}": Ref(o) for i, o in enumerate(edge.outputs)})
    return Node(DELEGATE_CALL, args, list(edge.outputs), source,
                out_names=[f"out{i}" for i in range(len(edge.outputs))])


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
