"""The committed generated flatbuffer code is exactly what flatc makes from schemas/nee.fbs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_regenerating_reproduces_committed_code(tmp_path):
    spec = importlib.util.spec_from_file_location("generate", ROOT / "schemas" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    fresh = generate.generate(tmp_path)
    committed = ROOT / "runtime_py" / "fbs"
    fresh_files = sorted(p.name for p in fresh.glob("*.py"))
    assert fresh_files == sorted(p.name for p in committed.glob("*.py"))
    for name in fresh_files:
        assert (fresh / name).read_text() == (committed / name).read_text(), name
