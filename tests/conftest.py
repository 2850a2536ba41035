"""Shared fixtures: example models exported once per session, with torch eager references."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from toolchain.modules import load_file

# torch's OpenMP pool and numpy's BLAS pool contend on small machines: one torch thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class Exported:
    """An example exported to a bundle file, with its inputs and torch eager outputs."""

    name: str
    path: Path
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    result: object  # toolchain.export.result.ExportResult
    model: object  # the torch nn.Module, in eval mode
    torch_inputs: tuple


def load_example(name: str):
    """Import examples/<name>.py as a module."""
    return load_file(EXAMPLES / f"{name}.py")


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """``exported(name)`` -> Exported, computed once per example per session."""
    import torch

    from toolchain.export import export
    from toolchain.serialize.bundle import write_bundle

    cache: dict[str, Exported] = {}

    def get(name: str) -> Exported:
        if name not in cache:
            module = load_example(name)
            model, inputs = module.Model().eval(), module.example_inputs()
            with torch.no_grad():
                expected = model(*inputs)
            expected = expected if isinstance(expected, (tuple, list)) else [expected]
            result = export(model, inputs, name=name)
            path = tmp_path_factory.mktemp(name) / f"{name}.nee"
            write_bundle(result, path)
            cache[name] = Exported(name, path, [t.numpy() for t in inputs],
                                   [t.numpy() for t in expected], result, model, inputs)
        return cache[name]

    return get
