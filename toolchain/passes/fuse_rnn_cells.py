"""Pass: fuse a GRU or LSTM step's gate math into one call (runtime_py/kernels/recurrent.py).

Rewrites: float32 calls (operands of add and mul in either order), in two patterns.
    GRU: from the chunks i_r, i_z, i_n of the input projection, h_r, h_z, h_n of the hidden
    projection and the state h: r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z),
    n = tanh(i_n + r * h_n), h' = (1 - z) * n + z * h (a hand-written cell) or
    (h - n) * z + n (``nn.GRU``'s decomposition) become
    ``nee::gru_cell.out(input_gates, hidden_gates, hidden, out=h')``;
    LSTM: from the chunks i, f, g, o of the summed projections and the cell state c:
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c') become
    ``nee::lstm_cell.out(gates, cell, out=h', cell_out=c')``.
    The fused call takes the place of the step's last call. Gates are a new (..., 3H) or
    (..., 4H) view of the tensor whose adjacent chunks (in torch's order) they were, or a new
    constant concatenating constant chunks (a GRU's first step: the folded projection of a zero
    state).
Requires: "consts_folded" (a first step's constant chunks are final); out-variant calls.
Ensures: no fused step's intermediates remain; a step whose intermediates are read outside
    it or are graph outputs, or whose c' is read before h' is written, is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from toolchain.ir import Graph, Node, Ref, Tensor

ADD, SUB, MUL = "aten::add.out", "aten::sub.out", "aten::mul.out"
SIGMOID, TANH = "aten::sigmoid.out", "aten::tanh.out"
Producers = dict[str, Node]


@dataclass
class _Step:
    """A matched step: its calls (the last one writes h'), chunk tuples by argument name, other
    tensor arguments, and the outputs besides h' (by out name) that the fused call writes."""

    op: str
    nodes: list[Node]
    chunks: dict[str, tuple[str, ...]]
    args: dict[str, str]
    outputs: dict[str, str]


def fuse_rnn_cells(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    producer = graph.producers()
    readers: dict[str, set[int]] = {}
    for name, nodes in graph.readers().items():
        readers.setdefault(graph.storage_of(name), set()).update(map(id, nodes))
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    # tensors no intermediate may be: graph outputs and storages that have views
    exposed = {graph.storage_of(name) for name in graph.outputs}
    exposed.update(t.view_of for t in graph.tensors.values() if t.view_of)
    replaced: dict[int, Node | None] = {}
    for node in graph.nodes:
        step = next((s for match in MATCHERS if (s := match(graph, node, producer))), None)
        if step is None or not _private(step, readers, exposed, position):
            continue
        replaced.update(dict.fromkeys(map(id, step.nodes)))
        replaced[id(node)] = _fused(graph, step)
    graph.nodes = [replaced.get(id(n), n) for n in graph.nodes if replaced.get(id(n), n)]
    return graph


def _fused(graph: Graph, step: _Step) -> Node:
    """The fused call; the step's intermediates are deleted."""
    last, shape = step.nodes[-1], graph.tensors[step.nodes[-1].outputs[0]].shape
    kept = {last.outputs[0], *step.outputs.values()}
    for node in step.nodes:
        if node.outputs[0] not in kept:
            del graph.tensors[node.outputs[0]]
    args = {key: Ref(_gates(graph, chunks, shape)) for key, chunks in step.chunks.items()}
    args.update({key: Ref(name) for key, name in step.args.items()})
    outs = {"out": last.outputs[0], **step.outputs}
    args.update({key: Ref(name) for key, name in outs.items()})
    return Node(step.op, args, list(outs.values()), last.source, last.call, list(outs))


def _gru(graph: Graph, final: Node, producer: Producers) -> _Step | None:
    """The GRU step whose new state ``final`` writes, if it is one (module docstring)."""
    if final.op != ADD or not _float(graph, final.outputs[0]):
        return None
    for first, second in _pairs(final):
        for z, n, h, tail in _gru_outer(graph, first, second, producer):
            step = _gru_gates(graph, z, n, h, producer)
            if step is not None and graph.tensors[h].shape == graph.tensors[
                    final.outputs[0]].shape:
                step.nodes += [*tail, final]
                return step
    return None


def _gru_outer(graph: Graph, first: str, second: str, producer: Producers
               ) -> Iterator[tuple[str, str, str, list[Node]]]:
    """(z, n, h, the calls) for h' = first + second as (1 - z) n + z h or (h - n) z + n."""
    left, right = _node(graph, first, MUL, producer), _node(graph, second, MUL, producer)
    if left is not None and right is not None:  # (1 - z) * n + z * h
        for one_minus, n in _pairs(left):
            sub = _node(graph, one_minus, SUB, producer)
            z = _ref(sub.args.get("other")) if sub is not None else None
            if z is None or sub.args.get("self") != 1:
                continue
            for z2, h in _pairs(right):
                if z2 == z:
                    yield z, n, h, [sub, left, right]
    if left is not None:  # (h - n) * z + n
        for diff, z in _pairs(left):
            sub = _node(graph, diff, SUB, producer)
            if sub is not None and _ref(sub.args.get("other")) == second and _ref(
                    sub.args.get("self")) is not None:
                yield z, second, sub.args["self"].name, [sub, left]


def _gru_gates(graph: Graph, z: str, n: str, h: str, producer: Producers) -> _Step | None:
    """z = sigmoid(i_z + h_z), n = tanh(i_n + r * h_n), r = sigmoid(i_r + h_r), with both
    chunk triples stackable."""
    z_act, n_act = _node(graph, z, SIGMOID, producer), _node(graph, n, TANH, producer)
    z_sum = _node(graph, _ref(z_act.args["self"]), ADD, producer) if z_act else None
    n_sum = _node(graph, _ref(n_act.args["self"]), ADD, producer) if n_act else None
    for i_n, product in _pairs(n_sum):
        gated = _node(graph, product, MUL, producer)
        for r, h_n in _pairs(gated):
            r_act = _node(graph, r, SIGMOID, producer)
            r_sum = _node(graph, _ref(r_act.args["self"]), ADD, producer) if r_act else None
            for (i_r, h_r), (i_z, h_z) in ((a, b) for a in _pairs(r_sum) for b in _pairs(z_sum)):
                inputs, hidden = (i_r, i_z, i_n), (h_r, h_z, h_n)
                if _stackable(graph, inputs, h) and _stackable(graph, hidden, h):
                    return _Step("nee::gru_cell.out",
                                 [r_sum, r_act, z_sum, z_act, gated, n_sum, n_act],
                                 {"input_gates": inputs, "hidden_gates": hidden},
                                 {"hidden": h}, {})
    return None


def _lstm(graph: Graph, final: Node, producer: Producers) -> _Step | None:
    """The LSTM step whose h' ``final`` writes, if it is one (module docstring)."""
    if final.op != MUL or not _float(graph, final.outputs[0]):
        return None
    for o, squashed in _pairs(final):
        o_act, c_act = _node(graph, o, SIGMOID, producer), _node(graph, squashed, TANH, producer)
        new_cell = _ref(c_act.args["self"]) if c_act and o_act else None
        total = _node(graph, new_cell, ADD, producer)
        for kept, added in _pairs(total):
            forget, inject = _node(graph, kept, MUL, producer), _node(graph, added, MUL, producer)
            for (f, c), (i, g) in ((a, b) for a in _pairs(forget) for b in _pairs(inject)):
                acts = [_node(graph, i, SIGMOID, producer), _node(graph, f, SIGMOID, producer),
                        _node(graph, g, TANH, producer), o_act]
                chunks = tuple(_ref(a.args["self"]) for a in acts if a is not None)
                if (len(chunks) == 4 and _adjacent(graph, chunks)
                        and graph.tensors[c].shape == graph.tensors[final.outputs[0]].shape
                        and _squeezed(graph.tensors[chunks[0]].shape) == _squeezed(
                            graph.tensors[c].shape)):
                    return _Step("nee::lstm_cell.out",
                                 [*acts, forget, inject, total, c_act, final],
                                 {"gates": chunks}, {"cell": c}, {"cell_out": new_cell})
    return None


MATCHERS: tuple[Callable[[Graph, Node, Producers], _Step | None], ...] = (_gru, _lstm)


def _float(graph: Graph, name: str) -> bool:
    return graph.tensors[name].dtype == "float32" and bool(graph.tensors[name].shape)


def _ref(value: object) -> str | None:
    return value.name if isinstance(value, Ref) else None


def _pairs(node: Node | None) -> list[tuple[str, str]]:
    """A binary call's tensor operands in both orders (one order for sub); none if there is no
    call, an operand is not a tensor or alpha is not 1."""
    if node is None:
        return []
    a, b = _ref(node.args.get("self")), _ref(node.args.get("other"))
    if a is None or b is None or node.args.get("alpha", 1) != 1:
        return []
    return [(a, b)] if node.op == SUB else [(a, b), (b, a)]


def _node(graph: Graph, name: str | None, op: str, producer: Producers) -> Node | None:
    """The ``op`` call writing float32 tensor ``name`` itself (not a view), if that wrote it."""
    node = producer.get(name) if name is not None else None
    if node is None or node.op != op or graph.tensors[name].view_of is not None:
        return None
    return node if graph.tensors[name].dtype == "float32" else None


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without its leading 1s (the last dim kept)."""
    lead = next((i for i, n in enumerate(shape[:-1]) if n != 1), len(shape) - 1)
    return shape[lead:]


def _stackable(graph: Graph, chunks: tuple[str, ...], like: str) -> bool:
    """Whether float32 tensors shaped as ``like`` (up to leading 1s) are adjacent chunks of one
    storage or are all constants."""
    if any(_squeezed(graph.tensors[c].shape) != _squeezed(graph.tensors[like].shape)
           or graph.tensors[c].dtype != "float32" for c in chunks):
        return False
    return _adjacent(graph, chunks) or all(graph.is_const(c) for c in chunks)


def _adjacent(graph: Graph, chunks: tuple[str, ...]) -> bool:
    """Whether (..., H) views of one storage with equal shapes and strides (the last 1) start H
    elements apart, in order."""
    t = [graph.tensors[c] for c in chunks]
    h, strides = t[0].shape[-1], t[0].element_strides()
    return (t[0].view_of is not None and strides[-1] == 1
            and all(c.view_of == t[0].view_of and c.shape == t[0].shape
                    and c.element_strides() == strides and c.offset == t[0].offset + k * h
                    for k, c in enumerate(t)))


def _private(step: _Step, readers: dict[str, set[int]], exposed: set[str],
             position: dict[int, int]) -> bool:
    """Whether the step's intermediates are read by its own calls only and are not
    ``exposed`` (outputs, viewed), with its other outputs (c') read outside it only after its
    last call."""
    inside, last = set(map(id, step.nodes)), position[id(step.nodes[-1])]
    extra = set(step.outputs.values())
    for node in step.nodes[:-1]:
        name = node.outputs[0]
        if name in extra:
            if any(position[r] < last for r in readers.get(name, set()) - inside):
                return False
        elif name in exposed or not readers.get(name, set()) <= inside:
            return False
    return True


def _gates(graph: Graph, chunks: tuple[str, ...], like: tuple[int, ...]) -> str:
    """A tensor (..., k H) in the leading shape ``like`` holding the chunks side by side: a view
    of their storage, or a new constant."""
    first = graph.tensors[chunks[0]]
    name = f"{chunks[0]}_gates"
    shape = (*like[:-1], len(chunks) * first.shape[-1])
    if _adjacent(graph, chunks):
        kept = first.element_strides()[len(first.shape) - len(_squeezed(first.shape)):]
        strides = (0,) * (len(shape) - len(kept)) + kept  # any stride suits a dim of size 1
        graph.tensors[name] = Tensor(name, shape, "float32", first.kind, view_of=first.view_of,
                                     strides=strides, offset=first.offset)
    else:
        data = np.concatenate([graph.const_value(c) for c in chunks], axis=-1)
        graph.tensors[name] = Tensor(name, shape, "float32", "const",
                                     np.ascontiguousarray(data.reshape(shape)))
    return name
