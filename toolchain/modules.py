"""Import a Python file by path: ``nee-export FILE.py:Model``, and the examples in tests and
benchmarks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(path: str | Path) -> ModuleType:
    """Import ``path`` as a module named after its stem, registered in ``sys.modules`` (so
    ``inspect`` finds its source); FileNotFoundError if it is not a Python file. While it runs,
    its folder is first on ``sys.path``, as for ``python FILE.py``: it may import its siblings."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FileNotFoundError(str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def model_files(folder: str | Path) -> list[Path]:
    """The model files of a folder like examples/: ``*.py`` not starting with ``_`` (shared
    helpers such as ``_blocks.py``)."""
    return sorted(p for p in Path(folder).glob("*.py") if not p.stem.startswith("_"))
