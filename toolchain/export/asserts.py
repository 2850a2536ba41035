"""Runtime asserts torch.export leaves in a graph: checked at export where they can be, dropped.

``Tensor.to(dtype/device)`` calls that change nothing become ``_assert_tensor_metadata`` nodes
(the dtype casts in Llama's RMSNorm, ``.to(x.device)`` in GPT-2); ``torch._check`` on sizes
becomes ``_assert_scalar``. With static shapes both are decided here: a failing one is an
ExportError at the model line. Asserts on tensor values (``torch._assert_async``) and range
constraints on sizes cannot fail in a static program the checks above accepted, or depend on
values a bundle does not check at run time; they are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from toolchain.errors import UnsupportedModelError
from toolchain.export.source import source_line

aten = torch.ops.aten


def _bound(fx_node: torch.fx.Node) -> dict[str, Any]:
    names = [a.name for a in fx_node.target._schema.arguments]
    return {**dict(zip(names, fx_node.args, strict=False)), **fx_node.kwargs}


def _where(fx_node: torch.fx.Node) -> str:
    return f"{fx_node.target} at {source_line(fx_node) or '<unknown source>'}"


def check_tensor_metadata(fx_node: torch.fx.Node) -> None:
    """``_assert_tensor_metadata(a, size, stride, dtype)``: dtype and size must match ``a``."""
    args = _bound(fx_node)
    val = args["a"].meta["val"]
    size = args.get("size")
    for key, expected, found in (("dtype", args.get("dtype"), val.dtype),
                                 ("size", size and [int(s) for s in size], list(val.shape))):
        if expected is not None and expected != found:
            raise UnsupportedModelError(_where(fx_node), f"{key} {expected}", f"{key} {found}",
                                        "the model asserts a tensor property that does not hold")


def check_scalar(fx_node: torch.fx.Node) -> None:
    """``_assert_scalar(cond, msg)``: a condition on sizes, decided at export."""
    args = _bound(fx_node)
    cond = args["self"]
    value = cond.meta.get("val") if isinstance(cond, torch.fx.Node) else cond
    if isinstance(value, bool) and not value:
        raise UnsupportedModelError(_where(fx_node), "the asserted condition to hold",
                                    f"it fails: {args.get('assert_msg', '')}",
                                    "the example inputs violate a check in the model")


def _drop(fx_node: torch.fx.Node) -> None:
    del fx_node


RUNTIME_ASSERTS: dict[Any, Callable[[torch.fx.Node], None]] = {
    aten._assert_tensor_metadata.default: check_tensor_metadata,
    aten._assert_scalar.default: check_scalar,
    aten._assert_async.default: _drop,
    aten._assert_async.msg: _drop,
    aten.sym_constrain_range.default: _drop,
    aten.sym_constrain_range_for_size.default: _drop,
}
