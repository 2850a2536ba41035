"""Copy-like kernels: contiguous copies, dtype conversion, concatenation (views need none)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runtime_py.kernels import Kernel
from runtime_py.kernels._common import ALL, INT8


def clone(self: np.ndarray, *, memory_format: str | None = None, out: np.ndarray) -> None:
    """Contiguous copy (out is always C-contiguous, whatever memory_format asks)."""
    del memory_format
    np.copyto(out, self)


def to_copy(self: np.ndarray, *, non_blocking: bool = False, memory_format: str | None = None,
            out: np.ndarray) -> None:
    """Copy converted to out's dtype (float -> int truncates toward zero, as torch)."""
    del non_blocking, memory_format
    np.copyto(out, self, casting="unsafe")


def copy(self: np.ndarray, src: np.ndarray, non_blocking: bool = False, *,
         out: np.ndarray) -> None:
    """``src`` broadcast to ``self``'s shape and converted to its dtype."""
    del self, non_blocking  # self only fixes the out shape/dtype
    np.copyto(out, src, casting="unsafe")


def cat(tensors: Sequence[np.ndarray], dim: int = 0, *, out: np.ndarray) -> None:
    """Concatenate along ``dim``; legacy 1-D empty tensors are skipped, as torch does."""
    parts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors)
    np.concatenate(parts, axis=dim, out=out, casting="same_kind")


KERNELS: dict[str, Kernel] = {
    "aten::clone.out": Kernel(clone, ALL | INT8, inplace=True),
    "aten::_to_copy.out": Kernel(to_copy, ALL, inplace=True),
    "aten::copy.out": Kernel(copy, ALL, inplace=True),
    "aten::cat.out": Kernel(cat, ALL | INT8),
}
