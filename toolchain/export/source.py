"""Where an fx node came from in the model: its source line and the torch call that made it."""

from __future__ import annotations

import re

import torch

from toolchain.errors import UnsupportedModelError


def source_line(node: torch.fx.Node) -> str:
    """``file:line: code`` of the innermost model frame that produced this node."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', trace)
    if not frames:
        return ""
    user = [f for f in frames if "/torch/" not in f[0] and not f[0].startswith("<")]
    path, line, code = (user or frames)[-1]
    return f"{path}:{line}: {code.strip()}"


def high_level_call(node: torch.fx.Node) -> str:
    """The torch function the model called that produced this node (``linear``,
    ``scaled_dot_product_attention`` ...), or "" when unknown."""
    torch_fn = node.meta.get("torch_fn")
    return torch_fn[1].rpartition(".")[2] if torch_fn else ""


def node_error(fx_node: torch.fx.Node, expected: str, found: str,
               hint: str) -> UnsupportedModelError:
    """An UnsupportedModelError naming ``fx_node``, its target and its model source line."""
    target = getattr(fx_node.target, "__name__", str(fx_node.target))
    where = f"node {fx_node.name} ({target}) at {source_line(fx_node) or '<unknown source>'}"
    return UnsupportedModelError(where, expected, found, hint)
