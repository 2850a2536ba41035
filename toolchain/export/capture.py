"""Capture: ``torch.export`` an nn.Module, decompose to core ATen, convert to NEE's IR."""

from __future__ import annotations

import operator
import re
import warnings
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from toolchain.errors import ExportError
from toolchain.export.out_variant import canonical_name
from toolchain.ir import Graph, Node, Ref, Tensor

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


def numpy_dtype(dtype: torch.dtype, where: str) -> str:
    """The numpy name of a torch dtype, or a clear error naming ``where`` it appeared."""
    if dtype not in _DTYPES:
        raise ExportError(
            where, f"a dtype in {sorted(_DTYPES.values())}", str(dtype), "cast the model first"
        )
    return _DTYPES[dtype]


def export_program(model: torch.nn.Module, example_inputs: tuple[Any, ...]) -> ExportedProgram:
    """``torch.export`` the model in eval mode and decompose it to core ATen."""
    model = model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # torch 2.13's own pytree code warns about itself on every export
            warnings.filterwarnings("ignore", ".*LeafSpec.*", FutureWarning)
            return torch.export.export(model, tuple(example_inputs)).run_decompositions()
    except Exception as e:  # torch raises many types; report them uniformly
        first = (str(e).strip().splitlines() or [""])[0]
        raise ExportError(
            f"torch.export of {type(model).__name__}", "a model traceable with its example inputs",
            f"{type(e).__name__}: {first}",
            "run the model eagerly on the same inputs first; see the torch.export docs on "
            "graph breaks and dynamic control flow",
        ) from e


def source_line(node: torch.fx.Node) -> str:
    """``file:line: code`` of the innermost model frame that produced this node."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', trace)
    if not frames:
        return ""
    user = [f for f in frames if "/torch/" not in f[0]]
    path, line, code = (user or frames)[-1]
    return f"{path}:{line}: {code.strip()}"


def to_graph(ep: ExportedProgram) -> Graph:
    """Convert a decomposed ExportedProgram into a NEE Graph (functional ops, views as nodes)."""
    graph = Graph(tensors={}, nodes=[], inputs=[], outputs=[])
    names: dict[torch.fx.Node, Any] = {}
    consts = _constant_inputs(ep)
    for fx_node in ep.graph.nodes:
        if fx_node.op == "placeholder":
            names[fx_node] = _placeholder(graph, fx_node, consts.get(fx_node.name))
        elif fx_node.op == "call_function" and fx_node.target is operator.getitem:
            source, index = fx_node.args
            names[fx_node] = names[source][index]
        elif fx_node.op == "call_function":
            names[fx_node] = _call(graph, fx_node, names)
        elif fx_node.op == "output":
            graph.outputs = [_output_name(names, v) for v in fx_node.args[0]]
        else:
            raise ExportError(fx_node.name, "placeholder/call_function/output", fx_node.op, "")
    return graph


def _constant_inputs(ep: ExportedProgram) -> dict[str, torch.Tensor]:
    """Lifted parameters, buffers and constant tensors by placeholder name."""
    return {  # non-persistent buffers and lifted constants live in ep.constants
        spec.arg.name: ep.state_dict.get(spec.target, ep.constants.get(spec.target))
        for spec in ep.graph_signature.input_specs if spec.kind != InputKind.USER_INPUT
    }


def _placeholder(graph: Graph, fx_node: torch.fx.Node, value: torch.Tensor | None) -> Ref:
    val = fx_node.meta["val"]
    if value is None:
        tensor = _tensor(fx_node.name, val, "input")
        graph.inputs.append(fx_node.name)
    else:
        tensor = _tensor(fx_node.name, val, "const")
        tensor.data = np.array(value.detach().cpu().numpy(), order="C")
    graph.tensors[tensor.name] = tensor
    return Ref(tensor.name)


def _tensor(name: str, val: Any, kind: str) -> Tensor:
    if not isinstance(val, torch.Tensor):
        raise ExportError(name, "a tensor value", type(val).__name__, "only tensor IO is supported")
    shape = tuple(int(s) for s in val.shape)
    return Tensor(name, shape, numpy_dtype(val.dtype, name), kind)


def _call(graph: Graph, fx_node: torch.fx.Node, names: dict[torch.fx.Node, Any]) -> Any:
    op = fx_node.target
    if not isinstance(op, torch._ops.OpOverload):
        raise ExportError(
            f"{fx_node.name} ({source_line(fx_node)})", "an ATen operator", str(op),
            "rewrite the model code so torch.export produces ATen ops",
        )
    schema_args = op._schema.arguments
    values = dict(zip((a.name for a in schema_args), fx_node.args, strict=False))
    values.update(fx_node.kwargs)
    args = {k: _value(v, names, f"{fx_node.name}.{k}") for k, v in values.items()}
    args = {k: v for k, v in args.items() if v is not _DROP}
    val = fx_node.meta["val"]
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    outs = [fx_node.name] if len(vals) == 1 else [f"{fx_node.name}_{i}" for i in range(len(vals))]
    for name, v in zip(outs, vals, strict=True):
        graph.tensors[name] = _tensor(name, v, "activation")
    graph.nodes.append(Node(canonical_name(op), args, outs, source_line(fx_node)))
    refs_ = [Ref(n) for n in outs]
    return refs_ if isinstance(val, (tuple, list)) else refs_[0]


_DROP = object()


def _value(v: Any, names: dict[torch.fx.Node, Any], where: str) -> Any:
    """An fx argument as an IR value: Ref for tensors, numpy names for dtypes."""
    if isinstance(v, torch.fx.Node):
        return names[v]
    if isinstance(v, (list, tuple)):
        return [_value(x, names, where) for x in v]
    if isinstance(v, torch.dtype):
        return numpy_dtype(v, where)
    if isinstance(v, _OPTION_TYPES):
        return _DROP
    return v


def _output_name(names: dict[torch.fx.Node, Any], v: Any) -> str:
    ref = names.get(v) if isinstance(v, torch.fx.Node) else None
    if not isinstance(ref, Ref):
        raise ExportError("model output", "tensors only", repr(v),
                          "return a tensor or a tuple of tensors from forward()")
    return ref.name
