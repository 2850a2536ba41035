"""Capture: ``torch.export`` an nn.Module, decompose to core ATen, convert to NEE's IR.

Every node kind torch.export emits is handled: user inputs and lifted weights (non-tensor
inputs are baked into the graph by torch.export and are no program inputs), ATen calls,
``getitem`` of multi-output calls, runtime asserts (checked here, then dropped: see
``toolchain.export.asserts``), static scalars (symbolic sizes and the arithmetic on them) and the
outputs (constant outputs such as ``None`` dropped; input and parameter mutation refused). A
buffer the model updates in place (a KV cache) becomes a ``state`` tensor: its new value is a
trailing graph output (see ``Graph``), which the ``write_state`` pass writes back.
Anything else raises an ExportError naming the node, its target and the model source line.
"""

from __future__ import annotations

import operator
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from toolchain.errors import ExportError, UnsupportedModelError
from toolchain.export.asserts import RUNTIME_ASSERTS
from toolchain.export.names import leaf_names
from toolchain.export.out_variant import canonical_name
from toolchain.export.source import high_level_call, node_error, source_line
from toolchain.ir import Graph, Node, Ref, Tensor

aten = torch.ops.aten

_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
# Tensor-options values that the pre-allocated out tensor already fixes.
_OPTION_TYPES = (torch.layout, torch.device, torch.memory_format)
# Ops torch.export would decompose that NEE runs as one kernel: attention without the mask and
# softmax ops of its decomposition, activations that then fuse into their producer, roll without
# index arithmetic.
KEEP_WHOLE = (
    aten.scaled_dot_product_attention.default,
    aten.hardswish.default,
    aten.hardsigmoid.default,
    aten.silu.default,
    aten.roll.default,
)
_STATIC = (int, float, bool)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def numpy_dtype(dtype: torch.dtype, where: str) -> str:
    """The numpy name of a torch dtype, or a clear error naming ``where`` it appeared."""
    if dtype not in _DTYPES:
        raise UnsupportedModelError(
            where, f"a dtype in {sorted(_DTYPES.values())}", str(dtype), "cast the model first"
        )
    return _DTYPES[dtype]


def decompositions() -> dict[Any, Any]:
    """torch.export's core-ATen decomposition table without the ops in KEEP_WHOLE."""
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(op, None)
    return table


def trace(model: torch.nn.Module, example_inputs: tuple[Any, ...]) -> ExportedProgram:
    """``torch.export`` the model in eval mode (ATen ops, not yet decomposed). A module that is
    itself a traced graph (e.g. quantized with PT2E) has no modes to switch."""
    if not isinstance(model, torch.fx.GraphModule):
        model = model.eval()
    return _reported(model, lambda: torch.export.export(model, tuple(example_inputs)))


def export_program(model: torch.nn.Module, example_inputs: tuple[Any, ...]) -> ExportedProgram:
    """``torch.export`` the model in eval mode and decompose it to core ATen."""
    ep = trace(model, example_inputs)
    return _reported(model, lambda: ep.run_decompositions(decompositions()))


