"""Checks shared by the backends running .tflite partitions (LiteRT's and OpenVINO's): the
model's inputs and outputs against the partition's arena views, its tensors against the
caller's memory limit, and the error for a payload the engine refuses."""

from __future__ import annotations

import numpy as np

from runtime_py.errors import BundleError


def refused(where: str, engine: str, error: Exception) -> BundleError:
    """The error for a payload ``engine`` refuses or cannot run."""
    return BundleError(where, f"a .tflite model {engine} loads and runs (payload 'model')",
                       f"{type(error).__name__}: {error}", "export the bundle again")


def check_memory(where: str, total: int, limit: int | None) -> None:
    """The model's tensors (``total`` bytes, before the engine allocates them) within
    ``limit`` bytes (if any): a forged shape could ask for terabytes."""
    if limit is not None and total > limit:
        raise BundleError(f"{where} tensors", f"at most {limit} bytes (the caller's "
                          "max_arena_bytes)", f"{total} bytes", "raise max_arena_bytes or "
                          "export the bundle again")


def check_io(where: str, role: str, found: list[tuple[tuple[int, ...], np.dtype]],
             views: list[np.ndarray]) -> None:
    """The model's inputs or outputs (``role``), as (shape, dtype), those of the arena views."""
    expected = [(v.shape, v.dtype) for v in views]
    if found != expected:
        raise BundleError(f"{where} {role}s", f"shapes and dtypes {expected} (the arena's)",
                          str(found), "export the bundle again")
