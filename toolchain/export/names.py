"""Names of a program's outputs as the model gives them.

In order of preference: the module's ``output_names()`` hook (one name per returned tensor, in
the order ``forward`` returns them once flattened), the keys of what ``forward`` returns (dict
keys, named-tuple fields, HF ``ModelOutput`` attributes, joined with "." through nesting), else
``output_<i>`` for the i-th returned value.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import TreeSpec

from toolchain.errors import ExportError


def output_names(model: torch.nn.Module, out_spec: TreeSpec) -> list[str]:
    """One name per leaf of ``out_spec`` (the flattened return value of ``model.forward``)."""
    hook = getattr(model, "output_names", None)
    if hook is None:
        return leaf_names(out_spec)
    names = list(hook() if callable(hook) else hook)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if len(names) != out_spec.num_leaves or bad or len(set(names)) != len(names):
        raise ExportError(f"{type(model).__name__}.output_names()",
                          f"{out_spec.num_leaves} distinct non-empty strings, one per value "
                          "forward() returns", repr(names),
                          "return one name per returned tensor, in order")
    return names


def leaf_names(out_spec: TreeSpec) -> list[str]:
    """Names from the structure of the return value alone: keys, fields, else positions."""
    return [_joined(path) for path in _paths(out_spec, ())]


def _paths(spec: TreeSpec, prefix: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The key path of every leaf: strings for named children, ints for positions."""
    if spec.is_leaf():
        return [prefix]
    children = spec.children()
    keys = _keys(spec, len(children))
    return [path for key, child in zip(keys, children, strict=True)
            for path in _paths(child, (*prefix, key))]


def _keys(spec: TreeSpec, count: int) -> list[Any]:
    context = spec.context
    if isinstance(context, (list, tuple)) and len(context) == count and all(
            isinstance(k, str) for k in context):
        return list(context)  # dict keys, HF ModelOutput fields
    if isinstance(context, type) and hasattr(context, "_fields"):
        return list(context._fields)  # a named tuple
    return list(range(count))


def _joined(path: tuple[Any, ...]) -> str:
    """``("logits",)`` -> "logits", ``(1,)`` -> "output_1", ``("hidden", 0)`` -> "hidden.0"."""
    if not path:
        return "output_0"
    head = f"output_{path[0]}" if isinstance(path[0], int) else path[0]
    return ".".join([head, *map(str, path[1:])])
