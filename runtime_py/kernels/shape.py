"""Copy-like kernels: contiguous copies, dtype conversion, concatenation (views need none)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runtime_py.kernels import Bound, Kernel, rules
from runtime_py.kernels._common import ALL, INT8, copier


def clone(self: np.ndarray, *, memory_format: str | None = None, out: np.ndarray) -> Bound:
    """Contiguous copy (out is always C-contiguous, whatever memory_format asks)."""
    del memory_format
    return copier(out, self)


def to_copy(self: np.ndarray, *, non_blocking: bool = False, memory_format: str | None = None,
            out: np.ndarray) -> Bound:
    """Copy converted to out's dtype (float -> int truncates toward zero, as torch)."""
    del non_blocking, memory_format
    return _converted(self, out)


def copy(self: np.ndarray, src: np.ndarray, non_blocking: bool = False, *,
         out: np.ndarray) -> Bound:
    """``src`` broadcast to ``self``'s shape and converted to its dtype."""
    del self, non_blocking  # self only fixes the out shape/dtype
    return _converted(src, out)


def _converted(src: np.ndarray, out: np.ndarray) -> Bound:
    """The call copying ``src`` into ``out`` in out's dtype (a plain copy where they agree)."""
    if src.dtype == out.dtype:
        return copier(out, src)

    def run() -> None:
        np.copyto(out, src, casting="unsafe")

    return run


def cat(tensors: Sequence[np.ndarray], dim: int = 0, *, out: np.ndarray) -> Bound:
    """Concatenate along ``dim``; legacy 1-D empty tensors are skipped, as torch does."""
    parts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors)

    def run() -> None:
        np.concatenate(parts, axis=dim, out=out, casting="same_kind")

    return run


def _check_to_copy(self: np.ndarray, *, out: np.ndarray, **_: object) -> None:
    """out has self's shape, in any dtype (the out fixes it)."""
    rules.expect(out, rules.tensor(self, "self").shape, out.dtype, {"self": self})


def _check_copy(self: np.ndarray, src: np.ndarray, *, out: np.ndarray, **_: object) -> None:
    """out has self's shape and dtype; src (any dtype) broadcasts to self's shape."""
    inputs = {"self": rules.tensor(self, "self"), "src": rules.tensor(src, "src")}
    if not rules.broadcasts_to(src.shape, self.shape):
        rules.refuse(inputs, "src does not broadcast to self")
    rules.expect(out, self.shape, self.dtype, inputs)


def _check_cat(tensors: Sequence[np.ndarray], dim: int = 0, *, out: np.ndarray,
               **_: object) -> None:
    """Tensors of one rank, equal off ``dim`` (1-D empty ones skipped), give their sizes along
    ``dim`` summed, in their promoted dtype."""
    if not isinstance(tensors, list) or not tensors:
        raise TypeError(f"tensors {rules.describe(tensors)}: a non-empty tensor list expected")
    inputs = {"tensors": [rules.tensor(t, "tensors") for t in tensors], "dim": dim}
    parts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors
    first = parts[0].shape
    if not first:
        rules.refuse(inputs, "0-d tensors cannot be concatenated")
    d = rules.axis(dim, len(first))
    if any(len(t.shape) != len(first) or t.shape[:d] + t.shape[d + 1:] != first[:d] + first[d + 1:]
           for t in parts):
        rules.refuse(inputs, "sizes differ off dim")
    shape = (*first[:d], sum(t.shape[d] for t in parts), *first[d + 1:])
    rules.expect(out, shape, rules.result_type(*tensors), inputs)


KERNELS: dict[str, Kernel] = {
    "aten::clone.out": Kernel.prepared(clone, ALL | INT8, inplace=True,
                                       check=rules.elementwise("self")),
    "aten::_to_copy.out": Kernel.prepared(to_copy, ALL | INT8, inplace=True,
                                          check=_check_to_copy),
    "aten::copy.out": Kernel.prepared(copy, ALL, inplace=True, check=_check_copy),
    "aten::cat.out": Kernel.prepared(cat, ALL | INT8, check=_check_cat),
}
