"""``nee-build``: a board's runtime wheel with only the kernels its bundles need, installed in a
fresh venv without torch, runs them as the full runtime does and refuses a bundle needing a
kernel it dropped, naming every missing (op, dtype) and the build."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_packaging import _run, _venv

from runtime_py.kernels import KERNELS
from runtime_py.program import Program
from toolchain.cli import build_main, export_main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BOARD = "cortex-m55-ethos-u55"


def _export(tmp_path: Path, name: str, *args: str) -> Path:
    path = tmp_path / f"{name}.nee"
    done = CliRunner().invoke(export_main, [f"{EXAMPLES / name}.py:Model", "-o", str(path),
                                            *args])
    assert done.exit_code == 0, done.output
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("build")
    bundles = [_export(folder, "cnn", "--quantize", "int8", "--board", BOARD),
               _export(folder, "mlp", "--board", BOARD)]
    done = CliRunner().invoke(build_main, [*map(str, bundles), "--board", BOARD, "-o",
                                           str(folder / "out")])
    assert done.exit_code == 0, done.output
    return folder, bundles, done.output


def test_build_keeps_the_bundles_kernels_and_says_what_it_dropped(built):
    folder, bundles, output = built
    summary = json.loads((folder / "out" / "build.json").read_text())
    kept = {k.rpartition(" (")[0] for k in summary["kernels_kept"]}
    assert "nee::conv2d_int8.out" in kept and "aten::addmm.out" in kept
    assert summary["kernels_dropped"] > 100 and "attention" in summary["modules_dropped"]
    assert summary["backends"] == ["cpu", "ethos-u"]
    (wheel,) = (folder / "out").glob("*.whl")
    backends = {n.rpartition("/")[2] for n in zipfile.ZipFile(wheel).namelist()
                if "runtime_py/backends/" in n}
    assert backends == {"__init__.py", "ethos_u.py"}  # no xnnpack, openvino, tflite_io
    assert summary["wheel_bytes"] < summary["full_wheel_bytes"]
    assert f"kernels kept ({len(summary['kernels_kept'])})" in output and "full runtime" in output
    assert {p.name for p in (folder / "out" / "bundles").iterdir()} == {b.name for b in bundles}
    yaml = (folder / "out" / "selected_operators.yaml").read_text()
    assert "  nee::conv2d_int8.out:\n  - v1/1;" in yaml and "include_all_operators: false" in yaml
    header = (folder / "out" / "micro_op_resolver.h").read_text()
    assert "resolver.AddEthosU()" in header and "resolver.AddFullyConnected()" in header


def test_the_wheel_runs_the_bundles_without_torch_and_refuses_others(built, exported, tmp_path):
    folder, bundles, _ = built
    (wheel,) = (folder / "out").glob("*.whl")
    venv = _venv(tmp_path / "venv", str(wheel))
    python = str(venv / "bin" / "python")
    probe = ("import importlib.util as u, runtime_py.kernels as k; "
             "assert u.find_spec('torch') is None; print(len(k.KERNELS))")
    assert int(_run([python, "-c", probe], cwd=tmp_path).stdout) < len(KERNELS)
    for bundle in bundles:
        with Program.load(bundle) as program:
            x = np.random.default_rng(0).standard_normal(program.inputs[0].shape)
            np.save(tmp_path / "x.npy", x.astype(program.inputs[0].dtype))
            want = program.run(np.load(tmp_path / "x.npy"))[0].copy()
        _run([str(venv / "bin" / "nee-run"), str(bundle), "-i", "x.npy", "-o", "out.npz"],
             cwd=tmp_path)
        with np.load(tmp_path / "out.npz") as got:
            np.testing.assert_array_equal(got["output_0"], want)
    other = exported("transformer").path  # embedding, attention: not in this build
    done = _run([str(venv / "bin" / "nee-run"), str(other), "--random"], cwd=tmp_path,
                check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "aten::embedding.out (float32)" in done.stderr
    assert f"nee-build for board {BOARD} from cnn.nee, mlp.nee" in done.stderr


def test_a_cpu_delegate_boards_runtime_keeps_its_backend(tmp_path):
    """rpi5's recipe names the XNNPACK delegate: its runtime ships that backend and the
    modules beside it (OpenVINO's engine), with both packages as extras."""
    done = CliRunner().invoke(build_main, [str(_export(tmp_path, "mlp", "--board", "rpi5")),
                                           "--board", "rpi5", "-o", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    summary = json.loads((tmp_path / "out" / "build.json").read_text())
    assert summary["backends"] == ["cpu", "xnnpack"]
    with zipfile.ZipFile(tmp_path / "out" / summary["wheel"]) as wheel:
        names = {n.rpartition("/")[2] for n in wheel.namelist() if "/backends/" in n}
        info = wheel.read("runtime_py/build_info.py").decode()
        metadata = next(wheel.read(n).decode() for n in wheel.namelist()
                        if n.endswith("METADATA"))
    assert names == {"__init__.py", "xnnpack.py", "openvino.py", "fastest.py", "tflite_io.py"}
    assert "BACKENDS = ('xnnpack',)" in info
    assert "Provides-Extra: xnnpack" in metadata and "Provides-Extra: openvino" in metadata


def test_a_bundle_for_another_board_is_refused(tmp_path):
    done = CliRunner().invoke(build_main, [str(_export(tmp_path, "mlp", "--board", "rpi4")),
                                           "--board", BOARD, "-o", str(tmp_path / "out")])
    assert done.exit_code == 1 and "mlp.nee (rpi4)" in done.output
    assert f"--board {BOARD}" in done.output
