"""Pass: fuse an activation into the convolution or linear layer that feeds it.

Rewrites: ``aten::convolution.out(..., out=X)`` then ``aten::relu.out(X, out=Y)`` becomes
    ``nee::convolution_act.out(..., activation="aten::relu.out", out=Y)``; the activation's own
    arguments ride along prefixed ``act_`` (``act_min_val`` for hardtanh). Same for
    ``aten::addmm.out`` -> ``nee::addmm_act.out`` and ``aten::mm.out`` (a linear layer without
    bias) -> ``nee::mm_act.out``. The kernel applies the activation in place on
    its output, saving one pass over memory and the intermediate buffer X.
    X may reach the activation through a whole contiguous reshape (a linear layer on 3-D input
    is a 2-D addmm viewed back as 3-D): the fused kernel writes Y viewed in X's shape.
Requires: "out_variant"; the activation is a unary op in ACTIVATIONS with an in-place safe
    kernel (``Kernel.inplace``); X (and any view of it) is read only by the activation and is
    not a graph output.
Ensures: no fusable producer/activation pair remains.
"""

from __future__ import annotations

from runtime_py.kernels import KERNELS
from toolchain.ir import Graph, Node, Ref

FUSED = {
    "aten::convolution.out": "nee::convolution_act.out",
    "aten::addmm.out": "nee::addmm_act.out",
    "aten::mm.out": "nee::mm_act.out",
}
# Unary activations (one tensor argument, ``self``) that may ride on a fused producer.
ACTIVATIONS = frozenset({
    "aten::relu.out", "aten::hardtanh.out", "aten::clamp.out", "aten::hardswish.out",
    "aten::hardsigmoid.out", "aten::sigmoid.out", "aten::tanh.out", "aten::gelu.out",
    "aten::silu.out", "aten::leaky_relu.out",
})


def fuse_activation(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    producer = graph.producers()
    readers: dict[str, list[Node]] = {}  # by storage: the readers of a tensor and its views
    for name, nodes in graph.readers().items():
        readers.setdefault(graph.storage_of(name), []).extend(nodes)
    outputs = {graph.storage_of(name) for name in graph.outputs}
    fused: set[int] = set()
    for act in graph.nodes:
        source = act.args.get("self")
        first = producer.get(graph.storage_of(source.name)) if isinstance(source, Ref) else None
        if first is not None and _fusable(graph, first, act, readers, outputs):
            _fuse(graph, first, act)
            fused.add(id(act))
    graph.nodes = [n for n in graph.nodes if id(n) not in fused]
    return graph


def _fusable(graph: Graph, first: Node, act: Node, readers: dict[str, list[Node]],
             outputs: set[str]) -> bool:
    x, y = graph.tensors[first.outputs[0]], graph.tensors[act.outputs[0]]
    seen = graph.tensors[act.args["self"].name]  # x itself or a whole reshape of it
    kernel = KERNELS.get(act.op)
    return (
        first.op in FUSED
        and act.op in ACTIVATIONS
        and FUSED[first.op] in KERNELS
        and kernel is not None
        and kernel.inplace
        and len(act.outputs) == 1
        and x.view_of is None
        and (seen is x or (seen.is_contiguous and seen.offset == 0 and seen.nbytes == x.nbytes))
        and readers.get(x.name) == [act]
        and x.name not in outputs
        and x.nbytes == y.nbytes and x.dtype == y.dtype
    )


def _fuse(graph: Graph, first: Node, act: Node) -> None:
    x = first.outputs[0]
    for name in [name for name, t in graph.tensors.items() if name == x or t.view_of == x]:
        del graph.tensors[name]
    first.op = FUSED[first.op]
    first.args["activation"] = act.op
    for key, value in act.args.items():
        if key not in ("self", *act.out_names):
            first.args[f"act_{key}"] = value
    first.args["out"] = Ref(act.outputs[0])
    first.outputs = list(act.outputs)
