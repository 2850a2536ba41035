"""Pass: fuse an activation into the convolution or linear layer that feeds it.

Rewrites: ``aten::convolution.out(..., out=X)`` then ``aten::relu.out(X, out=Y)`` becomes
    ``nee::convolution_act.out(..., activation="aten::relu.out", out=Y)``; the activation's own
    arguments ride along prefixed ``act_`` (``act_min_val`` for hardtanh). Same for
    ``aten::addmm.out`` -> ``nee::addmm_act.out``. The kernel applies the activation in place on
    its output, saving one pass over memory and the intermediate buffer X.
Requires: "out_variant"; the activation is a unary op in ACTIVATIONS with an in-place safe
    kernel (``Kernel.inplace``); X is read only by the activation and is not a graph output.
Ensures: no fusable producer/activation pair remains.
"""

from __future__ import annotations

from runtime_py.kernels import KERNELS
from toolchain.ir import Graph, Node, Ref

FUSED = {
    "aten::convolution.out": "nee::convolution_act.out",
    "aten::addmm.out": "nee::addmm_act.out",
}
# Unary activations (one tensor argument, ``self``) that may ride on a fused producer.
ACTIVATIONS = frozenset({
    "aten::relu.out", "aten::hardtanh.out", "aten::clamp.out", "aten::hardswish.out",
    "aten::hardsigmoid.out", "aten::sigmoid.out", "aten::tanh.out", "aten::gelu.out",
    "aten::silu.out", "aten::leaky_relu.out",
})


def fuse_activation(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    readers, producer = graph.readers(), graph.producers()
    fused: set[int] = set()
    for act in graph.nodes:
        source = act.args.get("self")
        first = producer.get(source.name) if isinstance(source, Ref) else None
        if first is not None and _fusable(graph, first, act, readers):
            _fuse(graph, first, act)
            fused.add(id(act))
    graph.nodes = [n for n in graph.nodes if id(n) not in fused]
    return graph


def _fusable(graph: Graph, first: Node, act: Node, readers: dict[str, list[Node]]) -> bool:
    x = first.outputs[0]
    kernel = KERNELS.get(act.op)
    return (
        first.op in FUSED
        and act.op in ACTIVATIONS
        and FUSED[first.op] in KERNELS
        and kernel is not None
        and kernel.inplace
        and len(act.outputs) == 1
        and readers.get(x) == [act]
        and x not in graph.outputs
        and graph.tensors[x].shape == graph.tensors[act.outputs[0]].shape
        and graph.tensors[x].dtype == graph.tensors[act.outputs[0]].dtype
    )


def _fuse(graph: Graph, first: Node, act: Node) -> None:
    del graph.tensors[first.outputs[0]]
    first.op = FUSED[first.op]
    first.args["activation"] = act.op
    for key, value in act.args.items():
        if key not in ("self", *act.out_names):
            first.args[f"act_{key}"] = value
    first.args["out"] = Ref(act.outputs[0])
    first.outputs = list(act.outputs)
