"""XNNPACK-class CPU delegate for Linux boards: partitions written as .tflite and run by LiteRT.

A board recipe with ``cpu_delegate = "xnnpack"`` (Raspberry Pi class) moves every run of calls
that TFLite can express (float32 or int8 feature maps, a TFLite builtin, arguments with a TFLite
equivalent; state stays on the CPU) into a partition. Each partition's payload is its .tflite
model (``model``), which the runtime's ``xnnpack`` backend hands to ai-edge-litert's interpreter
(XNNPACK by default) reading and writing the arena; its reference program runs on the numpy
kernels where that backend is missing (``cpu_fallback``). A run without a convolution or matrix
product stays on the numpy kernels: copying its inputs into LiteRT and its outputs back would
cost more than it saves.
"""

from __future__ import annotations

import numpy as np

from runtime_py.format import DELEGATE_CALL
from toolchain.ir import Delegate, Graph, Node
from toolchain.partition import (
    boundary,
    delegate_call,
    plan_workspace,
    rest,
    runs,
    schedule,
    subgraph,
    tflite_reason,
)
from toolchain.serialize.tflite_program import to_tflite

BACKEND = "xnnpack"
TARGET = "litert-xnnpack"
FEATURE_DTYPES = ("float32", "int8")
HEAVY = ("conv", "linear", "mm")  # in an op's name: worth a partition (convolution, addmm...)


def delegate(graph: Graph) -> Graph:
    """Move every run of calls TFLite can express into partitions (module docstring)."""
    for node in graph.nodes:
        if node.op != DELEGATE_CALL:
            node.cpu_reason = node.cpu_reason or tflite_reason(
                graph, node, FEATURE_DTYPES, "XNNPACK delegate", "LiteRT")
    order = schedule(graph, _accepted)
    calls, delegates = [], list(graph.delegates)
    found = {id(run[0]): run for run in runs(order, _accepted) if _worth_it(run)}
    inside = {id(n) for run in found.values() for n in run}
    for node in order:
        if id(node) in found:
            calls.append(_partition(graph, found[id(node)], order, delegates))
        elif id(node) not in inside:
            calls.append(node)
    graph.nodes, graph.delegates = calls, delegates
    return graph


def _accepted(node: Node) -> bool:
    return node.op != DELEGATE_CALL and not node.cpu_reason


def _worth_it(run: list[Node]) -> bool:
    """Whether ``run`` has a convolution or matrix product (else it keeps a reason, stays)."""
    if any(part in node.op.split("::")[-1].split(".")[0] for node in run for part in HEAVY):
        return True
    for node in run:
        node.cpu_reason = (f"in a run of {len(run)} call(s) without a convolution or matrix "
                           "product: cheaper on the numpy kernels than through LiteRT's copies")
    return False


def _partition(graph: Graph, run: list[Node], order: list[Node],
               delegates: list[Delegate]) -> Node:
    """Write ``run`` as .tflite, record its Delegate and return the node calling it."""
    model = to_tflite(subgraph(graph, run, order), f"NEE {BACKEND} partition {len(delegates)}")
    edge = boundary(graph, run, rest(run, order))
    offsets, size = plan_workspace(graph, run, edge.internal)
    index = len(delegates)
    delegates.append(Delegate(
        BACKEND, TARGET, run, edge.inputs, edge.outputs,
        specs={"format": "tflite", "int8_rounding": graph.int8_rounding},
        payload={"model": np.frombuffer(model, np.uint8)},
        workspace=offsets, workspace_size=size))
    return delegate_call(index, edge, run[0].source)
