"""The XNNPACK CPU delegate: partitions written as .tflite for a board whose recipe names it,
run by LiteRT's interpreter, against the same partitions' reference programs on the numpy
kernels and against torch."""

from __future__ import annotations

import gc
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import runtime_py.program
from runtime_py.backends import Cpu
from runtime_py.errors import BundleError, MissingBackendError
from runtime_py.loader import load_bundle
from runtime_py.program import Program
from runtime_py.threads import Fixed
from tests.conftest import load_example
from tests.test_loader_errors import _repack
from toolchain.boards import load_board
from toolchain.cli import export_main, inspect_main
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.quantize.options import Int8Options, split_samples
from toolchain.serialize.bundle import write_bundle

pytest.importorskip("ai_edge_litert")
BOARD = load_board("rpi5")
WHOLE = ["mlp", "cnn", "gru", "mobilenet_v2", "mobilenet_v3_small"]  # every call delegated


def _bundle(tmp_path, name: str, **options):
    module = load_example(name)
    model = module.Model().eval()
    inputs = module.example_inputs()
    result = export(model, inputs, board=BOARD, name=name, **options)
    path = tmp_path / f"{name}.nee"
    write_bundle(result, path)
    return model, inputs, result, path


@pytest.mark.parametrize("name", [*WHOLE, "transformer"])
def test_partitions_match_their_reference_and_torch(tmp_path, name: str) -> None:
    model, inputs, result, path = _bundle(tmp_path, name)
    assert result.graph.delegates and {d.backend for d in result.graph.delegates} == {"xnnpack"}
    if name in WHOLE:
        assert [n.op for n in result.graph.nodes] == ["nee::delegate_call"]
    else:  # the int64 token lookup stays; layer norm, attention's bmm, mask, GELU go
        assert [n.op for n in result.graph.nodes] == ["aten::embedding.out",
                                                      "nee::delegate_call"]
    arrays = [t.numpy() for t in inputs]
    fast = Program.load(path)
    assert {p.backend for p in fast.partitions} == {"xnnpack"}
    got = [o.copy() for o in fast.run(*arrays)]
    reference = Program.load(path, backends={"xnnpack": Cpu()}).run(*arrays)
    with torch.no_grad():
        want = model(*inputs)
    for g, r, w in zip(got, reference, [want] if isinstance(want, torch.Tensor) else want,
                       strict=True):
        scale = float(np.abs(r).max())
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5 * scale)
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5 * scale)


