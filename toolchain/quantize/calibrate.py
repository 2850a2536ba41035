"""Post-training quantization with PT2E: trace, annotate (NeeQuantizer), calibrate, convert.

The converted module computes in float with ``quantize -> dequantize`` pairs at every point
the quantizer chose; capture keeps those nodes and the ``fold_qdq`` pass turns the patterns
around each op into integer ops.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from toolchain.errors import ExportError
from toolchain.export.capture import trace
from toolchain.quantize.options import Int8Options, Sample
from toolchain.quantize.quantizer import NeeQuantizer

aten = torch.ops.aten


# Recurrent layers torch.export keeps as one op (nn.GRU, nn.LSTM, nn.RNN), decomposed before
# annotation into the linear layers and gate math the quantizer annotates (else they would
# stay float, between quantize/dequantize pairs).
RECURRENT = (aten.gru.input, aten.lstm.input, aten.rnn_tanh.input, aten.rnn_relu.input)


def quantize_model(model: torch.nn.Module, example_inputs: Sample,
                   options: Int8Options) -> torch.fx.GraphModule:
    """The PT2E-converted module (float ops between quantize/dequantize nodes)."""
    program = trace(model, example_inputs)
    if any(n.target in RECURRENT for n in program.graph.nodes):
        program = program.run_decompositions(get_decompositions(RECURRENT))
    module = _contiguous_linear_inputs(program.module(check_guards=False))
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


def _contiguous_linear_inputs(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A linear layer over a non-contiguous input of 3 or more dims (a batch-first recurrent
    layer's transposed sequence) reads a contiguous copy of it: capture then writes one matrix
    product over its rows, which folds to int8, instead of a batched product with an expanded
    weight, which has no int8 form."""
    graph = module.graph
    for node in list(graph.nodes):
        x = node.args[0] if node.target == aten.linear.default else None
        value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if value is None or value.dim() < 3 or value.is_contiguous():
            continue
        with graph.inserting_before(node):
            copy = graph.call_function(aten.clone.default, (x,),
                                       {"memory_format": torch.contiguous_format})
        copy.meta["val"] = value.contiguous()
        node.replace_input_with(x, copy)
    module.recompile()
    return module
