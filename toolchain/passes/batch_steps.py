"""Pass: one linear layer over a whole sequence instead of one per time step.

Rewrites: ``addmm(b, select(X, dim, i), W)`` (or ``mm``) for every index i along ``dim`` of a
    float32 3-D X (not its last dim), with one bias, one W (the same tensor, or transposes of
    the same weight) and one alpha/beta, become one ``addmm(b, reshape(X, [-1, D]), W)``
    viewed back as X's shape with N features, and each step's result a ``select`` of it at i.
    The same for ``nee::linear_int8`` over an int8 X whose steps have equal arguments (bias
    and weight constants compared by value; the quantizer gives a recurrent module's steps
    one set of parameters), the batched result carrying the steps' parameters.
    This is the input projection of a recurrent cell written per step (``nn.GRU`` and
    ``nn.LSTM`` decompose to it already): one BLAS call for the sequence, not one per step.
    The calls and the transposes left unread are removed.
Requires: a functional graph (before alias_views: the reshape, view and selects become aliases).
Ensures: no such family of per-step products remains.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from toolchain.ir import Graph, Node, Ref, Tensor, node_inputs

LINEAR = ("aten::addmm.default", "aten::mm.default")
INT8_LINEAR = "nee::linear_int8.out"
# the product ops, their (left, right) operand arguments and the dtype of X they batch
PRODUCTS = {LINEAR[0]: ("mat1", "mat2", "float32"), LINEAR[1]: ("self", "mat2", "float32"),
            INT8_LINEAR: ("input", "weight", "int8")}
SELECT, PERMUTE = "aten::select.int", "aten::permute.default"


def batch_steps(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    producer = graph.producers()
    families: dict[tuple, list[tuple[int, Node]]] = {}
    for node in graph.nodes:
        key = _family(graph, node, producer)
        if key is not None:
            select = producer[node.args[_operands(node)[0]].name]
            families.setdefault(key, []).append((select.args["index"] % _size(graph, key), node))
    orphans: list[Node] = []
    for key, steps in families.items():
        if sorted(i for i, _ in steps) == list(range(_size(graph, key))) and len(steps) > 1:
            orphans += [producer[n.args[a].name] for _, n in steps for a in _operands(n)
                        if n.args[a].name in producer]
            _batch(graph, key, steps)
    _drop_unread(graph, orphans)
    return graph


def _operands(node: Node) -> tuple[str, str]:
    """The argument names of a product's left and right matrices."""
    return PRODUCTS[node.op][:2]


def _family(graph: Graph, node: Node, producer: dict[str, Node]) -> tuple | None:
    """(op, X, dim, weight, other args) of a per-step product, None if ``node`` is not one."""
    if node.op not in PRODUCTS:
        return None
    left, right, dtype = PRODUCTS[node.op]
    step = producer.get(node.args[left].name)
    if step is None or step.op != SELECT:
        return None
    x = graph.tensors[step.args["self"].name]
    dim = step.args["dim"] % max(len(x.shape), 1)
    if len(x.shape) != 3 or x.dtype != dtype or dim == 2:
        return None
    weight = _value(graph, node.args[right])
    source = producer.get(node.args[right].name)
    if source is not None and source.op == PERMUTE and list(source.args["dims"]) == [1, 0]:
        weight = ("transposed", source.args["self"].name)
    rest = tuple(sorted((k, _value(graph, v)) for k, v in node.args.items()
                        if k not in (left, right, "out")))
    return node.op, x.name, dim, weight, rest


def _value(graph: Graph, arg: object) -> object:
    """A hashable key of an argument: a constant's dtype, shape and digest, a tensor's name."""
    if not isinstance(arg, Ref):
        return tuple(arg) if isinstance(arg, list) else arg
    if graph.is_const(arg.name):
        data = np.ascontiguousarray(graph.const_value(arg.name))
        return data.dtype.str, data.shape, hashlib.sha256(data).digest()
    return arg.name


def _size(graph: Graph, key: tuple) -> int:
    return graph.tensors[key[1]].shape[key[2]]


def _batch(graph: Graph, key: tuple, steps: list[tuple[int, Node]]) -> None:
    """One product over all of X before the first step; each step selects its rows."""
    op, x_name, dim, _, _ = key
    members = {id(n) for _, n in steps}
    at, first = next((i, n) for i, n in enumerate(graph.nodes) if id(n) in members)
    left = _operands(first)[0]
    x = graph.tensors[x_name]
    features = graph.tensors[first.outputs[0]].shape[-1]
    stem = first.outputs[0]
    flat, product, shaped = (f"{stem}_{s}" for s in ("steps_in", "steps", "steps_out"))
    out_quant = graph.tensors[first.outputs[0]].quant
    for name, shape, quant in ((flat, (math.prod(x.shape[:2]), x.shape[2]), x.quant),
                               (product, (math.prod(x.shape[:2]), features), out_quant),
                               (shaped, (*x.shape[:2], features), out_quant)):
        graph.tensors[name] = Tensor(name, shape, x.dtype, "activation", quant=quant)
    args = {**first.args, left: Ref(flat), **({"out": Ref(product)} if "out" in first.args else {})}
    new = [Node("aten::reshape.default", {"self": Ref(x_name), "shape": [-1, x.shape[2]]},
                [flat], first.source),
           Node(op, args, [product], first.source, first.call, out_names=first.out_names),
           Node("aten::view.default", {"self": Ref(product), "size": [*x.shape[:2], features]},
                [shaped], first.source)]
    graph.nodes[at:at] = new
    for index, node in steps:
        node.op, node.args = SELECT, {"self": Ref(shaped), "dim": dim, "index": index}
        node.out_names = []


def _drop_unread(graph: Graph, candidates: list[Node]) -> None:
    """Remove the ``candidates`` (the selects and transposes the rewritten steps read) that
    nothing reads any more."""
    read = {n for node in graph.nodes for n in node_inputs(node)} | set(graph.outputs)
    dead = {id(n) for n in candidates if not read.intersection(n.outputs)}
    for node in candidates:
        if id(node) in dead:
            for out in node.outputs:
                graph.tensors.pop(out, None)
    graph.nodes = [n for n in graph.nodes if id(n) not in dead]
