"""Post-training quantization with PT2E: trace, annotate (NeeQuantizer), calibrate, convert.

The converted module computes in float with ``quantize -> dequantize`` pairs at every point
the quantizer chose; capture keeps those nodes and the ``fold_qdq`` pass turns the patterns
around each op into integer ops.
"""

from __future__ import annotations

import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from toolchain.errors import ExportError
from toolchain.export.capture import trace
from toolchain.quantize.options import Int8Options, Sample
from toolchain.quantize.quantizer import NeeQuantizer


def quantize_model(model: torch.nn.Module, example_inputs: Sample,
                   options: Int8Options) -> torch.fx.GraphModule:
    """The PT2E-converted module (float ops between quantize/dequantize nodes)."""
    module = trace(model, example_inputs).module(check_guards=False)
    prepared = prepare_pt2e(module, NeeQuantizer(options.observer))
    with torch.no_grad():
        for i, sample in enumerate(options.calibration):
            try:
                prepared(*sample)
            except Exception as e:  # a sample of the wrong arity, shape or dtype
                raise ExportError(f"calibration sample {i}", "inputs like example_inputs()",
                                  f"{type(e).__name__}: {str(e).splitlines()[0]}",
                                  "give each sample as a tuple with one tensor per input") from e
    return convert_pt2e(prepared)
