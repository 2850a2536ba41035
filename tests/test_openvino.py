"""The OpenVINO backend: the XNNPACK delegate's float .tflite partitions run by OpenVINO's CPU
plugin, swapped in at load, against LiteRT, the partitions' reference programs and torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from runtime_py.backends import BACKENDS, Cpu
from runtime_py.backends.openvino import OpenVino
from runtime_py.errors import BundleError
from runtime_py.program import Program
from tests.conftest import load_example
from tests.test_xnnpack import _bundle, forged, outlives_its_load, truncated
from toolchain.quantize.options import Int8Options
from toolchain.serialize.bundle import write_bundle

pytest.importorskip("openvino")

MODELS = ["mlp", "cnn", "gru", "mobilenet_v2", "mobilenet_v3_small", "transformer"]


def _two_inputs(inputs: tuple[torch.Tensor, ...]) -> list[list[np.ndarray]]:
    """The example inputs, and the same with every float input scaled (a second, different run:
    outputs that do not change would be stale, not written by the engine)."""
    return [[t.numpy() for t in inputs],
            [(t * 0.5 if t.is_floating_point() else t).numpy() for t in inputs]]


@pytest.mark.parametrize("name", MODELS)
def test_float_partitions_match_litert_their_reference_and_torch(tmp_path, name: str) -> None:
    model, inputs, _, path = _bundle(tmp_path, name)
    engine = Program.load(path, {"xnnpack": OpenVino()})
    litert = Program.load(path)
    reference = Program.load(path, {"xnnpack": Cpu()})
    assert [p.backend for p in engine.partitions] == [p.backend for p in litert.partitions]
    for arrays in _two_inputs(inputs):
        got = [o.copy() for o in engine.run(*arrays)]
        with torch.no_grad():
            want = model(*[torch.from_numpy(a) for a in arrays])
        for g, lite, r, w in zip(got, litert.run(*arrays), reference.run(*arrays),
                                 [want] if isinstance(want, torch.Tensor) else want,
                                 strict=True):
            scale = float(np.abs(r).max())
            for other in (lite, r, w.numpy()):
                np.testing.assert_allclose(g, other, rtol=1e-4, atol=1e-5 * scale)


def test_int8_partitions_are_refused(tmp_path) -> None:
    """OpenVINO's int8 arithmetic is not TFLite's: an int8 partition is refused at load, with
    the engine that runs it named."""
    inputs = _bundle(tmp_path, "cnn")[1]
    _, _, _, path = _bundle(tmp_path, "cnn", quantize=Int8Options(calibration=[inputs]))
    with pytest.raises(BundleError, match=r"float partitions only.*\n?.*quantized tensors "
                       r"\((FakeQuantize|i8|u8)"):
        Program.load(path, {"xnnpack": OpenVino()})


def _huge_padding(model: bytearray) -> None:
    """The first PAD's top padding 2^26 rows (OpenVINO infers shapes from the ops: a forged
    tensor shape alone does not reach it, and it checks constants against their buffers)."""
    import tflite

    root = tflite.Model.GetRootAsModel(model, 0)
    graph = root.Subgraphs(0)
    for op in (graph.Operators(k) for k in range(graph.OperatorsLength())):
        code = root.OperatorCodes(op.OpcodeIndex())
        if max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) == tflite.BuiltinOperator.PAD:
            pads = root.Buffers(graph.Tensors(op.Inputs(1)).Buffer()).DataAsNumpy()
            pads.view(np.int32)[2] = 1 << 26  # a view of ``model``
            return
    raise AssertionError("no PAD in the model")


def test_forged_payloads_are_refused_at_load(tmp_path) -> None:
    """A padding forged to 2^26 rows is refused before OpenVINO compiles the model when the
    caller bounds memory (and, mismatching the arena, in any case); an unparsable payload too."""
    from toolchain.boards import load_board
    from toolchain.export import export

    path = tmp_path / "pad.nee"  # a 3x3 convolution padded by 2: a PAD, then CONV_2D
    write_bundle(export(torch.nn.Conv2d(3, 4, 3, padding=2).eval(), (torch.randn(1, 3, 8, 8),),
                        board=load_board("rpi5")), path)
    with pytest.raises(BundleError, match=r"tensors: expected at most 1073741824 bytes"):
        Program.load(forged(path, _huge_padding), {"xnnpack": OpenVino()},
                     max_arena_bytes=1 << 30)
    with pytest.raises(BundleError, match=r"outputs: expected shapes and dtypes"):
        Program.load(forged(path, _huge_padding), {"xnnpack": OpenVino()})
    with pytest.raises(BundleError, match="OpenVINO loads and runs"):
        Program.load(forged(path, truncated), {"xnnpack": OpenVino()})


def test_fuzzed_payloads_are_refused_or_run(tmp_path, monkeypatch) -> None:
    """Bit flips and overwrites in the .tflite, checksums recomputed, reach OpenVINO's TFLite
    frontend: refused (a BundleError) or run as a forged model; none crashes or hangs."""
    from bundle_fuzz import fuzz

    _, _, _, path = _bundle(tmp_path, "cnn")
    monkeypatch.setitem(BACKENDS, "xnnpack", OpenVino())
    counts = fuzz(path, 120, "payload", seed=5)
    assert set(counts) <= {"refused", "same", "changed", "changed: payload segment"}, counts
    assert counts["refused"] > 0 and sum(counts[k] for k in ("refused", "same", "changed")) == 120


def test_other_payload_formats_are_refused(tmp_path) -> None:
    """A partition whose payload is not .tflite (here an Ethos-U command stream) is not
    OpenVINO's to run."""
    from toolchain.boards import load_board
    from toolchain.export import export

    _, inputs, _, _ = _bundle(tmp_path, "cnn")
    module = load_example("cnn")
    path = tmp_path / "npu.nee"
    write_bundle(export(module.Model().eval(), inputs, board=load_board("corstone-300-ethos-u55"),
                        quantize=Int8Options(calibration=[inputs])), path)
    with pytest.raises(BundleError, match=r"specs: expected format 'tflite'"):
        Program.load(path, {"ethos-u": OpenVino()})


