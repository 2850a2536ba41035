"""Pass: give kernels that need a workspace (im2col columns, padded input) a planned scratch.

Rewrites: for every node whose kernel declares ``Kernel.scratch``, asks it for the bytes it needs
    for this call's shapes and constants' layouts (within ``Graph.scratch_budget`` when a board
    sets one: convolution then builds its im2col columns in row tiles) and adds a ``scratch``
    argument: a uint8 tensor of kind "scratch", planned in the arena like any activation and
    live only during that node.
Requires: "out_variant" (kernels are looked up by out-variant name).
Ensures: "scratch_planned": every such node has its scratch; nothing is allocated at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime_py.kernels import KERNELS
from toolchain.ir import SCRATCH_ARG, Graph, Node, Ref, Tensor


def add_scratch(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    for node in graph.nodes:
        if SCRATCH_ARG not in node.args:
            size_scratch(graph, node)
    graph.ensured.add("scratch_planned")
    return graph


def size_scratch(graph: Graph, node: Node, at_least: int = 0) -> None:
    """Give ``node`` the scratch its kernel asks for its arguments as they stand (at least
    ``at_least`` bytes), or resize the one it has (dropped if it now needs none)."""
    kernel = KERNELS.get(node.op)
    if kernel is None or kernel.scratch is None:
        return
    budget = {} if graph.scratch_budget is None else {"budget": graph.scratch_budget}
    args = {k: _placeholder(graph, v) for k, v in node.args.items() if k != SCRATCH_ARG}
    nbytes = max(kernel.scratch(**args, **budget), at_least)
    old = node.args.pop(SCRATCH_ARG, None)
    if old is not None:
        del graph.tensors[old.name]
    if nbytes > 0:
        name = f"{node.outputs[0]}_scratch"
        graph.tensors[name] = Tensor(name, (nbytes,), "uint8", "scratch")
        node.args[SCRATCH_ARG] = Ref(name)


def _placeholder(graph: Graph, value: Any) -> Any:
    """Constants as their values (a kernel may size its workspace by a weight's layout; not in
    a symbolic export's samples, whose programs must agree at every size), other tensors as
    zero-stride arrays of the right shape and dtype (no memory), but a map stored in another
    dim order (channels-last, ``Graph.is_layout``) as that view of an untouched array (its
    pages are never written, so never committed), lists as tuples."""
    if isinstance(value, Ref):
        if graph.is_const(value.name) and graph.static_shapes:
            return graph.const_value(value.name)
        t = graph.tensors[value.name]
        if graph.is_layout(t.name):  # a whole view: offset 0
            root = np.empty(graph.tensors[t.view_of].shape, t.dtype)
            return np.lib.stride_tricks.as_strided(root, t.shape,
                                                   [s * root.itemsize for s in t.strides])
        return np.lib.stride_tricks.as_strided(np.zeros(1, t.dtype), t.shape, (0,) * len(t.shape))
    if isinstance(value, list):
        return [_placeholder(graph, v) for v in value] if any(
            isinstance(v, Ref) for v in value) else tuple(value)
    return value
