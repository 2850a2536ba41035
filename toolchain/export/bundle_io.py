"""``--bundle-io``: the example inputs and the model's outputs on them, stored in the bundle for
``nee-run --verify`` (an on-device smoke test, as ExecuTorch's bundled programs give).

The tolerance is measured, not guessed: the bundle is run here with the runtime on the same
inputs, and a device run must be within ``ATOL + SLACK * (this run's largest deviation from
torch)`` absolutely or ``RTOL`` relatively. A device that computes what the host computes
passes; a damaged kernel, a wrong build or bad memory does not. For an int8 program the
reference is the float model, so the tolerance includes the quantization error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from toolchain.export.result import BundledVector, ExportResult
from toolchain.quantize.accuracy import numpy_inputs, reference_outputs
from toolchain.serialize.bundle import host_outputs

RTOL = 1e-5
ATOL = 1e-6
SLACK = 2.0


def bundled_vectors(model: torch.nn.Module, result: ExportResult,
                    samples: list[tuple[Any, ...]]) -> tuple[BundledVector, ...]:
    """One vector per sample: its inputs, ``model``'s outputs and the measured tolerance."""
    inputs = [numpy_inputs(s) for s in samples]
    _, outs = host_outputs(result, inputs)
    vectors = []
    for sample, arrays, got in zip(samples, inputs, outs, strict=True):
        want = reference_outputs(model, sample)
        drift = max((float(np.max(np.abs(g.astype(np.float64) - w), initial=0.0))
                     for g, w in zip(got, want, strict=True)), default=0.0)
        vectors.append(BundledVector(tuple(arrays), tuple(want), RTOL, ATOL + SLACK * drift))
    return tuple(vectors)
