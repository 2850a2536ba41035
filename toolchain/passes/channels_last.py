"""Pass: store the activations between 1x1 and depthwise convolutions channels-last.

Rewrites: a depthwise convolution D (groups == channels, width dilation 1) of one 4-D float32
    image whose input X and output Y are written and read only by convolutions (as their
    input), each a 1x1 stride-1 unpadded ungrouped one or a depthwise one (an inverted residual
    block: 1x1 -> X -> D -> Y -> 1x1), where neither X nor Y is viewed or a graph output and
    D's channels-last scratch stays within its channels-first one or DEPTHWISE_BLOCK_BYTES
    (``nn.channels_last_fits``: the arena does not grow much): X and Y become (N, H, W, C),
    and their writers and readers ``nee::convolution_cl.out`` (``nee::convolution_cl_act.out``
    with a fused activation) with ``out_channels_last`` / ``input_channels_last`` set. D then copies
    rows into its einsum's phases and accumulates into Y, where the channels-first kernel
    transposes its input and its result (``runtime_py.kernels.nn.convolution_cl``); the 1x1
    convolutions multiply in the orientation of the stored layouts, at the same cost.
Requires: "out_variant", fused activations (fuse_activation), and runs before add_scratch
    (the rewritten kernels size their own scratch).
Ensures: "layouts_chosen". A program for delegates (a board's NPU or CPU delegate, whose
    partitions take the exported channels-first tensors), for a board with a scratch budget or
    with symbolic shapes is left as is; ``channels_first`` undoes the rewrite (the .tflite
    writer converts channels-first programs).
"""

from __future__ import annotations

import copy
import dataclasses

from runtime_py.kernels.nn import channels_last_fits
from toolchain.ir import Graph, Node, Ref

CHANNELS_LAST = {
    "aten::convolution.out": "nee::convolution_cl.out",
    "nee::convolution_act.out": "nee::convolution_cl_act.out",
}
FLAGS = ("input_channels_last", "out_channels_last")


def channels_last(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    graph.ensured.add("layouts_chosen")
    if not (graph.npu is None and graph.cpu_delegate is None and graph.scratch_budget is None
            and graph.static_shapes):
        return graph
    producers, readers = graph.producers(), graph.readers()
    kept = {t.view_of for t in graph.tensors.values() if t.view_of} | set(graph.outputs)
    for node in list(graph.nodes):
        if not (node.op in CHANNELS_LAST and _convertible(graph, node)
                and _depthwise(graph, node) and _fits(graph, node)):
            continue
        x, y = node.args["input"].name, node.outputs[0]
        if all(_eligible(graph, t, producers, readers, kept) for t in (x, y)):
            for name in (x, y):
                n, c, h, w = graph.tensors[name].shape
                graph.tensors[name].shape = (n, h, w, c)
                _convert(producers[name], "out_channels_last")
                for reader in readers[name]:
                    _convert(reader, "input_channels_last")
    return graph


def _eligible(graph: Graph, name: str, producers: dict[str, Node],
              readers: dict[str, list[Node]], kept: set[str]) -> bool:
    """A float32 4-D activation of its own storage, written by a convolution and read only by
    convolutions, as their input, each of them 1x1 or depthwise (``_convertible``)."""
    t, writer, reading = graph.tensors[name], producers.get(name), readers.get(name, [])
    return (t.kind == "activation" and t.dtype == "float32" and len(t.shape) == 4
            and t.view_of is None and name not in kept and writer is not None
            and bool(reading) and all(_convertible(graph, n) for n in (writer, *reading))
            and all(_reads_as_input(n, name) for n in reading))


def _fits(graph: Graph, node: Node) -> bool:
    a = node.args
    return channels_last_fits(graph.tensors[a["input"].name].shape,
                              graph.tensors[a["weight"].name].shape,
                              *(tuple(_pairs(a[k])) for k in ("stride", "padding", "dilation")),
                              a["groups"])


def _convertible(graph: Graph, node: Node) -> bool:
    """A convolution of one 4-D image, 1x1 stride-1 unpadded ungrouped or depthwise."""
    if node.op not in CHANNELS_LAST and node.op not in CHANNELS_LAST.values():
        return False
    a = node.args
    x, weight = graph.tensors[a["input"].name], graph.tensors[a["weight"].name]
    if len(x.shape) != 4 or len(weight.shape) != 4 or a.get("transposed"):
        return False
    pointwise = (a["groups"] == 1 and weight.shape[2:] == (1, 1) and _pairs(a["stride"]) == (1, 1)
                 and _pairs(a["padding"]) == (0, 0))
    depthwise = _depthwise(graph, node) and _pairs(a["dilation"])[1] == 1
    return x.shape[0] == 1 and (pointwise or depthwise)


def _depthwise(graph: Graph, node: Node) -> bool:
    """groups == input channels == output channels (a (C, 1, KH, KW) weight)."""
    a = node.args
    return a["groups"] > 1 and a["groups"] == graph.tensors[a["weight"].name].shape[0] and \
        graph.tensors[a["weight"].name].shape[1] == 1


def _pairs(value: int | list[int]) -> tuple[int, int]:
    values = [value] if isinstance(value, int) else list(value)
    return (values[0], values[-1])


def _reads_as_input(node: Node, name: str) -> bool:
    """``name`` is the node's ``input`` and nothing else it reads."""
    return node.args["input"] == Ref(name) and all(
        v != Ref(name) for key, v in node.args.items() if key != "input")


def _convert(node: Node, flag: str) -> None:
    node.op = CHANNELS_LAST.get(node.op, node.op)
    for key in FLAGS:
        node.args.setdefault(key, False)
    node.args[flag] = True


def channels_first(graph: Graph) -> Graph:
    """``graph`` with this pass undone: a copy whose channels-last tensors are (N, C, H, W)
    again and whose convolutions are the plain ones (``graph`` itself if it has none)."""
    plain = {new: old for old, new in CHANNELS_LAST.items()}
    if not any(node.op in plain for node in graph.nodes):
        return graph
    undone = copy.copy(graph)
    undone.tensors, undone.nodes = dict(graph.tensors), []
    for node in graph.nodes:
        if node.op in plain:
            if node.args["out_channels_last"]:
                t = graph.tensors[node.outputs[0]]
                n, h, w, c = t.shape
                undone.tensors[t.name] = dataclasses.replace(t, shape=(n, c, h, w))
            args = {k: v for k, v in node.args.items() if k not in FLAGS}
            node = dataclasses.replace(node, op=plain[node.op], args=args)
        undone.nodes.append(node)
    return undone
