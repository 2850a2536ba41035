"""The three console commands, end to end on the example MLP."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from runtime_py import __version__
from runtime_py.cli import format_profile, median_profile
from runtime_py.cli import main as run_main
from runtime_py.format import SCHEMA_VERSION
from runtime_py.program import Call
from toolchain.cli import boards_main, export_main, inspect_main
from toolchain.memory_plan.cli import main as plan_main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_export_run_inspect(tmp_path, exported):
    bundle = tmp_path / "mlp.nee"
    runner = CliRunner()
    done = runner.invoke(export_main, [f"{EXAMPLES}/mlp.py:Model", "-o", str(bundle)])
    assert done.exit_code == 0, done.output
    assert "wrote" in done.output and bundle.exists()

    x = exported("mlp").inputs[0]
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    done = runner.invoke(run_main, [str(bundle), "--input", str(tmp_path / "x.npy"), "-o",
                                    str(out), "--profile", "--repeat", "3"])
    assert done.exit_code == 0, done.output
    assert "aten::addmm.out" in done.output  # profile table
    assert "each call's median over 3 run(s)" in done.output
    assert "mat1 4x16, mat2 16x32 -> 4x32" in done.output  # the slowest calls' shapes
    with np.load(out) as saved:
        (value,) = saved.values()
    assert value.shape == (4, 10)

    done = runner.invoke(inspect_main, [str(bundle)])
    assert done.exit_code == 0, done.output
    for expected in ("program (", "lower bound", "kernels (", "aten::addmm.out float32"):
        assert expected in done.output


def test_profile_takes_each_calls_median() -> None:
    """Per call, the median of its times over the runs; the slowest calls with shapes."""
    calls = [Call("aten::add.out", lambda: None, "model.py:3", "self 2x3, other 2x3 -> 2x3"),
             Call("aten::relu.out", lambda: None, "", "self 2x3 -> 2x3")]
    runs = [[(calls[0], a), (calls[1], b)] for a, b in ((1.0, 9.0), (3.0, 2.0), (2.0, 1.0))]
    timings = median_profile(runs)
    assert timings == [(calls[0], 2.0), (calls[1], 2.0)]
    text = format_profile([(calls[0], 0.004), (calls[1], 0.001)], slowest=1)
    assert "4.000 ms  aten::add.out  self 2x3, other 2x3 -> 2x3  (model.py:3)" in text
    assert "aten::relu.out  self" not in text  # beyond the one slowest call


def test_export_errors_are_clean(tmp_path):
    runner = CliRunner()
    done = runner.invoke(export_main, ["examples/nothere.py:Model", "-o", str(tmp_path / "a")])
    assert done.exit_code == 1 and "Error:" in done.output and "Traceback" not in done.output
    done = runner.invoke(export_main, [f"{EXAMPLES}/mlp.py:Nope", "-o", str(tmp_path / "a")])
    assert done.exit_code == 1 and "'Nope'" in done.output


def test_run_errors_are_clean(tmp_path):
    bad = tmp_path / "bad.nee"
    bad.write_bytes(b"hello world, not a bundle")
    done = CliRunner().invoke(run_main, [str(bad), "--random"])
    assert done.exit_code == 1 and "not a NEE bundle" in done.output


def test_untraceable_model_and_bad_output_dir_are_clean_errors(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.reshape(3, 7)\n"
        "def example_inputs():\n"
        "    return (torch.zeros(4),)\n"
    )
    runner = CliRunner()
    done = runner.invoke(export_main, [f"{source}:Model", "-o", str(tmp_path / "b.nee")])
    assert done.exit_code == 3 and "torch.export of Model" in done.output  # unsupported
    done = runner.invoke(export_main, [f"{EXAMPLES}/mlp.py:Model", "-o",
                                       str(tmp_path / "missing" / "m.nee")])
    assert done.exit_code == 1 and "existing directory" in done.output


def test_inspect_draws_the_plan_and_run_takes_random_inputs(tmp_path, exported):
    bundle = str(exported("cnn").path)
    png = tmp_path / "plan.png"
    done = CliRunner().invoke(inspect_main, [bundle, "--plan-png", str(png), "--buffers"])
    assert done.exit_code == 0, done.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "steps [" in done.output  # the --buffers listing
    done = CliRunner().invoke(run_main, [bundle, "--random", "--repeat", "3"])
    assert done.exit_code == 0, done.output
    assert "over 3 run(s)" in done.output


@pytest.mark.parametrize("command", [export_main, inspect_main, run_main, plan_main,
                                     boards_main])
def test_every_command_prints_nee_and_schema_versions(command):
    done = CliRunner().invoke(command, ["--version"])
    assert done.exit_code == 0
    assert done.output.strip() == f"nee {__version__}, bundle schema {SCHEMA_VERSION}"


def test_export_typo_in_board_lists_the_known_names(tmp_path):
    done = CliRunner().invoke(export_main, [f"{EXAMPLES}/mlp.py:Model", "-o",
                                            str(tmp_path / "m.nee"), "--board", "cortex-m55"])
    assert done.exit_code == 1
    assert "did you mean 'cortex-m55-ethos-u55'" in done.output and "'host'" in done.output


def test_export_tflite_format(tmp_path, exported):
    model = tmp_path / "mlp.tflite"
    done = CliRunner().invoke(export_main, [f"{EXAMPLES}/mlp.py:Model", "-o", str(model),
                                            "--format", "tflite"])
    assert done.exit_code == 0, done.output
    assert "TFLite flatbuffer" in done.output and model.read_bytes()[4:8] == b"TFL3"
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(model))
    interpreter.allocate_tensors()
    (x,) = exported("mlp").inputs
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)  # NEE's layout
    interpreter.invoke()
    out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.testing.assert_allclose(out, exported("mlp").expected[0], rtol=1e-5, atol=1e-6)

    source = tmp_path / "cumsum.py"
    source.write_text("import torch\n"
                      "class Model(torch.nn.Module):\n"
                      "    def forward(self, x):\n"
                      "        return x.cumsum(1)\n"
                      "def example_inputs():\n"
                      "    return (torch.zeros(2, 3),)\n")
    done = CliRunner().invoke(export_main, [f"{source}:Model", "-o", str(tmp_path / "c.tflite"),
                                            "--format", "tflite"])
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert "aten::cumsum.out (1 call)" in done.output and "cumsum.py:4" in done.output


def _bad_files(folder: Path) -> dict[str, Path]:
    files = {"text.npy": b"hello\n", "image.npy": b"\x89PNG\r\n\x1a\n", "empty.npy": b"",
             "text.npz": b"not a zip"}
    paths = {name: folder / name for name in files}
    for name, data in files.items():
        paths[name].write_bytes(data)
    np.save(folder / "objects.npy", np.array([{"a": 1}], dtype=object))
    np.savez(folder / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    return {**paths, "objects.npy": folder / "objects.npy", "objects.npz": folder / "objects.npz"}


@pytest.mark.parametrize("name", ["text.npy", "image.npy", "empty.npy", "text.npz",
                                  "objects.npy", "objects.npz"])
def test_unreadable_input_files_are_one_line_with_exit_status_1(tmp_path, exported, name):
    path = _bad_files(tmp_path)[name]
    done = CliRunner().invoke(run_main, [str(exported("cnn").path), "-i", str(path)])
    assert done.exit_code == 1 and isinstance(done.exception, (SystemExit, type(None)))
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: input file {path}: expected a .npy")


@pytest.mark.parametrize("args, message", [
    (["-i", "{tmp}"], "is a directory"),
    (["--random", "-o", "{tmp}/missing/out.npz"], "is not an existing folder"),
    (["--random", "--repeat", "0"], "0 is not in the range x>=1"),
])
def test_usage_errors_exit_with_status_2_before_running(tmp_path, exported, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = CliRunner().invoke(run_main, [str(exported("cnn").path), *args])
    assert done.exit_code == 2 and message in done.output and "latency" not in done.output
