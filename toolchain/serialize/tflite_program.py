"""Write an exported program as a .tflite model (one subgraph) for LiteRT, TFLite Micro and Vela.

Layout: NEE runs NCHW, TFLite NHWC. Each TFLite tensor holds a NEE tensor in a layout, a
permutation of NEE's dims (TFLite dim i is NEE dim ``perm[i]``). The program's inputs and
outputs keep NEE's layout (the same arrays run both programs); convolutions and pools read and
write NHWC; elementwise ops, reductions, softmax and concatenation work in the layout their
inputs have (their dims mapped); views and fully connected layers need NEE's order. A tensor is
converted at most once per layout: a TRANSPOSE, or a RESHAPE when only size-1 dims move.

Views: a zero-copy view (``view_of``, strides, offset) of the value last written into its
storage is that storage seen as one dim per stride, sliced (SLICE), permuted (TRANSPOSE),
reshaped and expanded (BROADCAST_TO), each step only when needed.

Int8: tensors keep their ``Quant``; weights are OHWI (depthwise 1HWO, quantized_dimension 3) and
[N, K] for FULLY_CONNECTED, biases int32 at scale input_scale * weight_scale. The kernels'
requantization arguments are not written: TFLite derives them from the scales, as
``toolchain.quantize.fixed_point`` does. A clamp (activation_min/max) becomes the fused
activation with that range for the output's parameters (a float op's fused hardswish, sigmoid or
tanh, which TFLite cannot fuse, its own op after it); a lookup table the TFLite op whose
table it is. torch's symmetric padding becomes SAME or VALID where one is equal, else a PAD op
(before max pooling, where padding must never win, a PADV2 with the lowest value, unless the
input is known to be >= 0, written by a ReLU: XNNPACK takes PAD, not PADV2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tflite

from runtime_py.kernels._common import expand_param
from runtime_py.kernels.attention import causal_bias
from toolchain.errors import ExportError, UnsupportedModelError
from toolchain.export.result import ExportResult
from toolchain.ir import Graph, Node, Quant, Ref, contiguous_strides, node_inputs
from toolchain.passes.check_supported import group_lines
from toolchain.quantize import fixed_point
from toolchain.quantize.fixed_point import INT8_MAX, INT8_MIN, per_tensor
from toolchain.serialize import tflite as tfl
from toolchain.serialize.bundle import output_path

Perm = tuple[int, ...]  # TFLite dim i holds NEE dim perm[i]
NHWC: Perm = (0, 2, 3, 1)
FUSED = ("RELU", "RELU6", "RELU_N1_TO_1")  # TFLite's fused clamps
CLAMPS = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}  # hardtanh bounds -> TFLite
# Float activations TFLite cannot fuse into an op, written after it (see ``_activated``).
ACTIVATION_OPS = ("aten::hardswish.out", "aten::sigmoid.out", "aten::tanh.out",
                  "aten::hardsigmoid.out", "aten::gelu.out", "aten::silu.out")
# Operator versions are 1 (runtimes accept every version from 1, and no more is needed) but
# where TFLite's first version is later: BROADCAST_TO starts at 2.
FIRST_VERSIONS = {"BROADCAST_TO": 2}
# The options table of each elementwise binary builtin (called with a fused activation or none).
BINARY_OPTIONS = {"ADD": tfl.add_options, "SUB": tfl.sub_options, "MUL": tfl.mul_options}


def write_tflite(result: ExportResult, path: str | Path) -> int:
    """Write ``result``'s program to ``path`` as a .tflite model; returns its size in bytes."""
    path = output_path(path)
    state = [t.name for t in result.graph.tensors.values() if t.kind == "state"]
    if state or result.methods:
        raise UnsupportedModelError(
            f"--format tflite of {result.model_name}", "one program without state",
            f"{len(state)} state buffer(s), {1 + len(result.methods)} method(s)",
            "export a .nee bundle: NEE's .tflite writer has no variable tensors or signatures")
    data = to_tflite(result.graph, result.model_name)
    path.write_bytes(data)
    return len(data)


def to_tflite(graph: Graph, description: str = "NEE",
              owners: dict[str, Node] | None = None) -> bytes:
    """``graph`` (after all passes) as .tflite bytes. ExportError for what TFLite cannot run:
    every unsupported op at once, else the first argument it has no equivalent for. With
    ``owners``, records the node each TFLite tensor was written for, by tensor name."""
    _check_supported(graph)
    return _Program(graph, tfl.TfliteWriter(description), owners=owners).convert()


def _identity(rank: int) -> Perm:
    return tuple(range(rank))


def _moves_only_ones(shape: Sequence[int], order: Sequence[int]) -> bool:
    """Whether transposing ``shape`` by ``order`` keeps the data order (a reshape)."""
    kept = [d for d in order if shape[d] > 1]
    return kept == sorted(kept)


def _refuse(node: Node, expected: str, found: str, hint: str) -> ExportError:
    return ExportError(f"TFLite export of {node.op} at {node.source or '<unknown source>'}",
                       expected, found, hint)


