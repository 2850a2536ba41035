""".tflite export against LiteRT's reference kernels (BUILTIN_REF): the example models' int8
programs byte for byte, their float programs within 1e-5; layouts propagated; refusals."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tflite
import torch
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from roundtrip import max_rel_diff

from runtime_py.program import Program
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.export.result import ExportResult
from toolchain.modules import load_file
from toolchain.partition import subgraph
from toolchain.quantize.options import Int8Options, split_samples
from toolchain.selective_build.interop import TFLITE_BUILTINS, tflite_builtins
from toolchain.serialize.bundle import write_bundle
from toolchain.serialize.tflite_program import CONVERTERS, to_tflite, write_tflite

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str):
    return load_file(EXAMPLES_DIR / f"{name}.py")

EXAMPLES = ["cnn", "mlp", "mobilenet_v2", "resnet18"]
FLOAT_TOLERANCE = 1e-5  # max |diff| / max |value|
EXACT_PRODUCERS = ("nee::dequantize_per_tensor.out",)  # int8 values, dequantized: bit-exact


def run_litert(model: bytes, arrays: list[np.ndarray]) -> list[np.ndarray]:
    interpreter = Interpreter(model_content=model,
                              experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), arrays, strict=True):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def assert_outputs_match(result: ExportResult, ours: list[np.ndarray],
                         theirs: list[np.ndarray]) -> None:
    """Outputs of int8 values dequantized: equal byte for byte; outputs of float ops after
    the last dequantize (e.g. a softmax): within FLOAT_TOLERANCE (1 LSB of cnn's int8 logits
    moves its softmax by ~3e-3)."""
    producers = result.graph.producers()
    for out, a, b in zip(result.graph.outputs, ours, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, out
        if producers[out].op in EXACT_PRODUCERS:
            differ = differing_elements(a, b)
            assert not differ, f"{result.model_name} {out}: {differ} of {a.size} elements differ"
        else:
            assert max_rel_diff(a, b) <= FLOAT_TOLERANCE, (out, producers[out].op)


def litert_matches_ours_and_torch(result: ExportResult, module: torch.nn.Module,
                                  inputs: tuple[torch.Tensor, ...], folder: Path) -> bytes:
    """``result``'s float program as .tflite (returned), run by LiteRT's reference kernels:
    each output within FLOAT_TOLERANCE of NEE's program's and of ``module``'s."""
    model = to_tflite(result.graph)
    write_bundle(result, folder / "m.nee")
    arrays = [t.numpy() for t in inputs]
    ours = Program.load(folder / "m.nee").run(*arrays)
    with torch.no_grad():
        expected = module(*inputs)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    for a, b, c in zip(ours, run_litert(model, arrays), expected, strict=True):
        assert max_rel_diff(b, a) <= FLOAT_TOLERANCE
        assert max_rel_diff(b, c.numpy()) <= FLOAT_TOLERANCE
    return model


