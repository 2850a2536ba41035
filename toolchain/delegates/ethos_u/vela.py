"""Run Arm's Vela compiler (``ethos-u-vela``, the ``nee[npu]`` extra) on an int8 .tflite.

Vela runs in a subprocess with its own shipped configuration (``Arm/vela.ini``) and the board's
accelerator, system config and memory mode. ``check`` compiles to .tflite (unsupported operators
may fall back to the CPU there) and reads which operators Vela placed on the CPU, with Vela's
reason for each, plus its per-operator cycles and its summary; ``compile_raw`` compiles a graph
Vela fully supports to its raw output: command stream, encoded weights, scratch sizes and the
input/output offsets inside the scratch.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np

from toolchain.errors import ExportError

CONFIG = "Arm/vela.ini"  # Vela's own file, found in its package's config_files folder
# "Warning (supported operators) operator: OP, ofm: 'NAME'" then "Reason: ..." lines up to a blank.
_WARNING = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '([^']*)'\n"
                      r"((?:.+\n?)+)", re.MULTILINE)


# The legacy (Python) core's "Warning: OP 'NAME' is not supported on the NPU. Placing on CPU
# instead" then " - reason" lines.
_LEGACY_WARNING = re.compile(r"^Warning: \S+ '([^']*)' is not supported on the NPU\. Placing on "
                             r"CPU instead\n((?:[ -].*\n?)+)", re.MULTILINE)
LEGACY_TARGETS = ("ethos-u55", "ethos-u65")  # the legacy core's accelerators


class VelaError(ExportError):
    """Vela failed on a graph; ``message`` is its last line."""

    def __init__(self, message: str, *args: str) -> None:
        super().__init__(*args)
        self.message = message


@dataclass(frozen=True)
class Report:
    """What Vela made of a graph: CPU operators (output name -> reason), per-op cycles of the
    NPU operators, and its summary numbers."""

    cpu: dict[str, str]
    op_cycles: tuple[tuple[str, int], ...]
    cycles: int
    macs: int
    sram_bytes: int
    flash_bytes: int
    seconds: float  # Vela's inference time at its system config's clock


def vela_version() -> str:
    """The installed ethos-u-vela version; ExportError naming the extra when it is missing."""
    if importlib.util.find_spec("ethosu.vela") is None:
        raise ExportError("compiling for the board's Ethos-U NPU", "the ethos-u-vela package",
                          "it is not installed", "pip install 'nee[npu]' (or export for a "
                          "board without an NPU)")
    return version("ethos-u-vela")


def options(npu: object) -> list[str]:
    """Vela's command-line options for a ``toolchain.boards.Npu``."""
    return ["--config", CONFIG, "--accelerator-config", npu.target, "--system-config",
            npu.system_config, "--memory-mode", npu.memory_mode]


def check(model: bytes, npu: object) -> Report:
    """Compile ``model`` to .tflite with Vela and report placement, cycles and memory."""
    with tempfile.TemporaryDirectory(prefix="nee-vela-") as tmp:
        out = _run(model, npu, Path(tmp), ["--verbose-performance"])
        layers = _rows(next(Path(tmp, "out").glob("*_per-layer.csv")))
        (summary,) = _rows(next(Path(tmp, "out").glob("*_summary_*.csv")))
    reasons = {ofm: " ".join(line.strip() for line in text.splitlines()).removeprefix("Reason: ")
               for _, ofm, text in _WARNING.findall(out)}
    cpu = {row["Name"]: reasons.get(row["Name"], "Vela placed it on the CPU")
           for row in layers if row["Target"] == "CPU"}
    kib = 1024
    return Report(
        cpu=cpu,
        op_cycles=tuple((row["Name"], int(row["Op Cycles"])) for row in layers
                        if row["Target"] == "NPU"),
        cycles=int(summary["cycles_total"]), macs=int(summary["nn_macs"]),
        sram_bytes=round(float(summary["sram_memory_used"]) * kib),
        flash_bytes=round((float(summary["off_chip_flash_memory_used"])
                           + float(summary["on_chip_flash_memory_used"])
                           + float(summary["dram_memory_used"])) * kib),
        seconds=float(summary["inference_time"]))


def legacy_reasons(model: bytes, npu: object) -> dict[str, str]:
    """Why Vela's legacy core places operators on the CPU (output name -> its constraint
    lines): the default core stops at some operators it cannot run instead of saying why.
    Empty for targets the legacy core does not know."""
    if not npu.target.startswith(LEGACY_TARGETS):
        return {}
    with tempfile.TemporaryDirectory(prefix="nee-vela-") as tmp:
        out = _run(model, npu, Path(tmp), ["--debug-force-legacy-core"])
    return {name: " ".join(line.strip(" -") for line in text.splitlines())
            for name, text in _LEGACY_WARNING.findall(out)}


def compile_raw(model: bytes, npu: object) -> dict[str, np.ndarray]:
    """Compile ``model`` (every operator NPU-supported) to Vela's raw output arrays."""
    with tempfile.TemporaryDirectory(prefix="nee-vela-") as tmp:
        _run(model, npu, Path(tmp), ["--output-format", "raw"])
        (path,) = Path(tmp, "out").glob("*.npz")
        with np.load(path, allow_pickle=False) as raw:
            return {key: raw[key] for key in raw.files if "quantization" not in key}


def _run(model: bytes, npu: object, folder: Path, extra: list[str]) -> str:
    vela_version()
    source = folder / "partition.tflite"
    source.write_bytes(model)
    command = [sys.executable, "-m", "ethosu.vela", str(source), "--output-dir",
               str(folder / "out"), *options(npu), *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise VelaError(lines[-1], f"Vela ({' '.join(options(npu)[2:])})", "a compiled partition",
                        f"exit status {done.returncode}: {lines[-1]}",
                        "report it with the partition's .tflite (nee-export --format tflite)")
    return done.stdout


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(f)]