def _reported(model: torch.nn.Module, step: Callable[[], ExportedProgram]) -> ExportedProgram:
    """``step()`` without autograd; any torch failure as an ExportError with a hint."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # torch 2.13's own pytree code warns about itself on every export
            warnings.filterwarnings("ignore", ".*LeafSpec.*", FutureWarning)
            return step()
    except Exception as e:  # torch raises many types; report them uniformly
        first = (str(e).strip().splitlines() or [""])[0]
        hint = next((h for pattern, h in _EXPORT_HINTS if re.search(pattern, first)),
                    "run the model eagerly on the same inputs first; see the torch.export docs "
                    "on graph breaks and dynamic control flow")
        raise UnsupportedModelError(
            f"torch.export of {type(model).__name__}", "a model traceable with its example inputs",
            f"{type(e).__name__}: {first}", hint,
        ) from e


# torch.export failures with a known remedy: (pattern in the first message line, hint).
_EXPORT_HINTS = (
    (r"Cache'> in output", "the model returns its key/value cache: build an HF model with "
                           "config.use_cache=False (NEE programs keep no state yet)"),
    (r"data-dependent", "a size or branch depends on tensor values (.item(), nonzero, a "
                        "Python if on a tensor): NEE programs have static shapes"),
)


def to_graph(ep: ExportedProgram, names: list[str] | None = None) -> Graph:
    """Convert a decomposed ExportedProgram into a NEE Graph (functional ops, views as nodes).

    ``names`` has one name per value the model returns (default: from the return structure,
    see ``toolchain.export.names``); the tensor outputs keep theirs.
    """
    _refuse_mutations(ep)
    graph = Graph(tensors={}, nodes=[], inputs=[], outputs=[])
    values: dict[torch.fx.Node, Any] = {}
    consts = _constant_inputs(ep)
    names = names or leaf_names(ep.call_spec.out_spec)
    graph.state_updates = _mutated_buffers(ep)
    for fx_node in ep.graph.nodes:
        try:
            values[fx_node] = _convert(graph, fx_node, values, consts, names)
        except ExportError:
            raise
        except Exception as e:  # a node kind this converter does not know: say which
            raise node_error(fx_node, "a node NEE can convert", f"{type(e).__name__}: {e}",
                             "please report this model") from e
    return graph


def _convert(graph: Graph, fx_node: torch.fx.Node, values: dict[torch.fx.Node, Any],
             consts: dict[str, Any], names: list[str]) -> Any:
    """The IR value of one fx node (a Ref, a list of Refs, a static scalar or None)."""
    if fx_node.op == "placeholder":
        return _placeholder(graph, fx_node, consts)
    if fx_node.op == "get_attr":
        return None  # a submodule of a higher-order op, refused at that op
    if fx_node.op == "output":
        state = graph.state_updates
        graph.outputs, graph.output_names = _outputs(fx_node.args[0][len(state):], values, names)
        graph.outputs += _state_updates(fx_node.args[0][:len(state)], values, state)
        graph.output_names += [f"{name}:updated" for name in state]
        return None
    if fx_node.op != "call_function":
        raise node_error(fx_node, "placeholder/call_function/get_attr/output", fx_node.op, "")
    target = fx_node.target
    if target is operator.getitem:
        source, index = fx_node.args
        return values[source][index]
    if target in RUNTIME_ASSERTS:
        RUNTIME_ASSERTS[target](fx_node)
        return None
    if isinstance(target, torch._ops.HigherOrderOperator):
        raise node_error(fx_node, "straight-line ATen code", f"control flow ({target.name()})",
                         "use Python control flow on static values, which export unrolls")
    val = fx_node.meta.get("val")
    if isinstance(val, (*_STATIC, *_SYMBOLIC)):
        return _static(fx_node, val)
    if not isinstance(target, torch._ops.OpOverload):
        raise node_error(fx_node, "an ATen operator", str(target),
                         "rewrite the model code so torch.export produces ATen ops")
    return _call(graph, fx_node, values)


def _refuse_mutations(ep: ExportedProgram) -> None:
    """In-place updates of inputs and parameters have no place in a program (buffers do: they
    become state)."""
    mutated = [f"{spec.kind.name.lower()} {spec.target}" for spec in ep.graph_signature.output_specs
               if spec.kind in (OutputKind.USER_INPUT_MUTATION, OutputKind.PARAMETER_MUTATION)]
    if mutated:
        raise UnsupportedModelError("model forward()", "no in-place update of inputs or "
                                    "parameters", f"updates of {', '.join(mutated)}",
                                    "return the new values as outputs, or keep the value in a "
                                    "buffer (register_buffer), which becomes state")


def _mutated_buffers(ep: ExportedProgram) -> list[str]:
    """Placeholder names of the buffers forward() updates, in the order of their updates
    (torch.export lists buffer mutations first among the outputs)."""
    placeholder = {spec.target: spec.arg.name for spec in ep.graph_signature.input_specs
                   if spec.kind == InputKind.BUFFER}
    return [placeholder[spec.target] for spec in ep.graph_signature.output_specs
            if spec.kind == OutputKind.BUFFER_MUTATION]


def _state_updates(args: Any, values: dict[torch.fx.Node, Any], state: list[str]) -> list[str]:
    """The tensors holding each state buffer's new value."""
    found = [values.get(v) if isinstance(v, torch.fx.Node) else v for v in args]
    bad = [name for name, r in zip(state, found, strict=True) if not isinstance(r, Ref)]
    if bad:
        raise UnsupportedModelError(f"buffers {bad}", "updated with tensor values",
                                    "constant values", "compute the new value from tensors")
    return [r.name for r in found]


def _constant_inputs(ep: ExportedProgram) -> dict[str, Any]:
    """Lifted parameters, buffers and constant tensors by placeholder name."""
    return {  # non-persistent buffers and lifted constants live in ep.constants
        spec.arg.name: ep.state_dict.get(spec.target, ep.constants.get(spec.target))
        for spec in ep.graph_signature.input_specs if spec.kind != InputKind.USER_INPUT
    }