def differing_elements(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements of two same-shape arrays differ in any byte."""
    rows = [np.ascontiguousarray(v).view(np.uint8).reshape(v.size, -1) for v in (a, b)]
    return int((rows[0] != rows[1]).any(axis=1).sum())


def builtin_ops(model: bytes) -> Counter:
    """How often each builtin operator occurs in the model's subgraph."""
    m = tflite.Model.GetRootAsModel(model, 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    codes = [m.OperatorCodes(i).BuiltinCode() for i in range(m.OperatorCodesLength())]
    graph = m.Subgraphs(0)
    return Counter(names[codes[graph.Operators(i).OpcodeIndex()]]
                   for i in range(graph.OperatorsLength()))


@pytest.fixture(scope="module")
def int8_programs(tmp_path_factory):
    """``int8_programs(name)`` -> (result, .nee path, .tflite bytes, held-out input arrays)."""
    cache = {}

    def get(name: str):
        if name not in cache:
            module = load_example(name)
            options = Int8Options(*split_samples(module.calibration_inputs()), rounding="litert")
            result = export(module.Model().eval(), module.example_inputs(), quantize=options,
                            planner="greedy")
            folder = tmp_path_factory.mktemp(name)
            write_bundle(result, folder / "m.nee")
            size = write_tflite(result, folder / "m.tflite")
            model = (folder / "m.tflite").read_bytes()
            assert size == len(model)
            samples = [[t.numpy() for t in s] for s in options.evaluation]
            cache[name] = result, folder / "m.nee", model, samples
        return cache[name]

    return get


@pytest.mark.parametrize("name", EXAMPLES)
def test_int8_examples_are_bit_exact_with_litert(int8_programs, name):
    """Byte for byte, but cnn's float softmax after its int8 logits (within tolerance)."""
    result, bundle, model, samples = int8_programs(name)
    program = Program.load(bundle)
    for arrays in samples:
        assert_outputs_match(result, program.run(*arrays), run_litert(model, arrays))


def test_layouts_propagate_through_int8_chains(int8_programs):
    """conv -> add -> conv runs NHWC throughout: one TRANSPOSE (the NCHW input); the flatten
    after the global mean is a RESHAPE. torch's padding 1 of a stride-2 window is no SAME
    (SAME pads the bottom first): a PAD (also before the max pool: its input, clamped at the
    zero point by the fused ReLU, is never below the padding)."""
    ops = builtin_ops(int8_programs("resnet18")[2])
    assert ops["TRANSPOSE"] == 1 and ops["RESHAPE"] == 1
    assert ops["CONV_2D"] == 20 and ops["ADD"] == 8 and ops["PAD"] == 5 and not ops["PADV2"]
    ops = builtin_ops(int8_programs("mobilenet_v2")[2])
    assert ops["DEPTHWISE_CONV_2D"] == 17 and ops["TRANSPOSE"] == 1


def test_int8_model_reads_back_as_vela_expects(int8_programs):
    """What an int8 compiler such as Vela reads: every op between QUANTIZE and DEQUANTIZE on
    int8 activations, per-channel int8 weights on the output channels (OHWI dim 0, depthwise
    1HWO dim 3), int32 biases at input_scale * weight_scale."""
    model = int8_programs("mobilenet_v2")[2]
    m = tflite.Model.GetRootAsModel(model, 0)
    graph = m.Subgraphs(0)
    assert m.Version() == 3 and tflite.Model.ModelBufferHasIdentifier(model, 0)
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = m.OperatorCodes(op.OpcodeIndex()).BuiltinCode()
        tensors = [graph.Tensors(t) for t in op.InputsAsNumpy()]
        if code in (tflite.BuiltinOperator.CONV_2D, tflite.BuiltinOperator.DEPTHWISE_CONV_2D):
            x, w, b = tensors
            axis = 3 if code == tflite.BuiltinOperator.DEPTHWISE_CONV_2D else 0
            wq, bq = w.Quantization(), b.Quantization()
            assert w.Type() == tflite.TensorType.INT8 and wq.QuantizedDimension() == axis
            assert wq.ScaleLength() == w.ShapeAsNumpy()[axis] and not wq.ZeroPointAsNumpy().any()
            expected = np.float64(x.Quantization().Scale(0)) * wq.ScaleAsNumpy()
            np.testing.assert_allclose(bq.ScaleAsNumpy(), expected, rtol=1e-6)
            assert b.Type() == tflite.TensorType.INT32
        if code not in (tflite.BuiltinOperator.QUANTIZE, tflite.BuiltinOperator.DEQUANTIZE):
            activations = [tensors[0], graph.Tensors(op.Outputs(0))]
            assert all(t.Type() == tflite.TensorType.INT8 and t.Quantization().ScaleLength() == 1
                       for t in activations)


@pytest.mark.parametrize("name", EXAMPLES)
def test_float_examples_match_litert(exported, name):
    example = exported(name)
    model = to_tflite(example.result.graph)
    ours = Program.load(example.path).run(*example.inputs)
    theirs = run_litert(model, example.inputs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape and max_rel_diff(b, a) <= FLOAT_TOLERANCE


class _PaddedMaxPool(torch.nn.Module):
    """A max pool with padding TFLite's SAME cannot express, after a conv with or without ReLU."""

    def __init__(self, relu: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.relu = torch.nn.Conv2d(3, 8, 3), relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return torch.nn.functional.max_pool2d(torch.relu(y) if self.relu else y, 3, 2, 1)


@pytest.mark.parametrize(("relu", "pad_op"), [(True, "PAD"), (False, "PADV2")])
def test_max_pool_padding_is_zero_only_after_a_relu(tmp_path, relu, pad_op):
    """Padding with 0 (PAD, which XNNPACK takes) where the input is >= 0, else with -inf
    (PADV2): a negative max must not become 0."""
    x = torch.randn(1, 3, 18, 18)
    result = export(_PaddedMaxPool(relu).eval(), (x,), planner="greedy")
    model = to_tflite(result.graph)
    ops = builtin_ops(model)
    assert ops[pad_op] == 1 and sum(ops[k] for k in ("PAD", "PADV2")) == 1
    (theirs,) = run_litert(model, [x.numpy()])
    expected = _PaddedMaxPool(relu).eval()(x).detach().numpy()
    assert max_rel_diff(theirs, expected) <= FLOAT_TOLERANCE
    assert relu or (expected[:, :, 0] < 0).any()  # top-row windows hold padding: 0 would win


class _AttentionOps(torch.nn.Module):
    """Layer norms (affine over 1 dim, plain over 2), a linear layer with GELU fused through
    a reshape, attention's bmm with a constant causal mask, exact and tanh GELU."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.ln = torch.nn.LayerNorm(16)
        torch.nn.init.normal_(self.ln.weight)
        torch.nn.init.normal_(self.ln.bias)
        self.fc = torch.nn.Linear(16, 32)
        self.register_buffer("future", torch.ones(6, 6, dtype=torch.bool).triu(1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.nn.functional.gelu(self.fc(self.ln(x).reshape(-1, 16))).reshape(2, 6, 32)
        scores = (h @ h.transpose(1, 2) * 0.1).masked_fill(self.future, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ h
        z = torch.nn.functional.layer_norm(y.reshape(2, 6, 4, 8), (4, 8))
        return torch.nn.functional.gelu(y, approximate="tanh"), z


def test_layer_norm_attention_and_gelu_match_litert(tmp_path):
    x = torch.randn(2, 6, 16)
    result = export(_AttentionOps().eval(), (x,), planner="greedy")
    assert {"aten::native_layer_norm.out", "aten::bmm.out", "aten::where.self_out",
            "nee::addmm_act.out", "aten::gelu.out"} <= {n.op for n in result.graph.nodes}
    ops = builtin_ops(litert_matches_ours_and_torch(result, _AttentionOps().eval(), (x,),
                                                    tmp_path))
    for op in ("GELU", "BATCH_MATMUL", "SELECT_V2", "RSQRT", "MEAN", "SOFTMAX"):
        assert ops[op] >= 1, op


class _RmsNormOps(torch.nn.Module):
    """Llama's RMSNorm (pow 2, mean, rsqrt), a linear layer with SiLU, a negation, a square
    root, a cube (GPT-2's GELU)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return -torch.nn.functional.silu(self.fc(x)) + (x.pow(2) + 1).pow(0.5) + x.pow(3)


def test_rms_norm_silu_and_powers_match_litert(tmp_path):
    x = torch.randn(4, 16)
    result = export(_RmsNormOps().eval(), (x,), planner="greedy")
    assert {"aten::pow.Tensor_Scalar_out", "aten::rsqrt.out", "aten::neg.out"} <= {
        n.op for n in result.graph.nodes}
    assert any(n.args.get("activation") == "aten::silu.out" for n in result.graph.nodes)
    model = litert_matches_ours_and_torch(result, _RmsNormOps().eval(), (x,), tmp_path)
    assert all(builtin_ops(model)[op] for op in ("RSQRT", "SQRT", "NEG", "LOGISTIC"))


class _Conv1d(torch.nn.Module):
    """Whisper's and wav2vec2's front ends: 1-D convolutions with GELU, strided, padded (not as
    SAME), depthwise."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Conv1d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv1d(8, 8, 3, stride=2, padding=1)
        self.c = torch.nn.Conv1d(8, 8, 5, padding=2, groups=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.gelu(self.a(x))
        return self.c(torch.relu(self.b(y)))


def test_1d_convolutions_match_litert(tmp_path):
    x = torch.randn(1, 3, 20)
    result = export(_Conv1d().eval(), (x,), planner="greedy")
    ops = builtin_ops(litert_matches_ours_and_torch(result, _Conv1d().eval(), (x,), tmp_path))
    assert ops["CONV_2D"] == 2 and ops["DEPTHWISE_CONV_2D"] == 1 and ops["GELU"] == 1


class _ResidualOutput(torch.nn.Module):
    """A convolution plus its input as the output: the add writes over the dying convolution
    output (reuse_inputs), so the returned tensor is a view of that storage."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + x


def test_in_place_output_matches_litert(tmp_path):
    """An output written in place over another value's storage is converted from its own
    value (reading it through that storage recursed without end)."""
    x = torch.randn(1, 4, 6, 6)
    result = export(_ResidualOutput().eval(), (x,), planner="greedy")
    out = result.graph.tensors[result.graph.outputs[0]]
    assert out.view_of is not None
    ops = builtin_ops(litert_matches_ours_and_torch(result, _ResidualOutput().eval(), (x,),
                                                    tmp_path))
    assert ops["CONV_2D"] == 1 and ops["ADD"] == 1


class _Recurrent(torch.nn.Module):
    """A GRU and an LSTM (time major), both of whose steps fuse into one call each."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.gru, self.lstm = torch.nn.GRU(6, 8), torch.nn.LSTM(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, _ = self.gru(x)
        z, (_, c) = self.lstm(y)
        return z, c


def test_fused_recurrent_cells_match_litert(tmp_path):
    x = torch.randn(4, 2, 6)
    result = export(_Recurrent().eval(), (x,), planner="greedy")
    cells = [n.op for n in result.graph.nodes if n.op.endswith("_cell.out")]
    assert cells == ["nee::gru_cell.out"] * 4 + ["nee::lstm_cell.out"] * 4
    ops = builtin_ops(litert_matches_ours_and_torch(result, _Recurrent().eval(), (x,), tmp_path))
    assert ops["LOGISTIC"] == 2 * 4 + 3 * 4 and ops["TANH"] == 4 + 2 * 4


class _Sdpa(torch.nn.Module):
    """One attention call: no mask, causal, a constant bool or float mask, or a mask made from
    the input (``runtime``); ``kv_heads`` below 2 makes it grouped-query."""

    def __init__(self, mask: str, kv_heads: int = 2) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.mask, self.kv_heads = mask, kv_heads
        self.register_buffer("bool_mask", torch.rand(1, 1, 5, 7, generator=generator) > 0.4)
        self.bool_mask[..., 0] = True  # every row keeps a key
        self.register_buffer("float_mask", torch.randn(1, 2, 5, 7, generator=generator))

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        k, v = kv[:, : self.kv_heads], kv[:, : self.kv_heads] * 0.5
        mask = {"none": None, "causal": None, "bool": self.bool_mask, "float": self.float_mask,
                "runtime": q @ kv.transpose(-1, -2) > 0, "whole": self.bool_mask & False}[self.mask]
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=self.mask == "causal",
            enable_gqa=self.kv_heads < 2)


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_attention_matches_litert_and_torch(tmp_path, mask):
    generator = torch.Generator().manual_seed(2)
    inputs = (torch.randn(1, 2, 5, 8, generator=generator),
              torch.randn(1, 2, 7, 8, generator=generator))
    result = export(_Sdpa(mask).eval(), inputs, planner="greedy")
    assert "nee::scaled_dot_product_attention.out" in {n.op for n in result.graph.nodes}
    model = litert_matches_ours_and_torch(result, _Sdpa(mask).eval(), inputs, tmp_path)
    assert builtin_ops(model)["BATCH_MATMUL"] == 2


@pytest.mark.parametrize(("mask", "kv_heads", "refusal"), [
    ("runtime", 2, "a mask known at export"), ("whole", 2, "a row masked whole"),
    ("none", 1, "key/value heads and batch dims equal to the query's")])
def test_attention_tflite_cannot_match_is_refused(mask, kv_heads, refusal):
    inputs = (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8))
    graph = export(_Sdpa(mask, kv_heads).eval(), inputs, planner="greedy").graph
    (node,) = [n for n in graph.nodes if n.op == "nee::scaled_dot_product_attention.out"]
    with pytest.raises(ExportError, match=refusal):
        to_tflite(subgraph(graph, [node], graph.nodes))


class _FourthPower(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.pow(4)


def test_other_powers_are_refused():
    result = export(_FourthPower(), (torch.randn(4),), planner="greedy")
    with pytest.raises(ExportError, match=r"exponent of 2, 3, 0.5 or -0.5, found 4"):
        to_tflite(result.graph)


class _Int8Ops(torch.nn.Module):
    """The int8 ops the examples lack: lookup tables (sigmoid, tanh, hardswish), mul, cat, a
    channel slice, a padded average pool, grouped and dilated depthwise convolutions, softmax."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.grouped = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.depthwise = torch.nn.Conv2d(8, 16, 3, padding=2, dilation=2, groups=8)
        self.fc = torch.nn.Linear(16, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.conv(x))
        z = self.grouped(y)
        z = torch.sigmoid(z) * torch.tanh(z) + torch.nn.functional.hardswish(z)
        z = torch.cat([z, y], dim=1)[:, 4:12]
        z = torch.nn.functional.avg_pool2d(z, 3, 1, 1, count_include_pad=False)
        d = torch.nn.functional.relu6(self.depthwise(z))
        return torch.softmax(self.fc(d.mean(dim=(2, 3))), dim=1) * 2.0, d


def test_int8_tables_softmax_and_windows_are_bit_exact_with_litert(tmp_path):
    generator = torch.Generator().manual_seed(3)
    samples = [(torch.randn(1, 4, 8, 10, generator=generator),) for _ in range(8)]
    options = Int8Options(*split_samples(samples), rounding="litert")
    result = export(_Int8Ops().eval(), samples[0], quantize=options, planner="greedy")
    assert {"nee::softmax_int8.out", "nee::lookup_int8.out", "nee::mul_int8.out",
            "nee::avg_pool2d_int8.out"} <= {n.op for n in result.graph.nodes}
    ops = builtin_ops(to_tflite(result.graph))
    for op in ("LOGISTIC", "TANH", "HARD_SWISH", "SOFTMAX", "MUL", "CONCATENATION", "SLICE",
               "AVERAGE_POOL_2D", "DEPTHWISE_CONV_2D"):
        assert ops[op] >= 1, op
    write_bundle(result, tmp_path / "m.nee")
    program, model = Program.load(tmp_path / "m.nee"), to_tflite(result.graph)
    for (x,) in options.evaluation:
        assert_outputs_match(result, program.run(x.numpy()), run_litert(model, [x.numpy()]))


class _Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x).cumsum(1) + torch.exp(2 * x)


class _OddClamp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardtanh(self.conv(x), 0.0, 3.0)


def test_unsupported_ops_are_listed_at_once():
    graph = export(_Unsupported(), (torch.randn(2, 3),), planner="greedy").graph
    with pytest.raises(ExportError) as error:
        to_tflite(graph)
    message = str(error.value)
    assert "aten::exp.out (2 calls)" in message and "aten::cumsum.out (1 call)" in message
    assert "test_tflite_export.py" in message  # the model's source lines


def test_a_clamp_without_a_tflite_activation_is_refused(int8_programs):
    """hardtanh(0, 3) fused into a float convolution, an int8 clamp narrower than its output's
    range and not RELU's, RELU6's nor RELU_N1_TO_1's: TFLite has no fused activation for them
    (int8 calibration makes hardtanh's range the output's: no clamp left)."""
    graph = export(_OddClamp(), (torch.randn(1, 2, 4, 4),), planner="greedy").graph
    with pytest.raises(ExportError, match=r"hardtanh.out\(0.0, 3.0\)"):
        to_tflite(graph)
    graph = copy.deepcopy(int8_programs("mlp")[0].graph)
    linear = next(n for n in graph.nodes if n.op == "nee::linear_int8.out")
    linear.args["activation_min"] = -100
    with pytest.raises(ExportError, match=r"an int8 clamp .* found \[-100, 127\].*"
                                          r"test_tflite_export|examples/mlp.py"):
        to_tflite(graph)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_resolver_list_covers_every_builtin_written(exported, int8_programs, name):
    """nee-build's TFLite Micro resolver (from a kernel list) registers every builtin the
    writer put in the float and the int8 model."""
    result, _, int8_model, _ = int8_programs(name)
    float_result = exported(name).result
    for kernels, model in ((result.kernels, int8_model),
                           (float_result.kernels, to_tflite(float_result.graph))):
        builtins, without = tflite_builtins(kernels)
        assert set(builtin_ops(model)) <= set(builtins) and not without


def test_the_resolver_table_covers_every_converted_op():
    assert set(TFLITE_BUILTINS) == set(CONVERTERS)


class _UnfusableActivations(torch.nn.Module):
    """Float activations TFLite cannot fuse into a convolution or linear layer (hardswish,
    hardsigmoid, sigmoid, tanh), fused into them by NEE, and a hardsigmoid of its own."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1)
        self.c, self.fc = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.hardswish(self.a(x))
        y = torch.nn.functional.hardsigmoid(self.b(y)) * torch.tanh(self.c(y)).mean((2, 3), True)
        y = torch.nn.functional.hardsigmoid(y + 0.5)
        return torch.sigmoid(self.fc(y.mean(dim=(2, 3))))


def test_unfusable_float_activations_are_ops_of_their_own(tmp_path):
    inputs = (torch.randn(1, 3, 8, 8),)
    result = export(_UnfusableActivations(), inputs, planner="greedy")
    fused = {n.args.get("activation") for n in result.graph.nodes}
    assert {"aten::hardswish.out", "aten::hardsigmoid.out", "aten::tanh.out",
            "aten::sigmoid.out"} <= fused
    path = tmp_path / "acts.nee"
    write_bundle(result, path)
    arrays = [t.numpy() for t in inputs]
    ours = Program.load(path).run(*arrays)
    theirs = run_litert(to_tflite(result.graph), arrays)
    assert max_rel_diff(theirs[0], ours[0]) <= FLOAT_TOLERANCE
