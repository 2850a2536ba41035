"""``nee-build``: a board's runtime holding only what its bundles need.

From the bundles' kernel lists (their union) and the board's delegate backends, stage a copy of
``runtime_py`` without the kernel modules no selected kernel needs (nor the modules those import)
and without the backends the board lacks, write ``runtime_py/build_info.py`` naming the
selection, and build it as an installable wheel ``nee_runtime_<board>``. Beside it: the bundles,
ExecuTorch's ``selected_operators.yaml`` and a TFLite Micro resolver header from the same list,
and ``build.json`` (kernels kept and dropped, modules, wheel sizes against the full runtime).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime_py import __version__
from runtime_py import kernels as kernel_package
from runtime_py.backends import COMPANIONS, DELEGATE_BACKENDS
from runtime_py.errors import NeeError
from runtime_py.loader import LoadedBundle, load_bundle, needed_kernels
from toolchain.boards import Board
from toolchain.errors import ExportError
from toolchain.selective_build.interop import executorch_yaml, tflm_resolver

RUNTIME = Path(kernel_package.__file__).resolve().parents[1]  # the runtime_py package folder
KERNEL_DIR = RUNTIME / "kernels"


@dataclass(frozen=True)
class BuildSummary:
    """What ``build`` made and what it left out."""

    board: str
    bundles: list[str]
    kernels_kept: list[str]  # "op (dtype)"
    kernels_dropped: int
    modules_kept: list[str]
    modules_dropped: list[str]
    backends: list[str]
    wheel: str
    wheel_bytes: int
    full_wheel_bytes: int


def build(board: Board, bundles: list[Path], out: Path) -> BuildSummary:
    """Build ``board``'s runtime for ``bundles`` into folder ``out`` (created)."""
    loaded = [_load(path) for path in bundles]
    _check_boards(board, bundles, loaded)
    selected = sorted({pair for b in loaded for pair in needed_kernels(b)})
    backends = _backends(board, bundles, loaded)
    modules = _modules({op for op, _ in selected})
    out.mkdir(parents=True, exist_ok=True)
    names = [p.name for p in bundles]
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _wheel(_stage(Path(tmp) / "pruned", board, names, selected, modules, backends),
                       out)
        full_bytes = _wheel(_stage(Path(tmp) / "full", board, names, None, None, None),
                            Path(tmp)).stat().st_size
    (out / "bundles").mkdir(exist_ok=True)
    for path in bundles:
        shutil.copyfile(path, out / "bundles" / path.name)
    (out / "selected_operators.yaml").write_text(executorch_yaml(selected, names))
    (out / "micro_op_resolver.h").write_text(tflm_resolver(selected, names,
                                                           "ethos-u" in backends))
    every = sum(len(k.dtypes) for k in kernel_package.KERNELS.values())
    summary = BuildSummary(
        board.name, names, [f"{op} ({dtype})" for op, dtype in selected], every - len(selected),
        sorted(modules), sorted(_kernel_modules() - modules), ["cpu", *backends], wheel.name,
        wheel.stat().st_size, full_bytes)
    (out / "build.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def _load(path: Path) -> LoadedBundle:
    try:
        return load_bundle(path)
    except NeeError as e:
        raise ExportError(f"nee-build input {path}", "a bundle this runtime loads", str(e),
                          "export it again with this NEE") from e


def _check_boards(board: Board, paths: list[Path], loaded: list[LoadedBundle]) -> None:
    """Every bundle exported for this board (or for none)."""
    other = [f"{p.name} ({b.bundle.board})" for p, b in zip(paths, loaded, strict=True)
             if b.bundle.board and b.bundle.board != board.name]
    if other:
        raise ExportError(f"bundles for board {board.name}", f"bundles exported with --board "
                          f"{board.name} (or without a board)", "; ".join(other),
                          f"export them again with --board {board.name}")


def _backends(board: Board, paths: list[Path], loaded: list[LoadedBundle]) -> list[str]:
    """The delegate backends to ship: the board's NPU backend when it has one, and its CPU
    delegate's (the XNNPACK backend, which runs where ai-edge-litert is installed, with the
    OpenVINO engine beside it). A partition for a backend not shipped needs its CPU
    fallback."""
    kept = (["ethos-u"] if board.npu is not None else []) + (
        [board.cpu_delegate] if board.cpu_delegate else [])
    stranded = [f"{p.name} partition {i} ({d.backend})"
                for p, b in zip(paths, loaded, strict=True)
                for i, d in enumerate(b.bundle.delegates or [])
                if d.backend not in kept and not d.cpuFallback]
    if stranded:
        raise ExportError(f"partitions for board {board.name}", f"backends the board has "
                          f"({kept or 'none'}) or a CPU fallback", "; ".join(stranded),
                          "export with --cpu-fallback or for a board with that NPU")
    return kept


def _kernel_modules() -> set[str]:
    """The modules holding kernels (a runtime always ships the package's other modules)."""
    return set(kernel_package.MODULES)


def _modules(ops: set[str]) -> set[str]:
    """The kernel modules defining ``ops``, and every kernel module those import."""
    defining = {name for name in _kernel_modules()
                if ops & importlib.import_module(f"runtime_py.kernels.{name}").KERNELS.keys()}
    needed, todo = set(), list(defining)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += _imported_kernel_modules(KERNEL_DIR / f"{name}.py") - needed
    return needed


def _imported_kernel_modules(path: Path) -> set[str]:
    """Kernel modules ``path`` imports (``from runtime_py.kernels import nn`` or
    ``from runtime_py.kernels.indexing import take``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "runtime_py.kernels":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "runtime_py.kernels."):
            found.add(node.module.rpartition(".")[2])
    return found & _kernel_modules()


def _stage(root: Path, board: Board, bundles: list[str],
           selected: list[tuple[str, str]] | None, modules: set[str] | None,
           backends: list[str] | None) -> Path:
    """A project folder for the runtime wheel: ``runtime_py`` with only ``modules`` and
    ``backends`` (None: everything) and its build_info, and a pyproject."""
    package = root / "runtime_py"
    shutil.copytree(RUNTIME, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if modules is not None:
        for name in _kernel_modules() - modules:
            (package / "kernels" / f"{name}.py").unlink()
    if backends is not None:
        for backend, (module, _, _) in DELEGATE_BACKENDS.items():
            if backend not in backends:
                for name in (module, *COMPANIONS.get(backend, ())):
                    (package / "backends" / f"{name.rpartition('.')[2]}.py").unlink()
    if selected is not None:
        (package / "build_info.py").write_text(_build_info(board, bundles, selected, modules,
                                                           backends))
    (root / "pyproject.toml").write_text(_pyproject(board if selected is not None else None))
    return root


def _build_info(board: Board, bundles: list[str], selected: list[tuple[str, str]],
                modules: set[str], backends: list[str]) -> str:
    kernels: dict[str, set[str]] = {}
    for op, dtype in selected:
        kernels.setdefault(op, set()).add(dtype)
    lines = ['"""Written by nee-build: the kernels and backends of this pruned runtime."""', "",
             "KERNELS = {"]
    lines += [f"    {op!r}: frozenset({sorted(d)!r})," for op, d in sorted(kernels.items())]
    origin = f"nee-build for board {board.name} from {', '.join(bundles)}"
    lines += ["}", f"KERNEL_MODULES = {tuple(sorted(modules))!r}",
              f"BACKENDS = {tuple(backends)!r}", f"BUILD = {origin!r}", ""]
    return "\n".join(lines)


def _pyproject(board: Board | None) -> str:
    name = f"nee-runtime-{board.name}" if board else "nee-runtime"
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{__version__}"
description = "NEE's runtime{f' for board {board.name}' if board else ''}"
requires-python = ">=3.11"
dependencies = ["numpy>=2.1", "flatbuffers==25.12.19", "click>=8.1", "threadpoolctl>=3.5"]

[project.optional-dependencies]
xnnpack = ["ai-edge-litert==2.3.0"]  # the xnnpack backend runs only where it is installed
openvino = ["openvino==2026.4.1"]  # the other engine of the xnnpack partitions, if chosen

[project.scripts]
nee-run = "runtime_py.cli:main"

[tool.setuptools]
packages = ["runtime_py", "runtime_py.backends", "runtime_py.fbs", "runtime_py.kernels"]
"""


def _wheel(project: Path, out: Path) -> Path:
    """Build ``project`` as a wheel into ``out`` (no network: this interpreter's setuptools)."""
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o",
                           str(out), str(project)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ExportError(f"building the runtime wheel in {project}", "a wheel",
                          (done.stderr or done.stdout).strip().splitlines()[-1],
                          "pip install build setuptools")
    name = re.sub(r"[-.]", "_", _project_name(project))
    (wheel,) = out.glob(f"{name}-*.whl")
    return wheel


def _project_name(project: Path) -> str:
    return re.search(r'^name = "(.+)"$', (project / "pyproject.toml").read_text(),
                     re.M).group(1)
