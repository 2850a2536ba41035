"""Pass: fold PT2E's quantize/dequantize nodes into integer ops.

Rewrites: each ``dequantize -> op [-> relu/hardtanh] -> quantize`` whose op has an int8 form
    (``INT8_RULES``) into one int8 op on the int8 tensors: zero points, TFLite fixed-point
    multipliers (``toolchain.quantize.fixed_point``) and the activation's clamp range as
    arguments, weights int8 per channel, bias int32 at scale in_scale * w_scale[c]. Ops that only
    move or select values (views, max pooling, concatenation; a split of a dequantized value
    as one slice per piece) run on the int8 tensors unchanged when their input and output
    parameters are equal. The quantize/dequantize nodes left (at the
    program's float inputs and outputs, around ops without an int8 form) become NEE's
    float<->int8 kernels; nodes nobody reads any more are dropped.
Requires: capture's functional graph (before alias_views and to_out_variant).
Ensures: "qdq_folded": no ``quantized_decomposed`` op is left, and every int8 tensor written by
    a quantize or int8 op, and every int8/int32 weight and bias, carries its ``Quant``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from toolchain.ir import Graph, Node, Quant, Ref, Tensor, node_inputs
from toolchain.quantize import fixed_point
from toolchain.quantize.fixed_point import INT8_MAX, INT8_MIN, per_tensor
from toolchain.quantize.options import ROUNDINGS

Q = "quantized_decomposed::quantize_per_tensor.default"
DQ = "quantized_decomposed::dequantize_per_tensor.default"
DQC = "quantized_decomposed::dequantize_per_channel.default"
# The float<->int8 conversions left after folding, as NEE's out ops (same arguments).
CONVERSIONS = {Q: "nee::quantize_per_tensor.out", DQ: "nee::dequantize_per_tensor.out",
               DQC: "nee::dequantize_per_channel.out"}
SPLIT, UNBIND, SELECT = ("aten::split_with_sizes.default", "aten::unbind.int",
                         "aten::select.int")
# views that only reshape (an int8 op's input or result may pass through one; unbind's pieces
# are slices squeezed)
RESHAPES = ("aten::view.default", "aten::_unsafe_view.default", "aten::reshape.default",
            "aten::squeeze.dims", "aten::unsqueeze.default")
ACTIVATIONS = {"aten::relu.default": (0.0, np.inf), "aten::hardtanh.default": None}



@dataclass
class Match:
    """A float op between dequantize and quantize nodes, with what folding needs."""

    node: Node
    inputs: dict[str, tuple[str, Quant]]  # argument -> (int8 tensor, its parameters)
    swap: dict[str, str]  # dequantized input -> the int8 tensor it came from
    out: str  # the int8 tensor the quantize node wrote
    name: str  # the float value it quantized, whose name the int8 value takes
    out_quant: Quant
    clamp: tuple[float, float]  # real range of the activation folded in
    removed: list[Node]  # nodes the int8 op replaces
    before: list[Node]  # int8 reshapes of inputs (a linear layer on 3-D input reshapes to 2-D)
    after: Node | None  # the int8 reshape of the result back (it writes ``out``)
    tensors: list[Tensor]  # the int8 values those reshapes read or write
    weights: dict[str, tuple[str, tuple[float, ...]]]  # argument -> int8 weight, its scales


Rule = Callable[[Graph, Match], Node | None]


def fold_qdq(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    if any(n.op in CONVERSIONS for n in graph.nodes):
        _keep_float_where_unquantizable(graph)
        _split_to_slices(graph)
        _attach_params(graph)
        _fold(graph)
        _drop_dead(graph)
        for node in graph.nodes:
            if node.op in CONVERSIONS:
                if node.op == Q and ROUNDINGS[graph.int8_rounding][2] == "xnnpack":
                    node.args["rounding"] = "xnnpack"  # its multiply by the reciprocal
                node.op, node.out_names = CONVERSIONS[node.op], ["out"]
                node.args = {k: v for k, v in node.args.items() if k not in ("dtype", "out_dtype")}
                node.args["out"] = Ref(node.outputs[0])
    graph.ensured.add("qdq_folded")
    return graph


def _keep_float_where_unquantizable(graph: Graph) -> None:
    """Drop quantize -> dequantize pairs whose calibrated scale is not a positive finite number
    (calibration saw inf or nan there, e.g. an additive -inf attention mask): that value stays
    float, as if it had not been annotated."""
    readers = graph.readers()
    dropped: set[int] = set()
    for node in graph.nodes:
        scale = node.args.get("scale") if node.op == Q else None
        if scale is None or (np.isfinite(scale) and scale > 0):
            continue
        source = node.args["input"].name
        for reader in readers.get(node.outputs[0], []):
            graph.rename(reader.outputs[0], source)  # a DQ: its readers read the float value
            dropped.add(id(reader))
        dropped.add(id(node))
    for node in graph.nodes:
        if id(node) in dropped:
            for out in node.outputs:
                del graph.tensors[out]
    graph.nodes = [n for n in graph.nodes if id(n) not in dropped]


def _split_to_slices(graph: Graph) -> None:
    """Each split (unbind) of a dequantized value as one slice (select) per piece, the same
    views, so that every piece folds on its own as an unchanged op (``_match`` follows one
    output)."""
    producers, nodes = graph.producers(), []
    for node in graph.nodes:
        source = producers.get(node.args["self"].name) if node.op in (SPLIT, UNBIND) else None
        if source is None or source.op != DQ:
            nodes.append(node)
            continue
        x = node.args["self"]
        dim = node.args.get("dim", 0) % len(graph.tensors[x.name].shape)
        if node.op == UNBIND:
            nodes += [Node(SELECT, {"self": x, "dim": dim, "index": i}, [out], node.source,
                           node.call) for i, out in enumerate(node.outputs)]
            continue
        start = 0
        for out, size in zip(node.outputs, node.args["split_sizes"], strict=True):
            nodes.append(Node("aten::slice.Tensor", {"self": x, "dim": dim, "start": start,
                                                     "end": start + size, "step": 1},
                              [out], node.source, node.call))
            start += size
    graph.nodes = nodes


def _attach_params(graph: Graph) -> None:
    """The Quant of every quantize output and of every int8 constant a dequantize reads."""
    for node in graph.nodes:
        if node.op == Q:
            graph.tensors[node.outputs[0]].quant = _per_tensor(node)
        elif node.op == DQ and graph.is_const(node.args["input"].name):
            graph.tensors[node.args["input"].name].quant = _per_tensor(node)
        elif node.op == DQC:
            scales = graph.const_value(node.args["scales"].name)
            zeros = graph.const_value(node.args["zero_points"].name)
            graph.tensors[node.args["input"].name].quant = Quant(
                tuple(float(s) for s in scales.astype(np.float32)),
                tuple(int(z) for z in zeros), node.args["axis"])


def _per_tensor(node: Node) -> Quant:
    return Quant((float(np.float32(node.args["scale"])),), (int(node.args["zero_point"]),))


def _fold(graph: Graph) -> None:
    producers, readers = graph.producers(), graph.readers()
    nodes: list[Node] = []
    removed: set[int] = set()
    for node in graph.nodes:
        if id(node) in removed:
            continue
        rule = INT8_RULES.get(node.op)
        match = _match(graph, node, producers, readers) if rule else None
        new = rule(graph, match) if match else None
        if new is None:
            nodes.append(node)
            continue
        removed.update(id(n) for n in match.removed)
        for gone in (match.node, *match.removed):  # the float values the int8 op replaces
            for out in gone.outputs:
                if out not in new.outputs:
                    del graph.tensors[out]
        graph.tensors.update((t.name, t) for t in match.tensors)
        if match.after is not None:  # the int8 op writes what the reshape reads
            middle = match.after.args["self"]
            new.outputs = [middle.name, *new.outputs[1:]]
            if "out" in new.args:
                new.args["out"] = middle
        nodes += [*match.before, new, *([match.after] if match.after else [])]
        _rename_tensor(graph, nodes[-1], match.out, match.name)  # the model's name for the value
    graph.nodes = [n for n in nodes if id(n) not in removed]


def _rename_tensor(graph: Graph, producer: Node, old: str, new: str) -> None:
    graph.rename(old, new)
    tensor = graph.tensors.pop(old)
    tensor.name = new
    graph.tensors[new] = tensor
    producer.outputs = [new if o == old else o for o in producer.outputs]
    producer.args = {k: Ref(new) if v == Ref(old) else v for k, v in producer.args.items()}


def _match(graph: Graph, node: Node, producers: dict[str, Node],
           readers: dict[str, list[Node]]) -> Match | None:
    """``node`` with int8 activation inputs (from dequantize nodes, maybe reshaped) and its
    (reshaped, activation's) output read only by quantize nodes of one set of parameters; None
    when it is not so."""
    inputs, swap, before, tensors, weights = {}, {}, [], [], {}
    for key, value in node.args.items():
        for i, ref in enumerate(value if isinstance(value, list) else [value]):
            if not isinstance(ref, Ref) or graph.is_const(ref.name):
                continue
            weight = _weight(graph, ref.name, producers)
            if weight is not None:
                weights[key] = weight
                continue
            source, view = producers.get(ref.name), None
            if source is not None and source.op in RESHAPES:
                view, source = source, producers.get(source.args["self"].name)
            if source is None or source.op != DQ:
                return None  # a float activation input: the op stays float
            name = source.args["input"].name
            quant = graph.tensors[name].quant
            if view is not None:  # the same reshape, of the int8 value
                reshaped = _int8_like(graph.tensors[ref.name], f"{ref.name}_int8", quant)
                before.append(_reshape(view, name, reshaped.name))
                tensors.append(reshaped)
                name = reshaped.name
            swap[ref.name] = name
            inputs[f"{key}.{i}" if isinstance(value, list) else key] = (name, quant)
    tail, clamp, chain, after = node.outputs[0], (-np.inf, np.inf), [node], None
    following = readers.get(tail, [])
    if len(following) == 1 and following[0].op in RESHAPES and tail not in graph.outputs:
        after = following[0]
        tail, chain = after.outputs[0], [node, after]
        following = readers.get(tail, [])
    if len(following) == 1 and following[0].op in ACTIVATIONS and tail not in graph.outputs:
        act = following[0]
        clamp = ACTIVATIONS[act.op] or (act.args.get("min_val", -1.0), act.args.get("max_val", 1.0))
        tail, chain = act.outputs[0], [*chain, act]
        following = readers.get(tail, [])
    quants = [r for r in following if r.op == Q]
    if (not inputs or not quants or len(quants) != len(following) or tail in graph.outputs
            or len({_per_tensor(q) for q in quants}) != 1
            or any(readers.get(o) for o in node.outputs[1:])):
        return None
    keep, *dupes = quants
    for dupe in dupes:  # the same quantization twice: one int8 tensor serves both
        graph.rename(dupe.outputs[0], keep.outputs[0])
    out_quant = _per_tensor(keep)
    if after is not None:
        middle = _int8_like(graph.tensors[node.outputs[0]], f"{node.outputs[0]}_int8", out_quant)
        tensors.append(middle)
        after = _reshape(after, middle.name, keep.outputs[0])
    return Match(node, inputs, swap, keep.outputs[0], tail, out_quant, clamp,
                 [*chain[1:], *quants], before, after, tensors, weights)


def _int8_like(value: Tensor, name: str, quant: Quant) -> Tensor:
    return Tensor(name, value.shape, "int8", "activation", quant=quant)


def _reshape(view: Node, source: str, out: str) -> Node:
    """The model's reshape ``view``, of ``source`` into ``out``."""
    return Node(view.op, {**view.args, "self": Ref(source)}, [out], view.source, view.call)


def _weight(graph: Graph, name: str,
            producers: dict[str, Node]) -> tuple[str, tuple[float, ...]] | None:
    """The int8 constant behind a dequantized weight (through a [1, 0] permute, as linear layers
    decompose) and its scales per output channel (dim 0; a per-tensor scale repeated)."""
    node = producers.get(name)
    if node is not None and node.op == "aten::permute.default" and node.args["dims"] == [1, 0]:
        node = producers.get(node.args["self"].name)
    if node is None or node.op not in (DQ, DQC) or not graph.is_const(node.args["input"].name):
        return None
    weight = graph.tensors[node.args["input"].name]
    quant = weight.quant
    if quant.axis not in (None, 0) or any(quant.zero_point):
        return None  # TFLite's int8 kernels take symmetric weights along the output channels
    return weight.name, quant.scale if quant.axis == 0 else quant.scale * weight.shape[0]


def _clamp(match: Match) -> dict[str, int]:
    """The activation's real range as int8 bounds (TFLite's CalculateActivationRangeQuantized,
    for any hardtanh range)."""
    out = per_tensor(match.out_quant)
    lo, hi = (int(np.clip(fixed_point.quantize_value(r, out), INT8_MIN, INT8_MAX))
              if np.isfinite(r) else default
              for r, default in zip(match.clamp, (INT8_MIN, INT8_MAX), strict=True))
    return {"activation_min": lo, "activation_max": hi}


def _round_away(x: float | np.ndarray) -> np.ndarray:
    """Round half away from zero (C's round, TfLiteRound)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _int8_node(op: str, match: Match, args: dict) -> Node:
    return Node(op, {**args, "out": Ref(match.out)}, [match.out], match.node.source,
                match.node.call, out_names=["out"])


def _same_params(match: Match) -> bool:
    return all(q == match.out_quant for _, q in match.inputs.values())


def _weighted(graph: Graph, match: Match, x: str, weight: str, bias: Ref | None,
              requant: Callable[..., dict], rounding: str) -> dict | None:
    """Arguments of an int8 conv or linear op: input (argument ``x``), int8 weight (argument
    ``weight``), int32 bias, requantization."""
    found = match.weights.get(weight)
    if found is None or (bias is not None and not graph.is_const(bias.name)):
        return None
    name, scales = found
    x_name, x_quant = match.inputs[x]
    return {"input": Ref(x_name), "weight": Ref(name),
            "bias": _bias(graph, bias, x_quant.scale[0], scales, f"{match.name}_bias"),
            **requant(per_tensor(x_quant), scales, per_tensor(match.out_quant), rounding=rounding),
            **_clamp(match)}


def _bias(graph: Graph, ref: Ref | None, input_scale: float, scales: tuple[float, ...],
          name: str) -> Ref | None:
    """The float bias as an int32 constant at scale input_scale * weight_scale[c]."""
    if ref is None:
        return None
    bias_scales = np.float64(input_scale) * np.asarray(scales, np.float64)
    value = _round_away(graph.const_value(ref.name).astype(np.float64) / bias_scales)
    data = np.clip(value, -(2**31), 2**31 - 1).astype(np.int32)
    ref = _const(graph, name, data)
    graph.tensors[name].quant = Quant(
        tuple(float(s) for s in bias_scales.astype(np.float32)), (0,) * len(scales), 0)
    return ref


def _conv(graph: Graph, match: Match) -> Node | None:
    a = match.node.args
    if a["transposed"] or len(graph.tensors[a["input"].name].shape) != 4:
        return None
    args = _weighted(graph, match, "input", "weight", a.get("bias"),
                     fixed_point.conv_requant, ROUNDINGS[graph.int8_rounding][0])
    geometry = {k: a[k] for k in ("stride", "padding", "dilation", "groups")}
    return _int8_node("nee::conv2d_int8.out", match, {**args, **geometry}) if args else None


def _linear(graph: Graph, match: Match) -> Node | None:
    """addmm(bias, x, weight.T) or mm(x, weight.T), as linear layers decompose."""
    a = match.node.args
    if a.get("beta", 1) != 1 or a.get("alpha", 1) != 1:
        return None
    x = "mat1" if "mat1" in a else "self"
    args = _weighted(graph, match, x, "mat2", a["self"] if x == "mat1" else None,
                     fixed_point.linear_requant, ROUNDINGS[graph.int8_rounding][1])
    return _int8_node("nee::linear_int8.out", match, args) if args else None


def _binary(op: str, requant: Callable[..., dict]) -> Rule:
    """add/sub/mul of two int8 tensors or of one and a number (TFLite's ADD/SUB/MUL), with
    their requantization."""

    def rule(graph: Graph, match: Match) -> Node | None:
        args = match.node.args
        if args.get("alpha", 1) != 1 or any(
                key not in match.inputs and not _is_number(args.get(key)) for key in _OPERANDS):
            return None
        (a, qa), (b, qb) = (match.inputs.get(key) or _number(graph, match, key)
                            for key in _OPERANDS)
        args = {"self": Ref(a), "other": Ref(b),
                **requant(per_tensor(qa), per_tensor(qb), per_tensor(match.out_quant),
                          scheme=ROUNDINGS[graph.int8_rounding][2]),
                **_clamp(match)}
        return _int8_node(op, match, args)

    return rule


_OPERANDS = ("self", "other")


def _is_number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and bool(np.isfinite(value)))


def _number(graph: Graph, match: Match, key: str) -> tuple[str, Quant]:
    """The number operand ``key`` as a 0-d int8 constant (exact: +-127 at scale |value| / 127,
    or 0)."""
    value = match.node.args[key]
    scale = float(np.float32(abs(value) / INT8_MAX)) or 1.0
    name = f"{match.out}_{key}"
    _const(graph, name, np.array(np.sign(value) * INT8_MAX, np.int8))
    graph.tensors[name].quant = Quant((scale,), (0,))
    return name, graph.tensors[name].quant


def _avg_pool(graph: Graph, match: Match) -> Node | None:
    """TFLite's AVERAGE_POOL_2D divides by the taps inside the image: torch's semantics only when
    nothing is padded or padding is not counted."""
    a = match.node.args
    padding = list(a.get("padding", [0, 0]))
    if (not _same_params(match) or a.get("ceil_mode") or a.get("divisor_override") is not None
            or (any(padding) and a.get("count_include_pad", True))):
        return None
    args = {"self": Ref(match.inputs["self"][0]), "kernel_size": a["kernel_size"],
            "stride": a.get("stride") or a["kernel_size"], "padding": padding, **_clamp(match)}
    return _int8_node("nee::avg_pool2d_int8.out", match, args)


def _mean(graph: Graph, match: Match) -> Node | None:
    """mean over H and W of an NCHW tensor (TFLite's MEAN over the spatial axes)."""
    a = match.node.args
    x, x_quant = match.inputs["self"]
    rank = len(graph.tensors[x].shape)
    if rank != 4 or sorted(d % rank for d in a.get("dim") or []) != [2, 3] or a.get("dtype"):
        return None
    args = {"self": Ref(x), "dim": [2, 3], "keepdim": bool(a.get("keepdim", False)),
            **fixed_point.mean_requant(per_tensor(x_quant), per_tensor(match.out_quant),
                                       ROUNDINGS[graph.int8_rounding][2])}
    return _int8_node("nee::mean_int8.out", match, args)


def _lookup(table: Callable[[fixed_point.Quant, fixed_point.Quant], np.ndarray]) -> Rule:
    """An int8 -> int8 function of one input as a 256-entry table (TFLite's LOGISTIC, TANH and
    HARD_SWISH are such tables)."""

    def rule(graph: Graph, match: Match) -> Node | None:
        x, x_quant = match.inputs["self"]
        if match.clamp != (-np.inf, np.inf):
            return None
        values = table(per_tensor(x_quant), per_tensor(match.out_quant))
        return _int8_node("nee::lookup_int8.out", match, {
            "self": Ref(x), "table": _const(graph, f"{match.name}_table", values)})

    return rule




def _softmax(graph: Graph, match: Match) -> Node | None:
    """TFLite's int8 SOFTMAX: output parameters fixed at (1/256, -128) by the quantizer."""
    x, x_quant = match.inputs["self"]
    out = per_tensor(match.out_quant)
    if (out.zero_point, out.scale) != (fixed_point.SOFTMAX_OUTPUT.zero_point,
                                       fixed_point.f32(fixed_point.SOFTMAX_OUTPUT.scale)):
        return None
    table = fixed_point.softmax_table(per_tensor(x_quant))
    return _int8_node("nee::softmax_int8.out", match, {
        "self": Ref(x), "dim": match.node.args["dim"],
        "table": _const(graph, f"{match.name}_table", table)})


def _const(graph: Graph, name: str, data: np.ndarray) -> Ref:
    graph.tensors[name] = Tensor(name, data.shape, data.dtype.name, "const", data=data)
    return Ref(name)


def _unchanged(graph: Graph, match: Match) -> Node | None:
    """An op that moves or selects values, on the int8 tensors (equal parameters in and out)."""
    if not _same_params(match) or match.clamp != (-np.inf, np.inf):
        return None
    node = match.node
    args = {k: _swapped(v, match.swap) for k, v in node.args.items()}
    return Node(node.op, args, [match.out, *node.outputs[1:]], node.source, node.call)


def _swapped(value: object, swap: dict[str, str]) -> object:
    if isinstance(value, Ref):
        return Ref(swap.get(value.name, value.name))
    if isinstance(value, list):
        return [_swapped(v, swap) for v in value]
    return value


def _drop_dead(graph: Graph) -> None:
    """Remove nodes whose outputs nobody reads (dequantize nodes of folded inputs, weight
    permutes); capture's functional graph has no side effects."""
    while True:
        read = {graph.storage_of(n) for node in graph.nodes for n in node_inputs(node)}
        read |= {graph.storage_of(n) for n in graph.outputs}
        dead = [n for n in graph.nodes if not any(o in read for o in n.outputs)]
        if not dead:
            return
        for node in dead:
            for out in node.outputs:
                del graph.tensors[out]
        gone = {id(n) for n in dead}
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]


INT8_RULES: dict[str, Rule] = {
    "aten::convolution.default": _conv,
    "aten::addmm.default": _linear,
    "aten::mm.default": _linear,
    "aten::add.Tensor": _binary("nee::add_int8.out", fixed_point.add_requant),
    "aten::mul.Tensor": _binary("nee::mul_int8.out", fixed_point.mul_requant),
    "aten::sub.Tensor": _binary("nee::sub_int8.out", fixed_point.sub_requant),
    "aten::avg_pool2d.default": _avg_pool,
    "aten::mean.dim": _mean,
    "aten::sigmoid.default": _lookup(fixed_point.sigmoid_table),
    "aten::tanh.default": _lookup(fixed_point.tanh_table),
    "aten::hardswish.default": _lookup(fixed_point.hardswish_table),
    "aten::hardsigmoid.default": _lookup(fixed_point.hardsigmoid_table),
    "aten::_softmax.default": _softmax,
    **dict.fromkeys(("aten::max_pool2d_with_indices.default", "aten::cat.default",
                     "aten::view.default", "aten::_unsafe_view.default", "aten::permute.default",
                     "aten::squeeze.dims", "aten::unsqueeze.default", "aten::clone.default",
                     "aten::slice.Tensor", SELECT, "aten::expand.default",
                     "aten::flip.default"),
                    _unchanged),
}
