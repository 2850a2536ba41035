"""Accuracy of a quantized program: its outputs, run by the runtime, against the float model's.

Per output over all samples: SQNR = 10 log10(sum ref^2 / sum (ref - out)^2) in dB (inf when
exact) and the largest absolute error. Samples held out from calibration make it honest; when
there are none the example inputs are used and the report says they were not held out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_leaves

from toolchain.export.result import ExportResult


@dataclass(frozen=True)
class OutputAccuracy:
    """One output's int8-vs-float numbers."""

    output: str
    sqnr_db: float
    max_abs_error: float
    samples: int
    held_out: bool

    def __str__(self) -> str:
        kind = "held-out" if self.held_out else "calibration (none held out)"
        return (f"{self.output}: SQNR {self.sqnr_db:.1f} dB, max abs error "
                f"{self.max_abs_error:.4g} over {self.samples} {kind} sample(s)")


def measure(model: torch.nn.Module, result: ExportResult, samples: Sequence[tuple[Any, ...]],
            held_out: bool) -> tuple[OutputAccuracy, ...]:
    """Run ``result`` (written to a temporary bundle) and ``model`` on ``samples``."""
    from toolchain.serialize.bundle import host_outputs

    names, outs = host_outputs(result, [numpy_inputs(s) for s in samples])
    pairs = [(reference_outputs(model, s), out) for s, out in zip(samples, outs, strict=True)]
    return tuple(_accuracy(name, [(ref[i], out[i]) for ref, out in pairs], held_out)
                 for i, name in enumerate(names))


def reference_outputs(model: torch.nn.Module, sample: tuple[Any, ...]) -> list[np.ndarray]:
    """The model's tensor outputs on ``sample`` (torch eager, no autograd), as numpy."""
    with torch.no_grad():
        leaves = tree_leaves(model(*sample))
    return [t.numpy() for t in leaves if isinstance(t, torch.Tensor)]


def numpy_inputs(sample: tuple[Any, ...]) -> list[np.ndarray]:
    """The tensors of ``sample`` as numpy arrays (the program's inputs)."""
    return [t.numpy() for t in sample if isinstance(t, torch.Tensor)]


def _accuracy(name: str, pairs: list[tuple[np.ndarray, np.ndarray]],
              held_out: bool) -> OutputAccuracy:
    signal = sum(float(np.sum(np.square(r, dtype=np.float64))) for r, _ in pairs)
    noise = sum(float(np.sum(np.square(r.astype(np.float64) - o))) for r, o in pairs)
    worst = max(float(np.max(np.abs(r.astype(np.float64) - o), initial=0.0)) for r, o in pairs)
    sqnr = math.inf if noise == 0 else 10 * math.log10(max(signal, 1e-30) / noise)
    return OutputAccuracy(name, sqnr, worst, len(pairs), held_out)