@dataclass
class _Program:
    """The subgraph under construction: every NEE tensor's TFLite tensors, by layout."""

    graph: Graph
    writer: tfl.TfliteWriter
    values: dict[str, dict[Perm, int]] = field(default_factory=dict)
    latest: dict[str, str] = field(default_factory=dict)  # storage -> tensor last written there
    owners: dict[str, Node] | None = None  # TFLite tensor name -> the node it was written for
    producers: dict[str, Node] = field(init=False)  # the graph's, which conversion leaves as is

    def __post_init__(self) -> None:
        self.producers = self.graph.producers()

    def convert(self) -> bytes:
        inputs = [self.define(name, _identity(len(self.shape(name)))) for name in self.graph.inputs]
        for node in self.graph.nodes:
            first = len(self.writer.tensor_names)
            CONVERTERS[node.op](self, node)
            if self.owners is not None:
                self.owners.update(dict.fromkeys(self.writer.tensor_names[first:], node))
        outputs = [self.value(name, _identity(len(self.shape(name))))
                   for name in self.graph.outputs]
        return self.writer.finish(inputs, outputs)

    # -- tensors ----------------------------------------------------------------------------

    def shape(self, name: str, perm: Perm | None = None) -> tuple[int, ...]:
        shape = self.graph.tensors[name].shape
        return shape if perm is None else tuple(shape[d] for d in perm)

    def tensor(self, name: str, shape: Sequence[int], like: str) -> int:
        """A new activation tensor with the dtype and quantization of NEE tensor ``like``."""
        t = self.graph.tensors[like]
        return self.writer.tensor(name, shape, t.dtype, **_quant_args(t.quant))

    def const(self, name: str, data: np.ndarray, quant: Quant | None = None) -> int:
        return self.writer.tensor(name, data.shape, data.dtype, data=data, **_quant_args(quant))

    def ints(self, name: str, values: Sequence[int] | np.ndarray) -> int:
        return self.const(name, np.asarray(values, np.int32))

    def define(self, name: str, perm: Perm, index: int | None = None) -> int:
        """Record NEE tensor ``name`` as written now, in layout ``perm`` (a new tensor unless
        ``index`` is given)."""
        if index is None:
            index = self.tensor(name, self.shape(name, perm), name)
        self.values[name] = {perm: index}
        self.latest[self.graph.storage_of(name)] = name
        return index

    def output(self, node: Node, perm: Perm) -> int:
        return self.define(node.outputs[0], perm)

    def layout(self, name: str) -> Perm:
        """The layout ``name`` is held in (NEE's if it is not held yet)."""
        held = self.values.get(name)
        return next(iter(held)) if held else _identity(len(self.shape(name)))

    def value(self, name: str, perm: Perm) -> int:
        """NEE tensor ``name`` as a TFLite tensor in layout ``perm``, converted on first use
        (constants are written in that layout, views are materialized)."""
        held = self.values.setdefault(name, {})
        if perm not in held:
            if self.graph.is_const(name):
                held[perm] = self._const_in(name, perm)
            elif (index := self._permuted_storage(name, perm)) is not None:
                held[perm] = index
            elif not held:
                held[_identity(len(self.shape(name)))] = self._view(name)
                return self.value(name, perm)
            else:
                held[perm] = self._relayout(name, perm)
        return held[perm]

    def op(self, builtin: str, inputs: Sequence[int], outputs: Sequence[int],
           options: tfl.Options | None = None) -> None:
        self.writer.op(getattr(tflite.BuiltinOperator, builtin), inputs, outputs, options,
                       FIRST_VERSIONS.get(builtin, 1))

    def reshape(self, index: int, shape: tuple[int, ...], to: tuple[int, ...], name: str,
                like: str) -> int:
        """``index`` (of ``shape``) reshaped to ``to`` (itself if equal)."""
        if tuple(shape) == tuple(to):
            return index
        out = self.tensor(name, to, like)
        self.op("RESHAPE", [index, self.ints(f"{name}/shape", to)], [out])
        return out

    def _permuted_storage(self, name: str, perm: Perm) -> int | None:
        """The value of ``name``'s storage, when ``name`` in layout ``perm`` is that whole
        storage in row-major order (a zero-copy permutation: NCHW seen over NHWC bytes)."""
        t = self.graph.tensors[name]
        if t.view_of is None or t.offset:
            return None
        base = self.latest.get(t.view_of, t.view_of)
        shape = self.shape(name, perm)
        strides = tuple(t.element_strides()[d] for d in perm)
        if (base == name  # the storage's last value is this one (an in-place output)
                or base not in self.values or strides != contiguous_strides(shape)
                or math.prod(shape) != math.prod(self.shape(base))):
            return None
        index, base_shape = self._flat(base)
        return self.reshape(index, base_shape, shape, f"{name}@{_tag(perm)}", name)

    def _const_in(self, name: str, perm: Perm) -> int:
        """A constant in layout ``perm``, leading size-1 dims added up to its rank."""
        data = self.graph.const_value(name)
        data = data.reshape((1,) * (len(perm) - data.ndim) + data.shape).transpose(perm)
        return self.const(f"{name}@{_tag(perm)}", np.ascontiguousarray(data),
                          self.graph.tensors[name].quant)

    def _relayout(self, name: str, perm: Perm) -> int:
        (source, index), *_ = self.values[name].items()
        order = [source.index(d) for d in perm]
        source_shape = self.shape(name, source)
        if _moves_only_ones(source_shape, order):
            return self.reshape(index, source_shape, self.shape(name, perm),
                                f"{name}@{_tag(perm)}", name)
        out = self.tensor(f"{name}@{_tag(perm)}", self.shape(name, perm), name)
        self.op("TRANSPOSE", [index, self.ints(f"{name}@{_tag(perm)}/perm", order)], [out])
        return out

    def _flat(self, name: str) -> tuple[int, tuple[int, ...]]:
        """A TFLite tensor holding ``name``'s elements in NEE's row-major order, and its
        shape (a layout that only moved size-1 dims will do)."""
        for perm, index in self.values.get(name, {}).items():
            if _moves_only_ones(self.shape(name, perm), [perm.index(d) for d in sorted(perm)]):
                return index, self.shape(name, perm)
        return self.value(name, _identity(len(self.shape(name)))), self.shape(name)

    def _view(self, name: str) -> int:
        """A zero-copy view, from the value its storage holds now (see the module docstring)."""
        t = self.graph.tensors[name]
        root = self.graph.tensors[t.view_of]
        base = self.latest.get(root.name, root.name)
        like = name if t.quant or not self.graph.tensors[base].quant else base
        plan = _view_plan(t.shape, t.element_strides(), t.offset, int(np.prod(root.shape)))
        if plan is None:
            raise ExportError(f"TFLite export of view {name}", "a slice, permutation, reshape "
                              "or expansion of its storage", f"shape {t.shape}, strides "
                              f"{t.strides}, offset {t.offset}", "make it contiguous first")
        index, shape = self._flat(base)
        if plan.begin != (0,) * len(plan.base) or plan.size != plan.base:
            index = self.reshape(index, shape, plan.base, f"{name}/storage", like)
            sliced = self.tensor(f"{name}/slice", plan.size, like)
            self.op("SLICE", [index, self.ints(f"{name}/begin", plan.begin),
                              self.ints(f"{name}/size", plan.size)], [sliced])
            index, shape = sliced, plan.size
        if plan.order != _identity(len(plan.order)):
            index = self.reshape(index, shape, plan.size[:-1], f"{name}/strided", like)
            shape = tuple(plan.size[d] for d in plan.order)
            moved = self.tensor(f"{name}/permuted", shape, like)
            self.op("TRANSPOSE", [index, self.ints(f"{name}/perm", plan.order)], [moved])
            index = moved
        index = self.reshape(index, shape, plan.expanded, name, like)
        if plan.expanded == t.shape:
            return index
        out = self.tensor(name, t.shape, like)
        self.op("BROADCAST_TO", [index, self.ints(f"{name}/shape", t.shape)], [out])
        return out


