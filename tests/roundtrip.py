"""Export a module, run the bundle, compare with torch eager: the helper end-to-end tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree

from runtime_py.program import Program
from toolchain.export import export
from toolchain.export.result import ExportResult
from toolchain.serialize.bundle import write_bundle


def eager_outputs(model: torch.nn.Module, inputs: tuple[Any, ...]) -> list[np.ndarray]:
    """The tensor leaves of ``model(*inputs)`` in torch.export's output order, as numpy."""
    with torch.no_grad():
        out = model(*inputs)
    return [leaf.numpy() for leaf in _pytree.tree_leaves(out) if isinstance(leaf, torch.Tensor)]


def max_rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (absolute when ``want`` is all zero)."""
    scale = float(np.abs(want).max(initial=0.0)) or 1.0
    return float(np.abs(got.astype(np.float64) - want).max(initial=0.0)) / scale


def run_both(model: torch.nn.Module, *inputs: Any, tmp_path: Path, rtol: float = 1e-5,
             atol: float = 1e-6, **options: Any) -> ExportResult:
    """Export and run ``model``; assert every output matches eager; return the export result."""
    model = model.eval()
    want = eager_outputs(model, inputs)
    result = export(model, inputs, **options)
    write_bundle(result, tmp_path / "m.nee")
    tensors = [t.numpy() for t in inputs if isinstance(t, torch.Tensor)]
    got = Program.load(tmp_path / "m.nee").run(*tensors)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return result