def test_nee_run_switch(tmp_path) -> None:
    """``nee-run --engine openvino`` runs the partitions with OpenVINO (its profile says so)."""
    from click.testing import CliRunner

    from runtime_py.cli import main

    _, _, _, path = _bundle(tmp_path, "cnn")
    done = CliRunner().invoke(main, [str(path), "--random", "--profile", "--engine", "openvino"])
    assert done.exit_code == 0, done.output
    assert "OpenVINO CPU" in done.output and "LiteRT" not in done.output


def test_the_model_outlives_its_load(tmp_path) -> None:
    outlives_its_load(tmp_path, {"xnnpack": OpenVino()})


class _Recording(OpenVino):
    """OpenVino keeping the models it compiles."""

    def __init__(self) -> None:
        self.compiled: list = []

    @property
    def core(self):
        recording, core = self, super().core

        class Core:
            def __getattr__(self, name: str):
                return getattr(core, name)

            def compile_model(self, *args):
                recording.compiled.append(core.compile_model(*args))
                return recording.compiled[-1]

        return Core()


@pytest.mark.parametrize(("threads", "counts"), [(1, [1]), (2, [1, 2])])
def test_the_compiled_model_computes_in_float32_with_the_programs_threads(tmp_path, threads,
                                                                          counts):
    """One compiled model per count the program's governor switches between."""
    import openvino as ov

    _, _, _, path = _bundle(tmp_path, "cnn")
    backend = _Recording()
    Program.load(path, {"xnnpack": backend}, threads=threads)
    assert [c.get_property("INFERENCE_NUM_THREADS") for c in backend.compiled] == counts
    for compiled in backend.compiled:
        assert compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
        assert compiled.get_property("ENABLE_CPU_PINNING") is False


def test_nee_run_switch_without_openvino_is_a_usage_error(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    import runtime_py.cli

    _, _, _, path = _bundle(tmp_path, "mlp")
    real = runtime_py.cli.importlib.util.find_spec
    monkeypatch.setattr(runtime_py.cli.importlib.util, "find_spec",
                        lambda name, *a: None if name == "openvino" else real(name, *a))
    for engine in ("openvino", "fastest"):
        done = CliRunner().invoke(runtime_py.cli.main,
                                  [str(path), "--random", "--engine", engine])
        assert done.exit_code == 2 and "pip install 'nee[openvino]'" in done.output