class _Split(torch.nn.Module):
    """A linear layer, a cumsum (no TFLite builtin), then a ReLU alone."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x).cumsum(-1))


def test_calls_left_on_the_cpu_say_why(tmp_path) -> None:
    _, _, result, _ = _bundle(tmp_path, "transformer")
    reasons = {n.cpu_reason for n in result.graph.nodes if n.op != "nee::delegate_call"}
    assert any("int64 tensor tokens: the XNNPACK delegate runs float32, int8" in r
               for r in reasons)
    result = export(_Split(), (torch.randn(2, 8),), board=BOARD)
    reasons = [n.cpu_reason for n in result.graph.nodes if n.op != "nee::delegate_call"]
    assert len(reasons) == 2 and "no TFLite builtin" in reasons[0]
    assert "without a convolution or matrix product" in reasons[1]


@pytest.mark.parametrize("rounding, exact", [("single", True), ("xnnpack", True),
                                             (None, True), ("double", False)])
def test_int8_partitions_are_exact_with_xnnpacks_rounding(tmp_path, rounding, exact) -> None:
    """Unless told, an export for a board whose CPU delegate is XNNPACK uses its rounding."""
    inputs = load_example("cnn").example_inputs()
    options = Int8Options(calibration=[inputs], rounding=rounding)
    _, _, result, path = _bundle(tmp_path, "cnn", quantize=options)
    assert result.graph.int8_rounding == (rounding or "xnnpack")
    assert [n.op for n in result.graph.nodes] == ["nee::delegate_call"]
    arrays = [t.numpy() for t in inputs]
    got = Program.load(path).run(*arrays)[0].copy()
    reference = Program.load(path, backends={"xnnpack": Cpu()}).run(*arrays)[0]
    diff = float(np.abs(got - reference).max())
    assert (diff <= 1e-6) == exact, diff  # softmax after the int8 part: float rounding only


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "mobilenet_v3_small"])
def test_int8_cnns_are_exact_with_the_boards_rounding(tmp_path, name: str) -> None:
    """Unless told, an int8 export for an XNNPACK board uses XNNPACK's requantization (float32
    scales rounded to even for convolutions, linear layers, mean and quantize; its add/sub/mul
    schemes): the delegated program equals its numpy reference output for output. Hardsigmoid
    tables are written as add and mul (npu_tables), so mobilenet_v3_small is one partition."""
    module = load_example(name)
    shape = module.example_inputs()[0].shape
    generator = torch.Generator().manual_seed(2)
    samples = (module.calibration_inputs() if hasattr(module, "calibration_inputs") else
               [(torch.randn(shape, generator=generator),) for _ in range(8)])
    _, inputs, result, path = _bundle(tmp_path, name, quantize=Int8Options(*split_samples(samples)))
    assert [n.op for n in result.graph.nodes] == ["nee::delegate_call"]
    arrays = [t.numpy() for t in inputs]
    got = Program.load(path).run(*arrays)[0].copy()
    reference = Program.load(path, backends={"xnnpack": Cpu()}).run(*arrays)[0]
    np.testing.assert_array_equal(got, reference)


@pytest.mark.parametrize("rounding, steps", [("xnnpack", 0), ("single", 1)])
def test_an_int8_gru_is_delegated_whole_and_exact_with_xnnpacks_rounding(tmp_path, rounding,
                                                                         steps) -> None:
    """Every call of the int8 GRU (per step: a linear layer, add, sub, mul, sigmoid and tanh
    tables) goes to XNNPACK. With rounding "xnnpack" NEE's add/sub/mul requantize as XNNPACK's
    do and the partition equals its reference program; with "single" (TFLite's add/sub/mul,
    XNNPACK's convolutions) ten steps of them land one output step away."""
    module = load_example("gru")
    options = Int8Options(calibration=module.calibration_inputs(), rounding=rounding)
    _, inputs, result, path = _bundle(tmp_path, "gru", quantize=options)
    assert [n.op for n in result.graph.nodes] == ["nee::delegate_call"]
    (partition,) = result.graph.delegates
    assert not [n.op for n in partition.nodes if "int8" not in n.op and "quantize" not in n.op]
    (last,) = [n for n in partition.nodes if n.outputs[0] in partition.outputs]
    arrays = [t.numpy() for t in inputs]
    got = Program.load(path).run(*arrays)[0].copy()
    reference = Program.load(path, backends={"xnnpack": Cpu()}).run(*arrays)[0]
    assert float(np.abs(got - reference).max()) == pytest.approx(steps * last.args["scale"])
    report = CliRunner().invoke(inspect_main, [str(path)]).output
    assert "ops left in float (0" in report  # the partition's calls, not the delegate call


def test_a_runtime_without_litert_falls_back_or_refuses(tmp_path, monkeypatch) -> None:
    _, inputs, _, path = _bundle(tmp_path, "mlp")
    _, _, _, strict = _bundle(tmp_path, "cnn", cpu_fallback=False)
    monkeypatch.delitem(runtime_py.program.BACKENDS, "xnnpack")
    program = Program.load(path)
    assert program.partitions[0].backend == "xnnpack" and program.run(
        *[t.numpy() for t in inputs])
    with pytest.raises(MissingBackendError, match="xnnpack"):
        Program.load(strict)


def test_the_recipe_key_the_cli_switch_and_inspection(tmp_path) -> None:
    recipe = tmp_path / "board.toml"
    recipe.write_text(Path("boards/rpi5.toml").read_text().replace('"xnnpack"', '"xnnpak"'))
    with pytest.raises(ExportError, match=r"cpu_delegate.*one of \['xnnpack'\]"):
        load_board(str(recipe))
    out = tmp_path / "cnn.nee"
    args = ["examples/cnn.py:Model", "-o", str(out), "--board", "rpi5"]
    assert CliRunner().invoke(export_main, args).exit_code == 0
    shown = CliRunner().invoke(inspect_main, [str(out)]).output
    assert "xnnpack" in shown and "litert-xnnpack" in shown
    assert CliRunner().invoke(export_main, [*args, "--no-cpu-delegate"]).exit_code == 0
    assert not load_bundle(out).bundle.delegates


def test_offsets_are_one_per_input_and_output_or_none(tmp_path) -> None:
    _, _, _, path = _bundle(tmp_path, "mlp")
    bundle, write = _repack(path, tmp_path, "forged.nee")
    bundle.delegates[0].inputOffsets = [0]
    with pytest.raises(BundleError, match="or none"):
        load_bundle(write())



def test_litert_gets_the_programs_threads(tmp_path) -> None:
    _, _, _, path = _bundle(tmp_path, "mlp")
    assert Program.load(path).partitions[0].threads == BOARD.threads  # the recipe's
    assert Program.load(path, threads=1).partitions[0].threads == 1


def test_each_run_invokes_the_interpreter_of_its_thread_count(tmp_path, monkeypatch) -> None:
    """With more than 1 thread, one interpreter per count the governor switches between
    (XNNPACK's pool is fixed when one is made): after a run, the interpreter of the run's count
    holds its output, the other one an earlier output."""
    from ai_edge_litert import interpreter as litert

    made: list[tuple[int, litert.Interpreter]] = []

    class Recording(litert.Interpreter):
        def __init__(self, *args, num_threads: int, **kwargs) -> None:
            super().__init__(*args, num_threads=num_threads, **kwargs)
            made.append((num_threads, self))

    monkeypatch.setattr(litert, "Interpreter", Recording)
    _, inputs, _, path = _bundle(tmp_path, "mlp")
    Program.load(path, threads=1)
    assert [n for n, _ in made] == [1]
    made.clear()
    program = Program.load(path, threads=2)
    assert [n for n, _ in made] == [1, 2]
    for count in (1, 2, 1):
        program.thread_policy = Fixed(count)
        (out,) = program.run(*[t.numpy() + count for t in inputs])
        for n, interpreter in made:
            held = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
            assert np.array_equal(held, out) == (n == count), (count, n)


def forged(path: Path, change: Callable[[bytearray], None]) -> Path:
    """A copy of bundle ``path`` whose first partition's .tflite ``change`` edits in place
    (checksums recomputed), beside it as forged.nee."""
    from bundle_fuzz import _decoded, _packed

    bundle, blobs = _decoded(path.read_bytes())
    k = bundle.delegates[0].payload[0].segment
    model = bytearray(blobs[k])
    change(model)
    blobs[k] = bytes(model)
    bundle.segments[k].crc32 = zlib.crc32(blobs[k])
    out = path.with_name("forged.nee")
    out.write_bytes(_packed(bundle, blobs))
    return out


def huge_output(model: bytearray) -> None:
    """The model's first output tensor 2^30 values wide."""
    import tflite

    graph = tflite.Model.GetRootAsModel(model, 0).Subgraphs(0)
    graph.Tensors(graph.Outputs(0)).ShapeAsNumpy()[-1] = 1 << 30  # a view of ``model``


def truncated(model: bytearray) -> None:
    """The root table far outside the model."""
    model[:4] = (1 << 31).to_bytes(4, "little")


def test_a_forged_payload_is_refused_at_load(tmp_path) -> None:
    """A tensor shape forged to 2^30 elements in the partition's .tflite (checksums recomputed)
    is refused before LiteRT allocates it when the caller bounds memory; a payload LiteRT
    cannot parse is refused at load either way."""
    _, _, _, path = _bundle(tmp_path, "cnn")
    with pytest.raises(BundleError, match=r"tensors: expected at most 1073741824 bytes"):
        Program.load(forged(path, huge_output), max_arena_bytes=1 << 30)
    with pytest.raises(BundleError, match="LiteRT loads and runs"):
        Program.load(forged(path, truncated))


def outlives_its_load(tmp_path, backends: dict) -> None:
    """Blocks the size of the transformer's partition payload, allocated after its load (they
    would reuse any bytes the engine still reads but nobody holds), change none of its outputs."""
    _, inputs, _, path = _bundle(tmp_path, "transformer")
    program = Program.load(path, backends)
    gc.collect()
    junk = [b"\xff" * program.partitions[0].payload["model"].size for _ in range(4)]
    arrays = [t.numpy() for t in inputs]
    got = program.run(*arrays)[0]
    del junk  # held through the run
    reference = Program.load(path, {"xnnpack": Cpu()}).run(*arrays)[0]
    scale = float(np.abs(reference).max())
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5 * scale)


def test_the_model_outlives_its_load(tmp_path) -> None:
    """LiteRT's wrapped interpreter does not keep its .tflite bytes alive: the backend does."""
    outlives_its_load(tmp_path, {})
