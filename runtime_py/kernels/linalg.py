"""Matrix-multiply kernels (numpy matmul -> BLAS for float32, written straight into out)."""

from __future__ import annotations

import functools

import numpy as np

from runtime_py.kernels import Bound, Kernel, rules
from runtime_py.kernels._common import NUMERIC

Scalar = int | float


def matmul_shape(a: np.ndarray, b: np.ndarray, ndim: int) -> tuple[int, ...]:
    """The shape of ``a @ b`` for ``ndim``-d operands of equal batch dims (mm: 2, bmm: 3), of
    one dtype; ValueError otherwise."""
    inputs = {"self": rules.tensor(a, "self"), "mat2": rules.tensor(b, "mat2")}
    if (a.ndim != ndim or b.ndim != ndim or a.shape[:-2] != b.shape[:-2]
            or a.shape[-1] != b.shape[-2] or a.dtype != b.dtype):
        rules.refuse(inputs, f"not a product of {ndim}-d tensors of one dtype")
    return (*a.shape[:-1], b.shape[-1])


def check_mm(self: np.ndarray, mat2: np.ndarray, *, out: np.ndarray, **_: object) -> None:
    """mm: (n, k) @ (k, m) gives (n, m), in their dtype."""
    rules.expect(out, matmul_shape(self, mat2, 2), self.dtype, {"self": self, "mat2": mat2})


def check_bmm(self: np.ndarray, mat2: np.ndarray, *, out: np.ndarray, **_: object) -> None:
    """bmm: (b, n, k) @ (b, k, m) gives (b, n, m), in their dtype."""
    rules.expect(out, matmul_shape(self, mat2, 3), self.dtype, {"self": self, "mat2": mat2})


def check_addmm(self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray, *, beta: Scalar = 1,
                alpha: Scalar = 1, out: np.ndarray, **_: object) -> None:
    """addmm: mat1 @ mat2 as mm, self (of their dtype) broadcasting to it."""
    inputs = {"self": rules.tensor(self, "self"), "mat1": mat1, "mat2": mat2}
    shape = matmul_shape(mat1, mat2, 2)
    rules.number(alpha, "alpha")
    rules.number(beta, "beta")
    if self.dtype != mat1.dtype or not rules.broadcasts_to(self.shape, shape):
        rules.refuse(inputs, "self does not broadcast to mat1 @ mat2 in its dtype")
    rules.expect(out, shape, self.dtype, inputs)


def matmul(self: np.ndarray, mat2: np.ndarray, *, out: np.ndarray) -> Bound:
    """mm (2-D) and bmm (3-D, batched)."""
    return functools.partial(np.matmul, self, mat2, out=out)


def addmm(self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray, *, beta: Scalar = 1,
          alpha: Scalar = 1, out: np.ndarray) -> Bound:
    """beta * self + alpha * (mat1 @ mat2); ``self`` broadcasts and is ignored if beta == 0.
    An integer out takes alpha and beta truncated, as torch."""
    alpha, beta = out.dtype.type(alpha), out.dtype.type(beta)

    def run() -> None:
        np.matmul(mat1, mat2, out=out)
        if alpha != 1:
            np.multiply(out, alpha, out=out)
        if beta != 0:
            np.add(out, self if beta == 1 else np.multiply(self, beta), out=out)

    return run


KERNELS: dict[str, Kernel] = {
    "aten::mm.out": Kernel.prepared(matmul, NUMERIC, check=check_mm),
    "aten::bmm.out": Kernel.prepared(matmul, NUMERIC, check=check_bmm),
    "aten::addmm.out": Kernel.prepared(addmm, NUMERIC, check=check_addmm),
}
