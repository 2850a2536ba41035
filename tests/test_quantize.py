"""Int8 export: PT2E calibration with NeeQuantizer, the fold_qdq pass, int8 bundles that run
and match the quantized torch model, the accuracy report, and clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from runtime_py.loader import load_bundle
from runtime_py.program import Program
from toolchain.cli import export_main, inspect_main
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.modules import load_file
from toolchain.quantize.calibrate import quantize_model
from toolchain.quantize.options import Int8Options, split_samples
from toolchain.serialize.bundle import write_bundle

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

def load_example(name: str):
    return load_file(EXAMPLES / f"{name}.py")


FLOAT_OPS_ALLOWED = {"cnn": {"aten::_softmax.out"}, "gru": set(), "mlp": set(),
                     "mobilenet_v2": set()}


@pytest.fixture(scope="module")
def int8(tmp_path_factory):
    """``int8(name)`` -> (module, model, options, result, bundle path), once per example."""
    cache = {}

    def get(name: str):
        if name not in cache:
            module = load_example(name)
            model = module.Model().eval()
            options = Int8Options(*split_samples(module.calibration_inputs()))
            result = export(model, module.example_inputs(), quantize=options)
            path = tmp_path_factory.mktemp(name) / f"{name}_int8.nee"
            write_bundle(result, path)
            cache[name] = (module, model, options, result, path)
        return cache[name]

    return get


@pytest.mark.parametrize("name", sorted(FLOAT_OPS_ALLOWED))
def test_quantized_examples_run_in_int8(int8, name):
    _, _, _, result, _ = int8(name)
    graph = result.graph
    floats = {n.op for n in graph.nodes if graph.tensors[n.outputs[0]].dtype == "float32"
              and "quantize" not in n.op}
    assert floats <= FLOAT_OPS_ALLOWED[name]
    assert not any(n.op.startswith("quantized_decomposed") for n in graph.nodes)
    int8_ops = [n for n in graph.nodes if n.op.endswith("_int8.out")]
    assert int8_ops and all(graph.tensors[n.outputs[0]].quant for n in int8_ops)
    weights = [graph.tensors[n.args["weight"].name] for n in int8_ops if "weight" in n.args]
    assert all(w.dtype == "int8" and w.quant.axis == 0 for w in weights)
    assert all(np.abs(w.data).max() <= 127 for w in weights)


@pytest.mark.parametrize("name", sorted(FLOAT_OPS_ALLOWED))
def test_int8_bundle_matches_the_quantized_torch_model(int8, name):
    """NEE's integer arithmetic against PT2E's float simulation of it, on held-out inputs: as
    close to the float model (SQNR within 1.5 dB); on the shallow models also within a few
    output steps (through MobileNetV2's 52 layers rounding differences grow like noise)."""
    module, model, options, _, path = int8(name)
    simulated = quantize_model(model, module.example_inputs(), options)
    program = Program.load(path)
    ref, sim, got = [], [], []
    for sample in options.evaluation:
        with torch.no_grad():
            ref.append(model(*sample).numpy())
            sim.append(simulated(*sample).numpy())
        got.append(program.run(*[t.numpy() for t in sample])[0].copy())
    ref, sim, got = (np.concatenate(v) for v in (ref, sim, got))
    assert _sqnr(ref, got) >= _sqnr(ref, sim) - 1.5
    if name != "mobilenet_v2":
        assert np.abs(got - sim).max() <= 4 * np.abs(sim).max() / 127


def _sqnr(reference: np.ndarray, value: np.ndarray) -> float:
    return 10 * np.log10(np.sum(reference**2) / np.sum((reference - value) ** 2))


def test_accuracy_is_measured_on_held_out_samples_and_stored(int8):
    _, _, options, result, path = int8("mobilenet_v2")
    (accuracy,) = result.accuracy
    assert accuracy.held_out and accuracy.samples == len(options.evaluation) == 4
    assert accuracy.sqnr_db > 15
    (stored,) = load_bundle(path).bundle.accuracy
    assert stored.output == "output_0" and stored.sqnrDb == pytest.approx(accuracy.sqnr_db)
    done = CliRunner().invoke(inspect_main, [str(path)])
    assert done.exit_code == 0, done.output
    assert "SQNR" in done.output and "ops left in float (0" in done.output
    assert "int8[1, 32, 48, 48] (scale " in done.output  # a layer output with its parameters


def test_int8_weights_make_the_bundle_smaller(int8, exported):
    _, _, _, _, path = int8("mobilenet_v2")
    assert path.stat().st_size < 0.35 * exported("mobilenet_v2").path.stat().st_size


def test_cli_quantizes_with_calibration_folder(tmp_path):
    folder = tmp_path / "calibration"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        np.savez(folder / f"{i:02d}.npz", x=rng.standard_normal((4, 16)).astype(np.float32))
    out = tmp_path / "mlp_int8.nee"
    done = CliRunner().invoke(export_main, [f"{EXAMPLES}/mlp.py:Model", "-o", str(out),
                                            "--quantize", "int8", "--calibration", str(folder)])
    assert done.exit_code == 0, done.output
    assert "calibrated int8 on 6 sample(s)" in done.output and "SQNR" in done.output
    assert Program.load(out).run(rng.standard_normal((4, 16)).astype(np.float32))


def test_quantize_without_calibration_data_is_a_clear_error(tmp_path):
    done = CliRunner().invoke(export_main, [f"{EXAMPLES}/transformer.py:Model", "-o",
                                            str(tmp_path / "t.nee"), "--quantize", "int8"])
    assert done.exit_code == 1 and "calibration_inputs()" in done.output
    assert "Traceback" not in done.output


def test_bad_calibration_sample_names_the_sample():
    module = load_example("mlp")
    bad = Int8Options([(torch.zeros(4, 16),), (torch.zeros(3, 5),)])
    with pytest.raises(ExportError, match="calibration sample 1"):
        export(module.Model(), module.example_inputs(), quantize=bad)


def test_a_model_quantized_by_the_user_with_pt2e_is_accepted():
    """torchao's copy of ExecuTorch's XNNPACKQuantizer (int8 activations, per-channel
    symmetric weights): its converted module exports straight to int8 ops."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    module = load_example("cnn")
    inputs = module.example_inputs()
    graph = torch.export.export(module.Model().eval(), inputs).module(check_guards=False)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(True))
    prepared = prepare_pt2e(graph, quantizer)
    for sample in module.calibration_inputs()[:4]:
        prepared(*sample)
    result = export(convert_pt2e(prepared), inputs)
    assert sum(n.op == "nee::conv2d_int8.out" for n in result.graph.nodes) == 3


def test_linear_layers_on_3d_inputs_run_in_int8_and_an_inf_masked_softmax_stays_float():
    """A transformer: its linear layers reshape to 2-D and back around the int8 op; the
    attention scores carry a -inf mask, which cannot be quantized, so that softmax stays float
    instead of getting an infinite scale."""
    module = load_example("transformer")
    generator = torch.Generator().manual_seed(0)
    samples = [(torch.randint(0, 100, (1, 32), generator=generator),) for _ in range(8)]
    result = export(module.Model(), module.example_inputs(),
                    quantize=Int8Options(*split_samples(samples)))
    ops = [n.op for n in result.graph.nodes]
    assert ops.count("nee::linear_int8.out") == 5 and ops.count("aten::_softmax.out") == 1
    assert result.accuracy[0].sqnr_db > 25


class _Arithmetic(torch.nn.Module):
    """add, sub (both ways) and mul with numbers, a chunk and sigmoid feeding a multiply."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.fc(x).chunk(2, dim=-1)
        gate = torch.sigmoid(a)
        return (1 - gate) * (b + 3) - gate * (b * 0.5 - 2)


def test_numbers_splits_and_fixed_outputs_fold_without_requantization():
    """Number operands become 0-d int8 constants of add/sub/mul; the pieces of a chunk share the
    linear layer's parameters (slices, no calls); sigmoid's output is read with its own fixed
    parameters: no quantize or dequantize between the linear layer and the output's."""
    torch.manual_seed(0)
    samples = [(torch.randn(4, 8),) for _ in range(8)]
    model = _Arithmetic().eval()
    result = export(model, samples[0], quantize=Int8Options(*split_samples(samples)))
    ops = [n.op for n in result.graph.nodes]
    assert ops.count("nee::quantize_per_tensor.out") == 1, ops  # the input's, and the
    assert ops.count("nee::dequantize_per_tensor.out") == 1, ops  # output's
    assert {"nee::sub_int8.out", "nee::add_int8.out", "nee::mul_int8.out"} <= set(ops)
    assert "aten::split_with_sizes.out" not in ops
    zero_d = [t for t in result.graph.tensors.values() if t.kind == "const" and not t.shape]
    assert len(zero_d) == 4 and all(t.dtype == "int8" and t.quant for t in zero_d)
    assert result.accuracy[0].sqnr_db > 25


def test_a_recurrent_cell_gets_one_set_of_parameters_and_one_input_projection(int8):
    """The GRU example's ten calls of its cell: each op takes its first step's parameters, so
    the ten input projections batch into one int8 linear layer over the sequence (batch_steps)
    and the steps' adds and multiplies have one output quantization each, as one cell would."""
    graph = int8("gru")[3].graph
    linears = [n for n in graph.nodes if n.op == "nee::linear_int8.out"]
    shapes = [graph.tensors[n.args["input"].name].shape for n in linears]
    # one input projection, 9 hidden ones (the first step's reads the zero state: folded), head
    assert len(linears) == 11 and shapes.count((20, 16)) == 1 and shapes.count((2, 32)) == 10
    for op, per_step in (("nee::add_int8.out", 4), ("nee::mul_int8.out", 3)):
        calls = [n for n in graph.nodes if n.op == op]
        assert len(calls) == 10 * per_step
        assert len({graph.tensors[n.outputs[0]].quant for n in calls}) == per_step


class _Recurrent(torch.nn.Module):
    """A batch-first nn.GRU, nn.LSTM or nn.RNN and a linear head on the last step."""

    def __init__(self, kind: str, **options: object) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = getattr(torch.nn, kind)(16, 32, batch_first=True, **options)
        self.head = torch.nn.Linear(64 if options.get("bidirectional") else 32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


@pytest.mark.parametrize(("kind", "options", "linears"), [
    ("GRU", {}, 11), ("LSTM", {}, 11), ("RNN", {}, 11),  # input, 9 hidden (one folded), head
    ("GRU", {"bidirectional": True}, 21), ("LSTM", {"num_layers": 2}, 21)])
def test_torch_recurrent_layers_quantize_to_int8_calls(kind, options, linears):
    """nn.GRU/nn.LSTM/nn.RNN are one op in torch.export: decomposed before annotation, every
    call of theirs runs in int8 (the input projection over the transposed sequence and the
    reversed sequence too), where the float program's would stay between quantize/dequantize
    pairs."""
    generator = torch.Generator().manual_seed(2)
    samples = [(torch.randn(2, 10, 16, generator=generator),) for _ in range(16)]
    result = export(_Recurrent(kind, **options).eval(), samples[0],
                    quantize=Int8Options(*split_samples(samples)))
    graph = result.graph
    floats = [n.op for n in graph.nodes if graph.tensors[n.outputs[0]].dtype == "float32"]
    assert floats == ["nee::dequantize_per_tensor.out"]
    assert sum(n.op == "nee::linear_int8.out" for n in graph.nodes) == linears
    assert result.accuracy[0].sqnr_db > 25
