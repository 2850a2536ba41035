"""Matrix-multiply kernels (numpy matmul -> BLAS for float32, written straight into out)."""

from __future__ import annotations

import functools

import numpy as np

from runtime_py.kernels import Bound, Kernel
from runtime_py.kernels._common import NUMERIC

Scalar = int | float


def check_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """The shape rule: ``a @ b`` (batch dims broadcasting) has ``out``'s shape and dtype.
    ValueError otherwise, at prepare (a bundle's shapes are checked at load, not at run)."""
    if (a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]
            or out.shape != (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2],
                             b.shape[-1])
            or a.dtype != out.dtype or b.dtype != out.dtype):
        raise ValueError(f"{a.dtype}{list(a.shape)} @ {b.dtype}{list(b.shape)} into "
                         f"{out.dtype}{list(out.shape)}")


def matmul(self: np.ndarray, mat2: np.ndarray, *, out: np.ndarray) -> Bound:
    """mm (2-D) and bmm (3-D, batched)."""
    check_matmul(self, mat2, out)
    return functools.partial(np.matmul, self, mat2, out=out)


def addmm(self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray, *, beta: Scalar = 1,
          alpha: Scalar = 1, out: np.ndarray) -> Bound:
    """beta * self + alpha * (mat1 @ mat2); ``self`` broadcasts and is ignored if beta == 0."""
    check_matmul(mat1, mat2, out)
    if np.broadcast_shapes(self.shape, out.shape) != out.shape:
        raise ValueError(f"bias of shape {list(self.shape)} for out {list(out.shape)}")

    def run() -> None:
        np.matmul(mat1, mat2, out=out)
        if alpha != 1:
            np.multiply(out, alpha, out=out)
        if beta != 0:
            np.add(out, self if beta == 1 else np.multiply(self, beta), out=out)

    return run


KERNELS: dict[str, Kernel] = {
    "aten::mm.out": Kernel.prepared(matmul, NUMERIC),
    "aten::bmm.out": Kernel.prepared(matmul, NUMERIC),
    "aten::addmm.out": Kernel.prepared(addmm, NUMERIC),
}