def _placeholder(graph: Graph, fx_node: torch.fx.Node, consts: dict[str, Any]) -> Any:
    val = fx_node.meta.get("val")
    if fx_node.name not in consts:
        if not isinstance(val, torch.Tensor):
            return val  # a non-tensor input: torch.export specialised the graph to its value
        tensor = _tensor(fx_node.name, val, "input")
        graph.inputs.append(fx_node.name)
    else:
        value = consts[fx_node.name]
        if not isinstance(value, torch.Tensor):
            raise node_error(fx_node, "a tensor constant", type(value).__name__,
                             "keep script objects out of the exported module")
        kind = "state" if fx_node.name in graph.state_updates else "const"
        tensor = _tensor(fx_node.name, val, kind)
        tensor.data = np.array(value.detach().cpu().numpy(), order="C")
    graph.tensors[tensor.name] = tensor
    return Ref(tensor.name)


def _static(fx_node: torch.fx.Node, val: Any) -> int | float | bool:
    """The value of a scalar node (a size, or arithmetic on sizes) known at export."""
    if isinstance(val, _SYMBOLIC):
        raise node_error(fx_node, "a value known at export", f"symbolic {val}",
                         "a size or scalar depends on tensor data (.item(), nonzero) or on a "
                         "dynamic dim; NEE programs have static shapes")
    return val


def _tensor(name: str, val: Any, kind: str) -> Tensor:
    if not isinstance(val, torch.Tensor):
        raise UnsupportedModelError(name, "a tensor value", type(val).__name__,
                                    "only tensor IO is supported")
    if any(isinstance(s, torch.SymInt) for s in val.shape):
        raise UnsupportedModelError(name, "a static shape", f"symbolic shape {tuple(val.shape)}",
                                    "export with static example inputs (no dynamic_shapes)")
    shape = tuple(int(s) for s in val.shape)
    return Tensor(name, shape, numpy_dtype(val.dtype, name), kind)


def _call(graph: Graph, fx_node: torch.fx.Node, values: dict[torch.fx.Node, Any]) -> Any:
    op = fx_node.target
    schema_args = op._schema.arguments
    named = dict(zip((a.name for a in schema_args), fx_node.args, strict=False))
    named.update(fx_node.kwargs)
    args = {k: _value(v, values, f"{fx_node.name}.{k}") for k, v in named.items()}
    args = {k: v for k, v in args.items() if v is not _DROP}
    val = fx_node.meta.get("val")
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise node_error(fx_node, "tensor results", f"{[type(v).__name__ for v in vals]}",
                         "please report this model")
    unsupported = sorted({str(v.dtype) for v in vals if v.dtype not in _DTYPES})
    if unsupported:
        call = high_level_call(fx_node)
        raise node_error(fx_node, f"results of a dtype in {sorted(_DTYPES.values())}",
                         f"{', '.join(unsupported)} from {call or canonical_name(op)}",
                         "NEE has no complex tensors or kernels making them (FFT): compute "
                         "this outside the exported model")
    outs = [fx_node.name] if len(vals) == 1 else [f"{fx_node.name}_{i}" for i in range(len(vals))]
    for name, v in zip(outs, vals, strict=True):
        graph.tensors[name] = _tensor(name, v, "activation")
    call = high_level_call(fx_node)
    graph.nodes.append(Node(canonical_name(op), args, outs, source_line(fx_node),
                            call=call if call != op._schema.name.partition("::")[2] else ""))
    refs_ = [Ref(n) for n in outs]
    return refs_ if isinstance(val, (tuple, list)) else refs_[0]


_DROP = object()


def _value(v: Any, values: dict[torch.fx.Node, Any], where: str) -> Any:
    """An fx argument as an IR value: Ref for tensors, numpy names for dtypes."""
    if isinstance(v, torch.fx.Node):
        return values[v]
    if isinstance(v, (list, tuple)):
        return [_value(x, values, where) for x in v]
    if isinstance(v, torch.dtype):
        return numpy_dtype(v, where)
    if isinstance(v, _OPTION_TYPES):
        return _DROP
    return v


def _outputs(args: Any, values: dict[torch.fx.Node, Any],
             names: list[str]) -> tuple[list[str], list[str]]:
    """The tensor outputs and their user names; constant outputs (None, ints) are dropped."""
    tensors, kept = [], []
    for v, name in zip(args, names, strict=True):
        value = values.get(v) if isinstance(v, torch.fx.Node) else v
        if isinstance(value, Ref):
            tensors.append(value.name)
            kept.append(name)
        elif not isinstance(value, (*_STATIC, type(None))):
            raise UnsupportedModelError(f"model output {name}",
                                        "tensors (or constants, which are dropped)", repr(v),
                                        "return tensors from forward()")
    if not tensors:
        raise UnsupportedModelError("model outputs", "at least one tensor", "none",
                                    "return a tensor or a tuple of tensors from forward()")
    return tensors, kept
