"""Calibration samples from a folder: one .npz (arrays named after the inputs, or arr_0, arr_1
... as ``np.savez(path, *arrays)`` names them) or one .npy (single-input models) per sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from toolchain.errors import ExportError


def read_samples(folder: str | Path, names: list[str]) -> list[tuple[np.ndarray, ...]]:
    """Every sample in ``folder``, in file-name order, as a tuple in input order."""
    files = sorted(p for p in Path(folder).iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise ExportError(f"calibration folder {folder}", "at least one .npy or .npz file",
                          "none", "save one sample per file with np.save or np.savez")
    return [_sample(path, names) for path in files]


def _sample(path: Path, names: list[str]) -> tuple[np.ndarray, ...]:
    if path.suffix == ".npy":
        if len(names) != 1:
            raise ExportError(f"calibration sample {path}", f"a .npz with arrays {names}",
                              "a .npy (one array)", "use np.savez(path, name=array, ...)")
        return (np.load(path),)
    with np.load(path) as npz:
        for keys in (names, [f"arr_{i}" for i in range(len(names))]):
            if set(keys) <= set(npz.files):
                return tuple(npz[k] for k in keys)
        raise ExportError(f"calibration sample {path}", f"arrays named {names}",
                          f"{sorted(npz.files)}", "save with np.savez(path, <input>=array, ...)")
