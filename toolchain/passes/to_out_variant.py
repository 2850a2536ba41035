"""Pass: rewrite every functional ATen call into its out-variant with pre-allocated outputs.

Rewrites: ``aten::add.Tensor(self, other)`` -> ``aten::add.out(self, other, out=<tensor>)``; the
    out arguments (``out``, or ``out0``/``indices``... for multi-output ops) name the node's output
    tensors, which the memory planner later places. Arguments the out overload does not take
    (dtype/device options implied by the out tensor) are dropped.
Requires: "views_aliased" (view ops have no out-variant; they are aliases by now).
    Ops ATen has no out overload for that NEE runs as a kernel of its own (NEE_OUT_VARIANTS:
    attention) become that ``nee::`` out op with the same arguments plus ``out``.
Ensures: "out_variant": every node whose op has an out overload is an out call; ops without
    one are left as they are for ``check_supported`` to report with their source lines.
"""

from __future__ import annotations

import torch

from toolchain.export.out_variant import canonical_name, find_out_variant, out_arg_names
from toolchain.ir import Graph, Node, Ref

# Functional ATen op -> NEE's out op taking the same arguments plus ``out``.
NEE_OUT_VARIANTS = {
    "aten::scaled_dot_product_attention.default": "nee::scaled_dot_product_attention.out",
}


def to_out_variant(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    for node in graph.nodes:
        if node.out_names:
            continue
        if node.op in NEE_OUT_VARIANTS:
            node.op, node.out_names = NEE_OUT_VARIANTS[node.op], ["out"]
            node.args["out"] = Ref(node.outputs[0])
            continue
        out_op = find_out_variant(overload(node.op))
        if out_op is not None:
            _rewrite(node, out_op)
    graph.ensured.add("out_variant")
    return graph


def overload(name: str) -> torch._ops.OpOverload:
    """The torch OpOverload for a canonical ``ns::op.overload`` name."""
    qualified, _, overload_name = name.partition(".")
    namespace, _, op = qualified.partition("::")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload_name or "default")


def _rewrite(node: Node, out_op: torch._ops.OpOverload) -> None:
    taken = {a.name for a in out_op._schema.arguments}
    node.op = canonical_name(out_op)
    node.out_names = out_arg_names(out_op._schema)
    node.args = {k: v for k, v in node.args.items() if k in taken}
    node.args.update({k: Ref(t) for k, t in zip(node.out_names, node.outputs, strict=True)})
