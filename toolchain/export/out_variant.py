"""Map a functional ATen overload to its out-variant (``aten.add.Tensor`` -> ``aten.add.out``)."""

from __future__ import annotations

import functools

import torch


def _is_out_arg(arg: torch._C.Argument) -> bool:
    return arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write


# Tensor-options args of factory/conversion ops: implied by the pre-allocated out tensor.
_IMPLIED_BY_OUT = frozenset({"dtype", "layout", "device", "pin_memory"})


def _signature(schema: torch._C.FunctionSchema) -> tuple[tuple[str, str], ...]:
    return tuple(
        (a.name, str(a.type))
        for a in schema.arguments
        if not _is_out_arg(a) and a.name not in _IMPLIED_BY_OUT
    )


def out_arg_names(schema: torch._C.FunctionSchema) -> list[str]:
    """Names of the pre-allocated output arguments of an out-variant schema, in order."""
    return [a.name for a in schema.arguments if _is_out_arg(a)]


def canonical_name(op: torch._ops.OpOverload) -> str:
    """``aten::add.out`` style name of an overload, as used by kernel registries."""
    return f"{op._schema.name}.{op._overloadname}"


@functools.cache
def find_out_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The overload of ``op``'s packet taking the same inputs plus write-aliased ``out`` args."""
    want = _signature(op._schema)
    packet = op.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        if out_arg_names(cand._schema) and _signature(cand._schema) == want:
            return cand
    return None
