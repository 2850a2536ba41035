"""NEE as users install it: a wheel built with ``python -m build``, in fresh venvs outside the
repository, with the toolchain extra and without it (runtime only, no torch)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from runtime_py import __version__
from toolchain.boards import available_boards

ROOT = Path(__file__).resolve().parents[1]
BOARD = "cortex-m55-ethos-u55"


def test_package_list_names_every_package():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("runtime_py", "toolchain") for p in (ROOT / top).rglob("__init__.py")}
    assert listed == found | {"toolchain.recipes"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel (built from the sdist), as ``python -m build`` makes them."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "-o", str(out), str(ROOT)], cwd=out)
    return out


def test_sdist_and_wheel_carry_the_board_recipes(dist):
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    with tarfile.open(sdist) as tar:
        in_sdist = {Path(n).name for n in tar.getnames() if "/boards/" in n}
    in_wheel = {Path(n).name for n in zipfile.ZipFile(wheel).namelist()
                if n.startswith("toolchain/recipes/")}
    recipes = {f"{name}.toml" for name in available_boards()}
    assert recipes <= in_sdist and recipes <= in_wheel
    assert wheel.name == f"nee-{__version__}-py3-none-any.whl"


def test_readme_main_job_runs_from_the_installed_wheel(dist, tmp_path):
    venv = _venv(tmp_path / "venv", _wheel(dist, "[toolchain]"))
    user = tmp_path / "user"  # a folder outside the repository, holding the user's model file
    user.mkdir()
    shutil.copy(ROOT / "examples" / "cnn.py", user)
    job = _readme_main_job().replace(".venv/bin/", f"{venv}/bin/").replace("examples/", "")
    done = _run(["bash", "-c", job], cwd=user)
    assert "output_0: float32[1, 10]" in done.stdout and "lower bound" in done.stdout
    on_board = job.replace("-o cnn.nee", f"-o cnn.nee --board {BOARD}")
    assert on_board != job
    done = _run(["bash", "-c", on_board], cwd=user)
    assert f"board {BOARD}" in done.stdout and "arena sram" in done.stdout


def test_runtime_alone_installs_without_torch(dist, tmp_path, exported):
    venv = _venv(tmp_path / "venv", _wheel(dist, ""))
    bin_ = venv / "bin"
    _run([str(bin_ / "python"), "-c", "import importlib.util as u; "
          "assert all(u.find_spec(m) is None for m in ('torch', 'matplotlib'))"], cwd=tmp_path)
    ex = exported("cnn")
    np.save(tmp_path / "x.npy", ex.inputs[0])
    _run([str(bin_ / "nee-run"), str(ex.path), "-i", "x.npy", "-o", "out.npz"], cwd=tmp_path)
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_allclose(saved["output_0"], ex.expected[0], rtol=1e-5, atol=1e-6)
    assert "kernels (" in _run([str(bin_ / "nee-inspect"), str(ex.path)], cwd=tmp_path).stdout
    assert f"nee {__version__}" in _run([str(bin_ / "nee-run"), "--version"], cwd=tmp_path).stdout
    done = _run([str(bin_ / "nee-export"), "model.py:Model", "-o", "m.nee"], cwd=tmp_path,
                check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "pip install 'nee[toolchain]'" in done.stderr


def _readme_main_job() -> str:
    section = (ROOT / "README.md").read_text().split("## Run the main job", 1)[1]
    return section.split("```sh\n", 1)[1].split("\n```", 1)[0]


def _wheel(dist: Path, extra: str) -> str:
    (wheel,) = dist.glob("*.whl")
    return f"{wheel}{extra}"


def _venv(path: Path, requirement: str) -> Path:
    _run([sys.executable, "-m", "venv", str(path)], cwd=path.parent)
    _run([str(path / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
          requirement], cwd=path.parent)
    return path


def _run(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run with an environment that cannot see the repository's venv or sources."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if check:
        assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done
