"""Matrix-multiply kernels (numpy matmul -> BLAS for float32, written straight into out)."""

from __future__ import annotations

import numpy as np

from runtime_py.kernels import Bound, Kernel
from runtime_py.kernels._common import NUMERIC

Scalar = int | float


def matmul(self: np.ndarray, mat2: np.ndarray, *, out: np.ndarray) -> None:
    """mm (2-D) and bmm (3-D, batched)."""
    np.matmul(self, mat2, out=out)


def addmm(self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray, *, beta: Scalar = 1,
          alpha: Scalar = 1, out: np.ndarray) -> Bound:
    """beta * self + alpha * (mat1 @ mat2); ``self`` broadcasts and is ignored if beta == 0."""

    def run() -> None:
        np.matmul(mat1, mat2, out=out)
        if alpha != 1:
            np.multiply(out, alpha, out=out)
        if beta != 0:
            np.add(out, self if beta == 1 else np.multiply(self, beta), out=out)

    return run


KERNELS: dict[str, Kernel] = {
    "aten::mm.out": Kernel(matmul, NUMERIC),
    "aten::bmm.out": Kernel(matmul, NUMERIC),
    "aten::addmm.out": Kernel.prepared(addmm, NUMERIC),
}
