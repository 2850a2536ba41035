"""Deterministic builds: the same export in two processes with different hash seeds writes the
same bytes (set and dict orders must not leak into the bundle)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [[], ["--quantize", "int8", "--no-npu"]], ids=["float", "int8"])
def test_exports_in_two_processes_are_byte_identical(tmp_path, args):
    written = []
    for seed in ("1", "2"):
        out = tmp_path / f"cnn-{seed}.nee"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([str(Path(sys.executable).parent / "nee-export"),
                        f"{ROOT}/examples/cnn.py:Model", "-o", str(out), *args], env=env,
                       check=True, capture_output=True)
        written.append(out.read_bytes())
    assert written[0] == written[1]
