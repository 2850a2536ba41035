"""NEE's PT2E quantizer: the int8 scheme Ethos-U, TFLite Micro and CMSIS-NN share.

- Activations: int8 per-tensor asymmetric, [-128, 127], min/max or histogram observer.
- Weights of convolutions and linear layers: int8 per-channel symmetric, [-127, 127] (axis 0).
- Biases stay float here; the fold pass stores them as int32 at scale in_scale * w_scale[c].
- A relu/relu6/hardtanh right after a conv, linear, add, sub or mul is part of its producer: the
  output is observed after the activation (the int8 op then clamps to that range).
- Pools, views (also select, slice, flip, a contiguous copy and the pieces of chunk, split
  and unbind), concatenation and max/min take their input's parameters (shared), so they run
  on int8 values unchanged.
- Sigmoid, tanh and softmax outputs get the fixed parameters TFLite's int8 kernels require
  (1/256 and -128; 1/128 and 0 for tanh), unless the model returns them (a classifier's final
  softmax stays float); hardswish and mean get their own; everything else stays float.
- An input read from an op whose output has parameters of another kind (sigmoid's, a view's
  shared ones) is read with those parameters: no second observer, no requantization between.
- Each op of a recurrent module's later calls takes the parameters of the same op in its first
  call (``_first_steps``): one set per cell, as TFLite's recurrent ops have.
"""

from __future__ import annotations

import itertools
import operator