def _tag(perm: Perm) -> str:
    return "nhwc" if perm == NHWC else "".join(map(str, perm))


def _quant_args(quant: Quant | None) -> dict:
    if quant is None:
        return {}
    return {"scale": quant.scale, "zero_point": quant.zero_point, "axis": quant.axis}


@dataclass(frozen=True)
class _ViewPlan:
    """A view as steps: the storage as ``base`` (one dim per stride of the view, largest first,
    then one of stride 1), a slice of it (``begin``, ``size``), a transpose of the slice's dims
    but the last (``order``), a reshape to the view's shape with broadcast dims as 1
    (``expanded``)."""

    base: tuple[int, ...]
    begin: tuple[int, ...]
    size: tuple[int, ...]
    order: tuple[int, ...]
    expanded: tuple[int, ...]


def _view_plan(shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
               total: int) -> _ViewPlan | None:
    """The steps of a view of ``total`` storage elements; None if it overlaps itself or its
    strides do not nest (no slice of a reshape of the storage is it)."""
    kept = sorted(((s, i, n) for i, (n, s) in enumerate(zip(shape, strides, strict=True))
                   if n > 1 and s), reverse=True)
    steps = [s for s, _, _ in kept] + [1]
    outer = [total, *steps[:-1]]
    if any(o % s for o, s in zip(outer, steps, strict=True)):
        return None
    base = tuple(o // s for o, s in zip(outer, steps, strict=True))
    begin, rest = [], offset
    for s in steps:
        begin.append(rest // s)
        rest %= s
    size = (*(n for _, _, n in kept), 1)
    if any(b + n > e for b, n, e in zip(begin, size, base, strict=True)):
        return None
    order = tuple(sorted(range(len(kept)), key=lambda j: kept[j][1]))
    expanded = tuple(1 if s == 0 else n for n, s in zip(shape, strides, strict=True))
    return _ViewPlan(base, tuple(begin), size, order, expanded)


# -- activations and padding ------------------------------------------------------------------


def _fused(p: _Program, node: Node) -> str:
    """The TFLite fused activation of an int8 op's clamp or a float op's ``activation``."""
    a = node.args
    if "activation_min" in a:
        return _int8_clamp(p, node, a["activation_min"], a["activation_max"])
    if a.get("activation") is None:
        return "NONE"
    return _float_clamp(node, a["activation"], a.get("act_min_val", -1.0),
                        a.get("act_max_val", 1.0))


def _activated(p: _Program, node: Node, perm: Perm) -> tuple[int, str, Callable[[], None]]:
    """Where a float op with a fused ``activation`` writes, the activation TFLite fuses into it,
    and what to emit after the op: an activation of ACTIVATION_OPS goes to a temporary that
    its own op then maps into the node's output."""
    act = node.args.get("activation")
    if "activation_min" in node.args or act not in ACTIVATION_OPS:
        return p.output(node, perm), _fused(p, node), lambda: None
    name = node.outputs[0]
    temporary = p.tensor(f"{name}/{act}", p.shape(name, perm), name)

    def finish() -> None:
        _activation(p, act, temporary, p.output(node, perm), name, perm,
                    node.args.get("act_approximate", "none"))

    return temporary, "NONE", finish


def _activation(p: _Program, act: str, x: int, y: int, name: str, perm: Perm,
                approximate: str = "none") -> None:
    """Float activation ``act`` of TFLite tensor ``x`` into ``y`` (NEE tensor ``name``'s
    shape in ``perm``): its TFLite op, hardsigmoid as relu6(x + 3) * (1/6), SiLU as
    x * sigmoid(x); GELU's ``approximate`` is torch's ("none" or "tanh")."""
    if act == "aten::gelu.out":
        p.op("GELU", [x], [y], tfl.gelu_options(approximate == "tanh"))
        return
    if act == "aten::silu.out":
        gate = p.tensor(f"{name}/sigmoid", p.shape(name, perm), name)
        p.op("LOGISTIC", [x], [gate])
        p.op("MUL", [x, gate], [y], tfl.mul_options())
        return
    if act != "aten::hardsigmoid.out":
        builtin = {"aten::hardswish.out": "HARD_SWISH", "aten::sigmoid.out": "LOGISTIC",
                   "aten::tanh.out": "TANH"}[act]
        p.op(builtin, [x], [y])
        return
    shifted = p.tensor(f"{name}/plus3", p.shape(name, perm), name)
    dtype = p.graph.tensors[name].dtype
    p.op("ADD", [x, p.const(f"{name}/3", np.array(3, dtype))], [shifted],
         tfl.add_options("RELU6"))
    p.op("MUL", [shifted, p.const(f"{name}/sixth", np.array(1 / 6, dtype))], [y],
         tfl.mul_options())


def _float_activation(p: _Program, node: Node) -> None:
    """A float hardsigmoid, GELU or SiLU call (int8 ones are lookup tables), in its input's
    layout."""
    x = node_inputs(node)[0]
    _require_float(p, node, x)
    perm = p.layout(x)
    _activation(p, node.op, p.value(x, perm), p.output(node, perm), node.outputs[0], perm,
                node.args.get("approximate", "none"))


def _require_float(p: _Program, node: Node, x: str) -> None:
    if p.graph.tensors[x].dtype != "float32":
        raise _refuse(node, "float32 operands", f"{p.graph.tensors[x].dtype} {x}",
                      "only float32 is exported for this op")


def _power(p: _Program, node: Node) -> None:
    """x ** 2 (MUL x x, as numpy computes it), x ** 3 (MUL by x again: GPT-2's GELU; within
    an ulp or two of numpy's pow), x ** 0.5 (SQRT) or x ** -0.5 (RSQRT)."""
    x, exponent = node.args["self"].name, node.args["exponent"]
    _require_float(p, node, x)
    if exponent not in (2, 3, 0.5, -0.5):
        raise _refuse(node, "an exponent of 2, 3, 0.5 or -0.5", str(exponent),
                      "other powers are not exported")
    perm = p.layout(x)
    source, out = p.value(x, perm), node.outputs[0]
    if exponent in (0.5, -0.5):
        p.op("SQRT" if exponent == 0.5 else "RSQRT", [source], [p.output(node, perm)])
        return
    square = p.output(node, perm) if exponent == 2 else p.tensor(f"{out}/square",
                                                                 p.shape(out, perm), out)
    p.op("MUL", [source, source], [square], tfl.mul_options())
    if exponent == 3:
        p.op("MUL", [square, source], [p.output(node, perm)], tfl.mul_options())


def _bmm(p: _Program, node: Node) -> None:
    """BATCH_MATMUL of two 3-D float operands in NEE's order."""
    a = node.args
    operands = [a["self"].name, a["mat2"].name]
    for x in operands:
        _require_float(p, node, x)
    p.op("BATCH_MATMUL", [p.value(x, _identity(3)) for x in operands],
         [p.output(node, _identity(3))], tfl.batch_matmul_options())


def _attention(p: _Program, node: Node) -> None:
    """scaled_dot_product_attention as MUL (the query by the scale), BATCH_MATMUL (by the
    keys, transposed), ADD (a constant mask: a causal one, a bool one as 0 / -inf, a float
    one), SOFTMAX, BATCH_MATMUL (by the values). Only as many key/value heads as query heads,
    and a mask known at export that leaves every row a key (torch gives such rows 0, SOFTMAX
    would give NaN)."""
    a, out = node.args, node.outputs[0]
    q, k, v = (a[key].name for key in ("query", "key", "value"))
    for x in (q, k, v):
        _require_float(p, node, x)
    shape, rank = p.shape(q), len(p.shape(q))
    if p.shape(k)[:-2] != shape[:-2] or rank < 3:
        raise _refuse(node, "key/value heads and batch dims equal to the query's",
                      f"query {shape}, key {p.shape(k)}", "grouped-query attention stays on "
                      "the numpy kernels")
    mask = _attention_mask(p, node, (shape[-2], p.shape(k)[-2]))
    perm, scores_shape = _identity(rank), (*shape[:-1], p.shape(k)[-2])
    scale = a.get("scale") or 1 / math.sqrt(shape[-1])
    scaled, scores = (p.tensor(f"{out}/{n}", s, q) for n, s in
                      (("query", shape), ("scores", scores_shape)))
    p.op("MUL", [p.value(q, perm), p.const(f"{out}/scale", np.array(scale, np.float32))],
         [scaled], tfl.mul_options())
    p.op("BATCH_MATMUL", [scaled, p.value(k, perm)], [scores], tfl.batch_matmul_options(True))
    if mask is not None:
        masked = p.tensor(f"{out}/masked", scores_shape, q)
        p.op("ADD", [scores, p.const(f"{out}/mask", mask)], [masked], tfl.add_options())
        scores = masked
    weights = p.tensor(f"{out}/weights", scores_shape, q)
    p.op("SOFTMAX", [scores], [weights], tfl.softmax_options(1.0))
    p.op("BATCH_MATMUL", [weights, p.value(v, perm)], [p.output(node, perm)],
         tfl.batch_matmul_options())


def _attention_mask(p: _Program, node: Node, size: tuple[int, int]) -> np.ndarray | None:
    """The additive float32 mask of an attention call (None without one), refused unless it is
    a constant leaving each row a key."""
    a = node.args
    if a.get("dropout_p"):
        raise _refuse(node, "dropout_p 0", str(a["dropout_p"]), "export the model in eval mode")
    if a.get("is_causal"):
        mask = causal_bias(*size)
    elif isinstance(a.get("attn_mask"), Ref):
        name = a["attn_mask"].name
        if not p.graph.is_const(name):
            raise _refuse(node, "a mask known at export", f"mask {name} computed at run time",
                          "such attention stays on the numpy kernels")
        mask = p.graph.const_value(name)
        if mask.dtype == np.bool_:
            mask = np.where(mask, np.float32(0), np.float32(-np.inf))
    else:
        return None
    if (np.isneginf(mask).all(axis=-1)).any():
        raise _refuse(node, "a mask leaving every query row a key", "a row masked whole",
                      "such attention stays on the numpy kernels")
    return np.ascontiguousarray(mask, np.float32)


def _chunks(p: _Program, node: Node, key: str, parts: str) -> dict[str, int]:
    """SLICEs of gate tensor ``node.args[key]`` (..., k H) into its chunks (..., H), by name."""
    out = node.outputs[0]
    shape = p.shape(out)
    gates, size = p.value(node.args[key].name, _identity(len(shape))), p.ints(f"{out}/size", shape)
    chunks = {}
    for k, part in enumerate(parts):
        chunks[part] = p.tensor(f"{out}/{key}/{part}", shape, out)
        begin = p.ints(f"{out}/{key}/{part}/begin", [0] * (len(shape) - 1) + [k * shape[-1]])
        p.op("SLICE", [gates, begin, size], [chunks[part]])
    return chunks


def _elementwise(p: _Program, node: Node) -> Callable[..., int]:
    """``step(builtin, name, *inputs)``: an elementwise op on tensors of ``node``'s output shape
    into a new one (named after the output), returned."""
    out = node.outputs[0]

    def step(builtin: str, name: str, *inputs: int) -> int:
        result = p.tensor(f"{out}/{name}", p.shape(out), out)
        options = BINARY_OPTIONS.get(builtin)
        p.op(builtin, list(inputs), [result], options() if options else None)
        return result

    return step


def _gru_cell(p: _Program, node: Node) -> None:
    """One GRU step (runtime_py/kernels/recurrent.py): SLICEs of both gate tensors into their
    r, z, n chunks, r and z as ADD then LOGISTIC, n as MUL, ADD, TANH, and the new state
    n + z (h - n) as SUB, MUL, ADD, in NEE's order."""
    x, h = _chunks(p, node, "input_gates", "rzn"), _chunks(p, node, "hidden_gates", "rzn")
    step, perm = _elementwise(p, node), _identity(len(p.shape(node.outputs[0])))
    r, z = (step("LOGISTIC", part, step("ADD", f"{part}_sum", x[part], h[part]))
            for part in "rz")
    n = step("TANH", "n", step("ADD", "n_sum", x["n"], step("MUL", "r_h", r, h["n"])))
    change = step("MUL", "z_d", step("SUB", "d", p.value(node.args["hidden"].name, perm), n), z)
    p.op("ADD", [change, n], [p.output(node, perm)], tfl.add_options())


def _lstm_cell(p: _Program, node: Node) -> None:
    """One LSTM step: SLICEs of the gates into i, f, g, o, LOGISTIC of i, f, o and TANH of g,
    c' = f c + i g (MUL, MUL, ADD), h' = o tanh(c') (TANH, MUL), in NEE's order."""
    gates, step = _chunks(p, node, "gates", "ifgo"), _elementwise(p, node)
    perm = _identity(len(p.shape(node.outputs[0])))
    i, f, o = (step("LOGISTIC", part, gates[part]) for part in "ifo")
    g = step("TANH", "g", gates["g"])
    kept = step("MUL", "f_c", f, p.value(node.args["cell"].name, perm))
    cell = p.define(node.outputs[1], perm)
    p.op("ADD", [kept, step("MUL", "i_g", i, g)], [cell], tfl.add_options())
    p.op("MUL", [o, step("TANH", "c_tanh", cell)], [p.output(node, perm)], tfl.mul_options())


def _where(p: _Program, node: Node) -> None:
    """SELECT_V2 (broadcasting) of float operands in NEE's order."""
    a, out = node.args, node.outputs[0]
    perm = _identity(len(p.shape(out)))
    inputs = [p.value(a["condition"].name, _identity(len(p.shape(a["condition"].name))))]
    for key in ("self", "other"):
        v = a[key]
        if not isinstance(v, Ref):
            inputs.append(p.const(f"{out}/{key}", np.array(v, p.graph.tensors[out].dtype)))
            continue
        _require_float(p, node, v.name)
        inputs.append(_operand(p, v.name, perm))
    p.op("SELECT_V2", inputs, [p.output(node, perm)])


def _layer_norm(p: _Program, node: Node) -> None:
    """Layer norm over the trailing ``normalized_shape`` dims, as TFLite has no op for it:
    mean = MEAN(x), d = x - mean, rstd = RSQRT(MEAN(d * d) + eps), d * rstd * weight + bias;
    mean and rstd are the node's second and third outputs."""
    a, (out, *stats) = node.args, node.outputs
    x = a["input"].name
    _require_float(p, node, x)
    rank = len(p.shape(x))
    perm, keep = _identity(rank), tfl.reducer_options(True)
    first = rank - len(a["normalized_shape"])
    axes = p.ints(f"{out}/axes", range(first, rank))
    kept = p.shape(x)[:first] + (1,) * (rank - first)
    mean = p.define(stats[0], perm) if stats else p.tensor(f"{out}/mean", kept, x)
    p.op("MEAN", [p.value(x, perm), axes], [mean], keep)
    d, square, var = (p.tensor(f"{out}/{k}", s, x) for k, s in
                      (("centred", p.shape(x)), ("square", p.shape(x)), ("var", kept)))
    p.op("SUB", [p.value(x, perm), mean], [d], tfl.sub_options())
    p.op("MUL", [d, d], [square], tfl.mul_options())
    p.op("MEAN", [square, axes], [var], keep)
    shifted = p.tensor(f"{out}/var_eps", kept, x)
    p.op("ADD", [var, p.const(f"{out}/eps", np.array(a.get("eps", 1e-5), np.float32))],
         [shifted], tfl.add_options())
    rstd = p.define(stats[1], perm) if len(stats) > 1 else p.tensor(f"{out}/rstd", kept, x)
    p.op("RSQRT", [shifted], [rstd])
    chain = [("MUL", rstd)] + [(builtin, p.value(a[k].name, _identity(len(p.shape(a[k].name)))))
                               for k, builtin in (("weight", "MUL"), ("bias", "ADD"))
                               if isinstance(a.get(k), Ref)]
    y = d
    for i, (builtin, operand) in enumerate(chain):
        last = i == len(chain) - 1
        z = p.output(node, perm) if last else p.tensor(f"{out}/step{i}", p.shape(x), x)
        p.op(builtin, [y, operand], [z], BINARY_OPTIONS[builtin]())
        y = z


def _int8_clamp(p: _Program, node: Node, low: int, high: int) -> str:
    if (low, high) == (INT8_MIN, INT8_MAX):
        return "NONE"
    quant = p.graph.tensors[node.outputs[0]].quant
    for name in FUSED:
        if fixed_point.quantized_activation_range(name, quant.scale[0],
                                                  quant.zero_point[0]) == (low, high):
            return name
    raise _refuse(node, "an int8 clamp equal to the range of TFLite's RELU, RELU6 or "
                  "RELU_N1_TO_1 for the output's scale and zero point, or the full int8 range",
                  f"[{low}, {high}] (output scale {quant.scale[0]}, zero point "
                  f"{quant.zero_point[0]})", "use relu, relu6 or hardtanh(-1, 1) after it")


def _float_clamp(node: Node, activation: str, low: float, high: float) -> str:
    if activation == "aten::relu.out":
        return "RELU"
    if activation == "aten::hardtanh.out" and (low, high) in CLAMPS:
        return CLAMPS[low, high]
    found = activation + (f"({low}, {high})" if activation == "aten::hardtanh.out" else "")
    raise _refuse(node, "relu, relu6 or hardtanh(-1, 1) (TFLite's fused activations)", found,
                  "apply other activations as separate ops")


def window_padding(sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                    dilation: Sequence[int], padding: Sequence[int]) -> str | None:
    """"VALID" or "SAME" where equal to torch's symmetric ``padding`` on (H, W) (same output
    size and leading pad), else None. SAME pads max(0, (out - 1) * stride + extent - size),
    the smaller half first."""
    if not any(padding):
        return "VALID"
    for size, k, s, d, pad in zip(sizes, kernel, stride, dilation, padding, strict=True):
        extent = d * (k - 1) + 1
        same_out = -(-size // s)
        same_pad = max((same_out - 1) * s + extent - size, 0) // 2
        if (same_out, same_pad) != ((size + 2 * pad - extent) // s + 1, pad):
            return None
    return "SAME"


def _as_nhwc(p: _Program, x: str) -> tuple[int, tuple[int, ...]]:
    """``x`` as a TFLite NHWC tensor and its shape: a 3-D [N, C, L] ``x`` (a 1-D convolution's)
    as [N, 1, L, C]."""
    if len(p.shape(x)) == 4:
        return p.value(x, NHWC), p.shape(x, NHWC)
    (n, c, length), nwc = p.shape(x), (0, 2, 1)
    shape = (n, 1, length, c)
    return p.reshape(p.value(x, nwc), p.shape(x, nwc), shape, f"{x}@nhwc", x), shape


def _padded(p: _Program, x: str, geometry: dict[str, tuple[int, ...]],
            fill: float | None = None) -> tuple[int, str]:
    """NHWC ``x`` ready for a window op with torch's ``padding``: (tensor, TFLite padding).
    Padding neither SAME nor VALID is a PAD op (the zero point, or 0.0) or with ``fill`` a
    PADV2 (``fill`` in x's dtype and quantization)."""
    source, (n, h, w, c) = _as_nhwc(p, x)
    mode = window_padding((h, w), **geometry)
    if mode is not None:
        return source, mode
    ph, pw = geometry["padding"]
    padded = p.tensor(f"{x}/padded", (n, h + 2 * ph, w + 2 * pw, c), x)
    operands = [source, p.ints(f"{x}/pads", [[0, 0], [ph, ph], [pw, pw], [0, 0]])]
    if fill is None:
        p.op("PAD", operands, [padded], tfl.pad_options())
    else:
        t = p.graph.tensors[x]
        operands.append(p.const(f"{x}/fill", np.array(fill, t.dtype), t.quant))
        p.op("PADV2", operands, [padded])
    return padded, "VALID"


def _geometry(args: dict, kernel: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """(h, w) kernel, stride (the kernel if empty, as in torch), dilation and padding."""
    return {"kernel": expand_param(kernel, 2),
            "stride": expand_param(args.get("stride") or kernel, 2),
            "dilation": expand_param(args.get("dilation", 1), 2),
            "padding": expand_param(args.get("padding", 0), 2)}


# -- converters: one per NEE op ---------------------------------------------------------------

Converter = Callable[[_Program, Node], None]


def _const_weight(p: _Program, node: Node, key: str) -> np.ndarray:
    name = node.args[key].name
    if not p.graph.is_const(name):
        raise _refuse(node, f"a constant {key}", f"the activation {name}",
                      "TFLite's CONV_2D and FULLY_CONNECTED take constant weights here")
    return p.graph.const_value(name)


def _bias(p: _Program, node: Node, key: str | None, x: str, weight: str, n: int) -> int:
    """The bias (int32 at scale input_scale * weight_scale[c] for int8), zeros if none."""
    ref = node.args.get(key) if key else None
    if ref is not None:
        if not p.graph.is_const(ref.name) or np.prod(p.shape(ref.name)) != n:
            raise _refuse(node, f"a constant bias of {n} elements", f"{ref.name} of shape "
                          f"{p.shape(ref.name)}", "add a per-row bias as a separate op")
        data = np.ascontiguousarray(p.graph.const_value(ref.name).reshape(n))
        return p.const(ref.name, data, p.graph.tensors[ref.name].quant)
    w, name = p.graph.tensors[weight], f"{node.outputs[0]}/bias"
    if w.quant is None:
        return p.const(name, np.zeros(n, w.dtype))
    scales = np.float64(p.graph.tensors[x].quant.scale[0]) * np.asarray(w.quant.scale,
                                                                         np.float64)
    scales = np.broadcast_to(scales.astype(np.float32), n)
    return p.const(name, np.zeros(n, np.int32), Quant(tuple(map(float, scales)), (0,) * n, 0))


def _conv(p: _Program, node: Node) -> None:
    """CONV_2D (grouped too), or DEPTHWISE_CONV_2D when groups == input channels > 1; a 1-D
    convolution as one over a height of 1."""
    a = node.args
    if a.get("transposed"):
        raise _refuse(node, "a forward convolution", "transposed=True",
                      "TRANSPOSE_CONV is not exported yet")
    x, weight = a["input"].name, _const_weight(p, node, "weight")
    if weight.ndim not in (3, 4):
        raise _refuse(node, "a 1-D or 2-D convolution", f"{weight.ndim - 2}-D",
                      "only 1-D and 2-D convolutions are exported to TFLite")
    one_d = weight.ndim == 3  # as 2-D over a height of 1
    if one_d:
        weight = weight[:, :, None, :]
    channels, (o, _, kh, kw) = p.shape(x)[1], weight.shape
    depthwise = a["groups"] == channels > 1
    geometry = ({key: (0 if key == "padding" else 1, v[0])
                 for key, v in _geometry(a, (kw,)).items()} if one_d
                else _geometry(a, (kh, kw)))
    source, padding = _padded(p, x, geometry)
    quant = p.graph.tensors[a["weight"].name].quant
    if depthwise and quant is not None and quant.axis is not None:
        quant = Quant(quant.scale, quant.zero_point, 3)
    filters = weight.transpose((1, 2, 3, 0) if depthwise else (0, 2, 3, 1))
    operands = [source, p.const(a["weight"].name, np.ascontiguousarray(filters), quant),
                _bias(p, node, "bias", x, a["weight"].name, o)]
    out, fused, finish = _activated(p, node, (0, 2, 1) if one_d else NHWC)
    target = out
    if one_d:  # CONV_2D writes [N, 1, L, O], reshaped into the [N, L, O] output
        n, length, _ = p.shape(node.outputs[0], (0, 2, 1))
        target = p.tensor(f"{node.outputs[0]}/nhwc", (n, 1, length, o), node.outputs[0])
    common = {"stride": geometry["stride"], "dilation": geometry["dilation"],
              "padding": padding, "activation": fused}
    if depthwise:
        p.op("DEPTHWISE_CONV_2D", operands, [target],
             tfl.depthwise_conv2d_options(o // channels, **common))
    else:
        p.op("CONV_2D", operands, [target], tfl.conv2d_options(**common))
    if one_d:
        p.op("RESHAPE", [target, p.ints(f"{node.outputs[0]}/shape", (n, length, o))], [out])
    finish()


def _fully_connected(p: _Program, node: Node, x: str, weight: str, data: np.ndarray,
                     bias_key: str | None) -> None:
    """FULLY_CONNECTED of ``x`` (NEE's order) with [N, K] weights ``data``; an output that is
    a view of other leading dims (an activation fused through a reshape) reads ``x`` so
    reshaped."""
    (n, k), out_shape = data.shape, p.shape(node.outputs[0])
    rank, source = len(out_shape), p.value(x, _identity(len(p.shape(x))))
    if out_shape[-1] != n:
        raise _refuse(node, f"an output of {n} features in its last dim", str(out_shape),
                      "keep the reshape after the linear layer out of the fusion")
    if p.shape(x)[:-1] != out_shape[:-1]:
        source = p.reshape(source, p.shape(x), (*out_shape[:-1], k), f"{x}@rows", x)
    operands = [source,
                p.const(f"{weight}@nk", np.ascontiguousarray(data), p.graph.tensors[weight].quant),
                _bias(p, node, bias_key, x, weight, n)]
    out, fused, finish = _activated(p, node, _identity(rank))
    p.op("FULLY_CONNECTED", operands, [out],
         tfl.fully_connected_options(fused, keep_num_dims=rank > 2))
    finish()


def _linear_int8(p: _Program, node: Node) -> None:
    a = node.args
    _fully_connected(p, node, a["input"].name, a["weight"].name, _const_weight(p, node, "weight"),
                     "bias")


def _matmul(p: _Program, node: Node) -> None:
    """addmm(bias, x, W.T) / mm(x, W.T), as linear layers decompose (W.T constant)."""
    a = node.args
    if a.get("alpha", 1) != 1 or a.get("beta", 1) != 1:
        raise _refuse(node, "alpha = beta = 1", f"alpha {a.get('alpha', 1)}, beta "
                      f"{a.get('beta', 1)}", "scale the operands instead")
    x = a["mat1" if "mat1" in a else "self"].name
    _fully_connected(p, node, x, a["mat2"].name, _const_weight(p, node, "mat2").T,
                     "self" if "mat1" in a else None)


def _shared_layout(p: _Program, names: Sequence[str], rank: int) -> Perm:
    """NHWC for 4-D operands one of which is held in NHWC, else NEE's order."""
    held = [n for n in names if not p.graph.is_const(n)]
    if rank == 4 and all(len(p.shape(n)) == 4 for n in held) and any(
            NHWC in p.values.get(n, {}) for n in held):
        return NHWC
    return _identity(rank)


def _operand(p: _Program, name: str, perm: Perm) -> int:
    """A broadcasting operand in layout ``perm``: a constant expanded to its rank, an
    activation of lower rank in NEE's order (both broadcast from the right)."""
    if p.graph.is_const(name) or len(p.shape(name)) == len(perm):
        return p.value(name, perm)
    return p.value(name, _identity(len(p.shape(name))))


def _binary(builtin: str) -> Converter:
    """ADD/SUB/MUL (broadcasting; a number operand is a scalar constant)."""
    options = BINARY_OPTIONS[builtin]

    def convert(p: _Program, node: Node) -> None:
        a, out = node.args, node.outputs[0]
        if a.get("alpha", 1) != 1:
            raise _refuse(node, "alpha = 1", f"alpha {a['alpha']}", "multiply explicitly")
        operands = [a["self"], a["other"]]
        perm = _shared_layout(p, [v.name for v in operands if isinstance(v, Ref)],
                              len(p.shape(out)))
        inputs = [_operand(p, v.name, perm) if isinstance(v, Ref) else
                  p.const(f"{out}/{key}", np.array(v, p.graph.tensors[out].dtype))
                  for key, v in zip(("self", "other"), operands, strict=True)]
        p.op(builtin, inputs, [p.output(node, perm)], options(_fused(p, node)))

    return convert


def _unary(builtin: str) -> Converter:
    """An elementwise op of one input, in the layout the input has."""

    def convert(p: _Program, node: Node) -> None:
        x = node_inputs(node)[0]
        perm = p.layout(x)
        p.op(builtin, [p.value(x, perm)], [p.output(node, perm)])

    return convert


def _hardtanh(p: _Program, node: Node) -> None:
    a = node.args
    _unary(_float_clamp(node, node.op, a.get("min_val", -1.0), a.get("max_val", 1.0)))(p, node)


# The tables of lookup_int8 TFLite computes itself: op, table function, fixed output params.
LOOKUPS = (("LOGISTIC", fixed_point.sigmoid_table, fixed_point.SIGMOID_OUTPUT),
           ("TANH", fixed_point.tanh_table, None),
           ("HARD_SWISH", fixed_point.hardswish_table, None))


def _lookup(p: _Program, node: Node) -> None:
    """LOGISTIC, TANH or HARD_SWISH: the one whose int8 table ``table`` is."""
    x = node.args["self"].name
    table = p.graph.const_value(node.args["table"].name)
    q_in, q_out = (per_tensor(p.graph.tensors[n].quant) for n in (x, node.outputs[0]))
    for builtin, function, fixed in LOOKUPS:
        if fixed is not None and q_out != (fixed_point.f32(fixed.scale), fixed.zero_point):
            continue
        try:
            if np.array_equal(function(q_in, q_out), table):
                return _unary(builtin)(p, node)
        except ValueError:  # parameters TFLite's op does not take
            continue
    raise _refuse(node, "the int8 table of TFLite's LOGISTIC, TANH or HARD_SWISH for these "
                  "parameters", f"another table (input {q_in}, output {q_out})",
                  "only sigmoid, tanh and hardswish have TFLite int8 ops")


def _pool(builtin: str) -> Converter:
    """AVERAGE_POOL_2D (TFLite divides by the taps inside the input: padding only as SAME and
    uncounted) and MAX_POOL_2D (any symmetric padding)."""
    average = builtin == "AVERAGE_POOL_2D"

    def convert(p: _Program, node: Node) -> None:
        a = node.args
        geometry = _geometry(a, a["kernel_size"])
        unsupported = {k: a[k] for k in ("ceil_mode", "divisor_override") if a.get(k)}
        if geometry.pop("dilation") != (1, 1):
            unsupported["dilation"] = a["dilation"]
        if average and any(geometry["padding"]) and (
                window_padding(p.shape(a["self"].name)[2:], dilation=(1, 1), **geometry) is None
                or (node.op == "aten::avg_pool2d.out" and a.get("count_include_pad", True))):
            unsupported["padding"] = a["padding"]
        if unsupported:
            raise _refuse(node, "TFLite's pooling: no ceil_mode, dilation or divisor, average "
                          "padding only as SAME and not counted", str(unsupported),
                          "pad explicitly or change the pooling arguments")
        x = a["self"].name
        fill = None if average or _nonnegative(p, x) else _lowest(p.graph.tensors[x].dtype)
        source, padding = _padded(p, x, {**geometry, "dilation": (1, 1)}, fill)
        p.op(builtin, [source], [p.output(node, NHWC)],
             tfl.pool2d_options(geometry["kernel"], geometry["stride"], padding,
                                _fused(p, node)))

    return convert


def _nonnegative(p: _Program, x: str) -> bool:
    """Whether every (real) value of ``x`` is >= 0 because the node writing it is a ReLU or
    clamps at >= 0 (fused ReLU, ReLU6, hardtanh with min >= 0, an int8 clamp at or above the
    zero point); then padding with 0 never wins a max."""
    node = p.producers.get(x)
    if node is None or p.graph.tensors[x].view_of is not None:
        return False
    a = node.args
    if "activation_min" in a:
        return a["activation_min"] >= p.graph.tensors[x].quant.zero_point[0]
    act = "aten::relu.out" if node.op == "aten::relu.out" else a.get("activation")
    low = a.get("act_min_val", -1.0)
    return act == "aten::relu.out" or (act == "aten::hardtanh.out" and low >= 0)


def _lowest(dtype: str) -> float:
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


def _mean(p: _Program, node: Node) -> None:
    """MEAN over the dims, mapped into the input's layout."""
    a = node.args
    x = a["self"].name
    rank, perm = len(p.shape(x)), p.layout(x)
    dims = sorted({d % rank for d in a.get("dim") or range(rank)})
    keep = bool(a.get("keepdim", False))
    left = [d for d in perm if d not in dims]
    out_perm = perm if keep else tuple(sorted(left).index(d) for d in left)
    axes = p.ints(f"{node.outputs[0]}/axes", [perm.index(d) for d in dims])
    p.op("MEAN", [p.value(x, perm), axes], [p.output(node, out_perm)], tfl.reducer_options(keep))


def _softmax(p: _Program, node: Node) -> None:
    """SOFTMAX (beta 1) over TFLite's last axis: a layout with ``dim`` last."""
    a = node.args
    x, out = a["self"].name, node.outputs[0]
    rank = len(p.shape(x))
    dim = a["dim"] % rank
    if node.op == "nee::softmax_int8.out":
        _check_softmax_table(p, node, x, out)
    layouts = [p.layout(x), _identity(rank), *([NHWC] if rank == 4 else [])]
    perm = next((q for q in layouts if q[-1] == dim), None)
    if perm is None:
        raise _refuse(node, "softmax over the last or (4-D) channel dim",
                      f"dim {a['dim']} of a {rank}-D tensor", "transpose it first")
    p.op("SOFTMAX", [p.value(x, perm)], [p.output(node, perm)], tfl.softmax_options(1.0))


def _check_softmax_table(p: _Program, node: Node, x: str, out: str) -> None:
    q_in, q_out = (per_tensor(p.graph.tensors[n].quant) for n in (x, out))
    expected = fixed_point.softmax_table(q_in)
    fixed = fixed_point.SOFTMAX_OUTPUT
    if (q_out != (fixed_point.f32(fixed.scale), fixed.zero_point)
            or not np.array_equal(p.graph.const_value(node.args["table"].name), expected)):
        raise _refuse(node, f"TFLite's int8 SOFTMAX (beta 1, output {fixed})",
                      f"another table or output {q_out}", "quantize softmax with NeeQuantizer")


def _cat(p: _Program, node: Node) -> None:
    names = [r.name for r in node.args["tensors"]]
    rank = len(p.shape(node.outputs[0]))
    perm = _shared_layout(p, names, rank)
    axis = perm.index(node.args.get("dim", 0) % rank)
    p.op("CONCATENATION", [p.value(n, perm) for n in names], [p.output(node, perm)],
         tfl.concatenation_options(axis))


def _copy(p: _Program, node: Node) -> None:
    """A contiguous copy: the same TFLite tensor (values are immutable there)."""
    x = node.args["self"].name
    perm = p.layout(x)
    p.define(node.outputs[0], perm, p.value(x, perm))


CONVERTERS: dict[str, Converter] = {
    "nee::quantize_per_tensor.out": _unary("QUANTIZE"),
    "nee::dequantize_per_tensor.out": _unary("DEQUANTIZE"),
    "nee::conv2d_int8.out": _conv,
    "nee::linear_int8.out": _linear_int8,
    "nee::add_int8.out": _binary("ADD"),
    "nee::sub_int8.out": _binary("SUB"),
    "nee::mul_int8.out": _binary("MUL"),
    "nee::avg_pool2d_int8.out": _pool("AVERAGE_POOL_2D"),
    "nee::mean_int8.out": _mean,
    "nee::lookup_int8.out": _lookup,
    "nee::softmax_int8.out": _softmax,
    "nee::max_pool2d.out": _pool("MAX_POOL_2D"),
    "aten::cat.out": _cat,
    "aten::clone.out": _copy,
    "aten::convolution.out": _conv,
    "nee::convolution_act.out": _conv,
    "aten::addmm.out": _matmul,
    "aten::mm.out": _matmul,
    "nee::addmm_act.out": _matmul,
    "nee::mm_act.out": _matmul,
    "aten::add.out": _binary("ADD"),
    "aten::add.Scalar_out": _binary("ADD"),
    "aten::sub.out": _binary("SUB"),
    "aten::sub.Scalar_out": _binary("SUB"),
    "aten::mul.out": _binary("MUL"),
    "aten::mul.Scalar_out": _binary("MUL"),
    "aten::avg_pool2d.out": _pool("AVERAGE_POOL_2D"),
    "aten::mean.out": _mean,
    "aten::_softmax.out": _softmax,
    "aten::relu.out": _unary("RELU"),
    "aten::hardtanh.out": _hardtanh,
    "aten::sigmoid.out": _unary("LOGISTIC"),
    "aten::tanh.out": _unary("TANH"),
    "aten::hardswish.out": _unary("HARD_SWISH"),
    "aten::hardsigmoid.out": _float_activation,
    "aten::gelu.out": _float_activation,
    "aten::silu.out": _float_activation,
    "aten::rsqrt.out": _unary("RSQRT"),
    "aten::neg.out": _unary("NEG"),
    "aten::pow.Tensor_Scalar_out": _power,
    "aten::bmm.out": _bmm,
    "aten::where.self_out": _where,
    "nee::scaled_dot_product_attention.out": _attention,
    "aten::native_layer_norm.out": _layer_norm,
    "nee::gru_cell.out": _gru_cell,
    "nee::lstm_cell.out": _lstm_cell,
}


def _check_supported(graph: Graph) -> None:
    """One ExportError naming every op without a converter, with its source lines."""
    groups: dict[tuple[str, str], list[Node]] = {}
    for node in graph.nodes:
        if node.op not in CONVERTERS:
            groups.setdefault((node.op, ""), []).append(node)
    if groups:
        lines = [line for problem, nodes in groups.items() for line in group_lines(problem, nodes)]
        raise ExportError(
            f"TFLite export: {sum(map(len, groups.values()))} operator call(s) of {len(groups)} "
            "kind(s)", "ops with a TFLite builtin (toolchain/serialize/tflite_program.py "
            "CONVERTERS)", "unsupported calls:\n" + "\n".join(lines) + "\n",
            "export a .nee bundle instead, or rewrite those model lines with supported ops")
