"""Export the example models and list the out-variant kernels their non-view ops need."""

from __future__ import annotations

import operator
from pathlib import Path
from types import ModuleType

import torch

from toolchain.export.asserts import RUNTIME_ASSERTS
from toolchain.export.capture import export_program
from toolchain.export.out_variant import canonical_name, find_out_variant
from toolchain.modules import load_file, model_files
from toolchain.passes.alias_views import VIEW_RULES
from toolchain.passes.to_out_variant import NEE_OUT_VARIANTS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_NAMES = [p.stem for p in model_files(EXAMPLES)]


def load_example(name: str) -> ModuleType:
    return load_file(EXAMPLES / f"{name}.py")


def exported_ops(name: str) -> set[torch._ops.OpOverload]:
    """call_function targets of the example's core-ATen graph (getitem and the runtime asserts
    that capture checks and drops excluded)."""
    module = load_example(name)
    graph = export_program(module.Model(), module.example_inputs()).graph
    return {n.target for n in graph.nodes if n.op == "call_function"
            and n.target is not operator.getitem and n.target not in RUNTIME_ASSERTS}


def example_kernel_names(name: str) -> frozenset[str]:
    """Out-variant names of the example's ops that alias_views does not turn into views
    (``"<no out variant> op"`` if missing)."""
    names = set()
    for op in exported_ops(name):
        if canonical_name(op) in VIEW_RULES:
            continue
        out = find_out_variant(op)
        nee = NEE_OUT_VARIANTS.get(canonical_name(op), f"<no out variant> {op}")
        names.add(canonical_name(out) if out is not None else nee)
    return frozenset(names)