import torch
from torch.fx import Graph, GraphModule, Node
from torchao.quantization.pt2e.observer import (
    HistogramObserver,
    MinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import (
    FixedQParamsQuantizationSpec,
    QuantizationAnnotation,
    QuantizationSpec,
    Quantizer,
    SharedQuantizationSpec,
)

from toolchain.quantize.fixed_point import SIGMOID_OUTPUT, SOFTMAX_OUTPUT, TANH_OUTPUT, Quant

aten = torch.ops.aten

OBSERVERS = {"minmax": MinMaxObserver, "histogram": HistogramObserver}  # options.OBSERVERS

_WEIGHTED = {aten.conv2d.default: 1, aten.linear.default: 1}  # op -> weight argument index
_BINARY = (aten.add.Tensor, aten.sub.Tensor, aten.rsub.Scalar, aten.mul.Tensor)
_ACTIVATIONS = (aten.relu.default, aten.relu_.default, aten.hardtanh.default,
                aten.hardtanh_.default, aten.relu6.default)
_SHARED = (aten.max_pool2d.default, aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default,
           aten.flatten.using_ints, aten.view.default, aten.reshape.default,
           aten.permute.default, aten.squeeze.dim, aten.unsqueeze.default, aten.dropout.default,
           aten.transpose.int, aten.select.int, aten.slice.Tensor, aten.clone.default,
           aten.flip.default)
_SPLITS = (aten.chunk.default, aten.split.Tensor, aten.split_with_sizes.default,
           aten.unbind.int)
_OWN_PARAMS = (aten.hardswish.default, aten.hardswish_.default, aten.hardsigmoid.default,
               aten.mean.dim)
_FIXED = {aten.sigmoid.default: SIGMOID_OUTPUT, aten.softmax.int: SOFTMAX_OUTPUT,
          aten.tanh.default: TANH_OUTPUT}


class NeeQuantizer(Quantizer):
    """Annotates a ``torch.export``-ed module (``ep.module()``) for ``prepare_pt2e``."""

    def __init__(self, observer: str = "minmax") -> None:
        super().__init__()
        self.act = QuantizationSpec(
            dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine,
            observer_or_fake_quant_ctr=OBSERVERS[observer].with_args(eps=2.0**-20))
        self.weight = QuantizationSpec(
            dtype=torch.int8, quant_min=-127, quant_max=127, qscheme=torch.per_channel_symmetric,
            ch_axis=0, observer_or_fake_quant_ctr=PerChannelMinMaxObserver.with_args(
                eps=2.0**-20))

    def annotate(self, model: GraphModule) -> GraphModule:
        """Annotate every node this scheme quantizes (see the module docstring)."""
        self._first = _first_steps(model.graph)
        for node in model.graph.nodes:
            if node.op != "call_function" or _annotated(node) or not _floating(node):
                continue
            if node.target in _WEIGHTED or node.target in _BINARY:
                self._producer(node)
            elif node.target in _OWN_PARAMS:
                _annotate(node, self._inputs(node, _input(node)), self._own(node))
            elif node.target in _FIXED and not _returned(node):
                _annotate(node, self._inputs(node, _input(node)), _fixed(_FIXED[node.target]))
            elif node.target in _SHARED and _input(node) is not None:
                source = _input(node)
                _annotate(node, self._inputs(node, source),
                          SharedQuantizationSpec((source, node)))
            elif node.target == aten.cat.default:
                self._cat(node)
            elif node.target in _SPLITS:
                self._split(node)
        return model

    def validate(self, model: GraphModule) -> None:
        """Nothing to check: any annotation this quantizer makes is one the fold pass handles."""

    def _inputs(self, node: Node, *args: object) -> dict:
        """The input specs of ``node``'s activation ``args``: the producer's own parameters
        where it has an output annotation of another kind than ``self.act`` (PT2E would
        otherwise observe the edge again and requantize), else ``self.act``."""
        return {a: self._input_spec(a) for a in args if isinstance(a, Node)}

    def _input_spec(self, arg: Node) -> object:
        annotation = arg.meta.get("quantization_annotation")
        spec = annotation.output_qspec if annotation is not None else None
        return self.act if spec is None or spec is self.act else SharedQuantizationSpec(arg)

    def _own(self, node: Node) -> object:
        """The output spec of an op with parameters of its own: ``self.act``, or in a later
        step of a recurrent module the parameters of the same op in its first step."""
        first = self._first.get(node)
        annotation = first.meta.get("quantization_annotation") if first is not None else None
        if annotation is None or annotation.output_qspec is not self.act:
            return self.act
        return SharedQuantizationSpec(first)

    def _producer(self, node: Node) -> None:
        """A conv/linear/add/mul and the activation folded into it."""
        inputs = self._inputs(node, *node.args[:2])
        if node.target in _WEIGHTED:
            weight = node.args[_WEIGHTED[node.target]]
            inputs = {**self._inputs(node, node.args[0]), weight: self.weight}
        users = list(node.users)
        activation = users[0] if len(users) == 1 and users[0].target in _ACTIVATIONS else None
        _annotate(node, inputs, None if activation else self._own(node))
        if activation is not None:
            _annotate(activation, {}, self._own(activation))

    def _cat(self, node: Node) -> None:
        """One set of parameters for all inputs and the output: the inputs' own where they all
        have the same fixed ones (the tanh outputs of an RNN's steps, stacked), else observed."""
        tensors = [t for t in node.args[0] if isinstance(t, Node)]
        if not tensors:
            return
        first = tensors[0]
        fixed = {_fixed_params(t) for t in tensors}
        if len(fixed) == 1 and None not in fixed:
            _annotate(node, {t: SharedQuantizationSpec(t) for t in tensors},
                      SharedQuantizationSpec(first))
            return
        shared = SharedQuantizationSpec((first, node))
        _annotate(node, {t: self.act if t is first else shared for t in tensors}, shared)

    def _split(self, node: Node) -> None:
        """chunk/split/unbind: the input observed once, every piece (a getitem) shares it."""
        source = _input(node)
        pieces = [u for u in node.users if u.target is operator.getitem]
        if source is None or len(pieces) != len(node.users):
            return
        _annotate(node, self._inputs(node, source), None)
        shared = SharedQuantizationSpec((source, node))
        for piece in pieces:
            _annotate(piece, {}, shared)


def _first_steps(graph: Graph) -> dict[Node, Node]:
    """For each op of a recurrent module's later calls, the same op of its first call.

    A module's calls are the ``nn_module_stack`` entries torch.export numbers ``name@k``
    (grouped at the outermost module called more than once); they are steps of a recurrence
    when each call reads a value of the call before it and all run the same ops."""
    calls: dict[str, dict[str, list[Node]]] = {}
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack") if node.op == "call_function" else None
        for key in stack or ():
            calls.setdefault(key.split("@")[0], {}).setdefault(key, []).append(node)
    first: dict[Node, Node] = {}
    for steps in calls.values():
        runs = list(steps.values())
        if len(runs) < 2 or any(n in first for n in runs[0]):
            continue  # called once, or inside a module already matched as a step
        ops = [n.target for n in runs[0]]
        if all([n.target for n in run] == ops and _reads(run, before)
               for before, run in itertools.pairwise(runs)):
            first.update((n, f) for run in runs[1:] for n, f in zip(run, runs[0], strict=True))
    return first


def _reads(run: list[Node], before: list[Node]) -> bool:
    """Whether an op of ``run`` reads a value ``before`` computed."""
    earlier = set(before)
    return any(a in earlier for n in run for a in n.all_input_nodes)


def _fixed_params(node: Node) -> tuple[float, int] | None:
    """The fixed (scale, zero point) ``node``'s output has, through shared specs, or None."""
    seen = set()
    while node not in seen:
        seen.add(node)
        annotation = node.meta.get("quantization_annotation")
        spec = annotation.output_qspec if annotation is not None else None
        if isinstance(spec, FixedQParamsQuantizationSpec):
            return spec.scale, spec.zero_point
        if not isinstance(spec, SharedQuantizationSpec):
            return None
        edge = spec.edge_or_node
        node = edge[0] if isinstance(edge, tuple) else edge
    return None


def _fixed(quant: Quant) -> FixedQParamsQuantizationSpec:
    return FixedQParamsQuantizationSpec(torch.int8, quant.scale, quant.zero_point, -128, 127,
                                        torch.per_tensor_affine)


def _floating(node: Node) -> bool:
    """Float in and out (each piece of a split): integer tensors (token ids, indices) are never
    quantized."""
    values = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    values = [t for v in values for t in (v if isinstance(v, (list, tuple)) else [v])]
    return all(isinstance(v, torch.Tensor) and v.is_floating_point() for v in values)


def _returned(node: Node) -> bool:
    """A model output: a fixed 1/256 step would only lose precision before the float result."""
    return any(user.op == "output" for user in node.users)


def _input(node: Node) -> Node | None:
    return node.args[0] if node.args and isinstance(node.args[0], Node) else None


def _annotated(node: Node) -> bool:
    annotation = node.meta.get("quantization_annotation")
    return annotation is not None and annotation._annotated


def _annotate(node: Node, inputs: dict, output: object) -> None:
    node.meta["quantization_annotation"] = QuantizationAnnotation(
        input_qspec_map=inputs, output_qspec=output, _annotated=True)
