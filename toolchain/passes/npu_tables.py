"""Pass: on a board with an NPU or an XNNPACK CPU delegate, write the int8 tables their
compilers have no operator for as int8 operators they have.

Rewrites: nothing without ``Graph.npu`` or ``Graph.cpu_delegate`` "xnnpack". With one, each
    ``nee::lookup_int8.out`` whose table is hardsigmoid's (TFLite, and so Vela and LiteRT, has
    no HARD_SIGMOID: the table would stay on the CPU and split the partition) becomes
    relu6(x + 3) / 6 in two calls TFLite has: ``add_int8`` of a constant 3 into [0, 6] at scale
    6/255, then ``mul_int8`` by a constant 1/6 into the table's output parameters, requantized
    by the program's rounding. The result may differ from the table's by an LSB; other
    programs keep the table.
Requires: "out_variant" (it writes out-variant calls); runs before add_scratch.
Ensures: "npu_tables": with an NPU or XNNPACK set, no hardsigmoid table is left.
"""

from __future__ import annotations

import numpy as np

from toolchain.ir import Graph, Node, Quant, Ref, Tensor
from toolchain.quantize import fixed_point
from toolchain.quantize.fixed_point import per_tensor
from toolchain.quantize.options import ROUNDINGS

PLUS3 = fixed_point.Quant(6 / 255, -128)  # relu6(x + 3) over the whole int8 range
THREE = fixed_point.Quant(3 / 127, 0)  # the constant 3 as int8 127
SIXTH = fixed_point.Quant(1 / 6 / 127, 0)  # the constant 1/6 as int8 127


def npu_tables(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    if graph.npu is not None or graph.cpu_delegate == "xnnpack":
        graph.nodes = [new for node in graph.nodes for new in _rewritten(graph, node)]
    graph.ensured.add("npu_tables")
    return graph


def _rewritten(graph: Graph, node: Node) -> list[Node]:
    if node.op != "nee::lookup_int8.out":
        return [node]
    x, out = node.args["self"].name, node.outputs[0]
    q_in, q_out = (per_tensor(graph.tensors[n].quant) for n in (x, out))
    table = graph.const_value(node.args["table"].name)
    if not np.array_equal(table, fixed_point.hardsigmoid_table(q_in, q_out)):
        return [node]
    scheme = ROUNDINGS[graph.int8_rounding][2]
    plus3 = _tensor(graph, f"{out}_plus3", graph.tensors[x].shape, PLUS3)
    add = Node("nee::add_int8.out", {
        "self": Ref(x), "other": Ref(_tensor(graph, f"{out}_three", (1,), THREE, 127)),
        **fixed_point.add_requant(q_in, THREE, PLUS3, "RELU6", scheme), "out": Ref(plus3)},
        [plus3], node.source, node.call, ["out"])
    mul = Node("nee::mul_int8.out", {
        "self": Ref(plus3), "other": Ref(_tensor(graph, f"{out}_sixth", (1,), SIXTH, 127)),
        **fixed_point.mul_requant(PLUS3, SIXTH, q_out, scheme=scheme), "out": Ref(out)},
        [out], node.source, node.call, ["out"])
    return [add, mul]


def _tensor(graph: Graph, name: str, shape: tuple[int, ...], quant: fixed_point.Quant,
            value: int | None = None) -> str:
    """A new int8 activation, or a constant filled with ``value``."""
    data = None if value is None else np.full(shape, value, np.int8)
    graph.tensors[name] = Tensor(name, tuple(shape), "int8", "activation" if data is None
                                 else "const", data,
                                 quant=Quant((fixed_point.f32(quant.scale),),
                                             (quant.zero_point,)))
    return name
