"""Matrix-multiply kernels (numpy matmul -> BLAS for float32, written straight into out).

OpenBLAS's sgemm multiplies products of at most SMALL_PRODUCT multiply-adds (m * n * k) with a
small-matrix kernel that packs nothing (its x86-64 builds' small-kernel permit: m * n * k <=
100^3); larger thin products pack their big operand first. So a float32 product of 2-12 rows
by a large weight runs over row blocks of the weight held as (N, K) (``row_blocked``), each
block of ROW_BLOCK_BYTES times the rows under that bound: 1.2-2.2x
faster (measured with (768, 3072), (3072, 768), (2048, 8192) and (384, 1536) weights, cold
cache; 16 rows and up, whose blocks exceed it, or one row, a gemv, gain nothing; weights under
2 MiB gain or lose by the shape). A convolution's weight times a few columns of positions
(W @ X) is blocked by its own rule (``nn.conv_row_step``). The export keeps such linear
weights in their (N, K) layout (fold_constants asks ``row_blocked``, a rule of shapes alone,
so an export does not depend on its machine's BLAS); the kernel takes that path whenever mat2
is the transpose of a contiguous (N, K) matrix, it was given the scratch for it and the BLAS
numpy loaded has the small-matrix kernel (``small_kernel``).

OpenBLAS has that kernel on its AVX-512 x86-64 cores only (SMALL_KERNEL_CORES); the numbers
above are SkylakeX's. With its Haswell kernels (an AVX2 machine, or OPENBLAS_CORETYPE=Haswell)
the blocks lose (same machine, 1 thread, cold cache: (9, 768) @ (768, 3072) 1.31 ms blocked vs
1.04 ms as one product, (9, 3072) @ (3072, 768) 1.52 vs 1.15 ms; in models, blocks on / off:
resnet18 1.12x, cnn 1.00-1.02x), so there every product is one matmul. OpenBLAS's aarch64
small kernels (some cores) were not measured: the blocks stay off there too.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime_py.kernels import Bound, Kernel, rules, run_all
from runtime_py.kernels._common import NUMERIC, Workspace, out_shaped, workspace_bytes

Scalar = int | float

SMALL_PRODUCT = 1_000_000  # multiply-adds OpenBLAS's small-matrix sgemm kernel takes
ROW_BLOCKED_ROWS = range(2, 13)
ROW_BLOCKED_MIN_BYTES = 2 << 20  # the weight's, in x @ W.T; smaller ones gain or lose
ROW_BLOCK_BYTES = 256 << 10  # of weight rows per block: 12 x 64 Ki floats < SMALL_PRODUCT
SMALL_KERNEL_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})  # OpenBLAS's
SMALL_KERNEL: bool | None = None  # whether blocks pay here; None: ask the BLAS (small_kernel)


def small_kernel() -> bool:
    """Whether the BLAS numpy loaded multiplies small float32 products with OpenBLAS's
    small-matrix kernel (SMALL_KERNEL unless None; asked once per process)."""
    return _blas_small_kernel() if SMALL_KERNEL is None else SMALL_KERNEL


@functools.cache
def _blas_small_kernel() -> bool:
    from threadpoolctl import threadpool_info

    return has_small_kernel(threadpool_info())


def has_small_kernel(libraries: list[dict[str, object]]) -> bool:
    """Whether threadpoolctl's ``libraries`` hold an OpenBLAS on a SMALL_KERNEL_CORES core."""
    return any(lib.get("internal_api") == "openblas"
               and str(lib.get("architecture", "")).lower() in SMALL_KERNEL_CORES
               for lib in libraries)


def row_blocked(rows: int, k: int, n: int, dtype: np.dtype | str) -> bool:
    """Whether a (rows, k) @ (k, n) product of ``dtype`` runs over row blocks of its (n, k)
    weight (see the module docstring)."""
    return (np.dtype(dtype) == np.float32 and rows in ROW_BLOCKED_ROWS
            and k * n * 4 >= ROW_BLOCKED_MIN_BYTES)


def product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Bound:
    """The call writing a @ b into ``out``. Operands that are one matrix each (leading dims of
    size 1), of BLAS's float types, contiguous or transposed, with a C-contiguous out, go to
    ``np.dot``, whose call costs 0.3-0.4 us less than ``np.matmul``'s (a gufunc) for the same
    BLAS product; the rest to ``np.matmul``. Both take ``out`` positionally: a partial with
    keywords costs numpy another 0.16 us a call."""
    matrices = [_matrix(x) for x in (a, b, out)]
    if (a.dtype == b.dtype == out.dtype and a.dtype in _BLAS_TYPES
            and all(m is not None for m in matrices) and matrices[2].flags.c_contiguous
            and all(m.flags.c_contiguous or m.flags.f_contiguous for m in matrices[:2])):
        return functools.partial(np.dot, *matrices)
    return functools.partial(np.matmul, a, b, out)


_BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _matrix(x: np.ndarray) -> np.ndarray | None:
    """``x`` as a 2-D view if it is one matrix (its leading dims all 1), else None."""
    if x.ndim < 2 or math.prod(x.shape[:-2]) != 1:
        return None
    return x.reshape(x.shape[-2:])


def blocked_products(w: np.ndarray, b: np.ndarray, out: np.ndarray,
                     step: int | None = None) -> list[Bound]:
    """The calls computing out = w @ b ``step`` of ``w``'s rows at a time (default: as many
    as ROW_BLOCK_BYTES hold)."""
    step = step or max(1, ROW_BLOCK_BYTES // (w.shape[1] * w.itemsize))
    return [product(w[r:r + step], b, out[r:r + step]) for r in range(0, w.shape[0], step)]


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray,
             scratch: np.ndarray | None) -> Bound:
    """The call writing a @ b into out: over row blocks of b.T (transposed copies of ``a`` and
    of the result in scratch) where ``row_blocked``, b is stored as (n, k), the scratch holds
    the copies and the BLAS has the ``small_kernel``; else one matmul."""
    need = _product_scratch(a, b)
    if not need or scratch is None or scratch.nbytes < need or not small_kernel():
        return product(a, b, out)
    ws = Workspace(scratch)
    a_t, out_t = ws.take(a.shape[::-1], a.dtype), ws.take(out.shape[::-1], out.dtype)
    products = blocked_products(b.T, a_t, out_t)

    def run() -> None:
        np.copyto(a_t, a.T)
        for product in products:
            product()
        np.copyto(out, out_t.T)

    return run


def _product_scratch(a: np.ndarray, b: np.ndarray) -> int:
    """Scratch bytes of ``_product``: the transposed left operand and result, if blocked (at
    export, a weight's layout is known: add_scratch passes constants as their values)."""
    m, k = a.shape
    if not (row_blocked(m, k, b.shape[1], a.dtype) and b.T.flags.c_contiguous):
        return 0
    return workspace_bytes(((k, m), a.dtype), ((b.shape[1], m), a.dtype))


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
    """bmm (3-D, batched)."""
    return product(self, mat2, out)


def mm(self: np.ndarray, mat2: np.ndarray, *, out: np.ndarray,
       scratch: np.ndarray | None = None) -> Bound:
    """self @ mat2 (2-D; see ``_product``)."""
    return _product(self, mat2, out, scratch)


def _mm_scratch(self: np.ndarray, mat2: np.ndarray, **_: object) -> int:
    return _product_scratch(self, mat2)


def addmm(self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray, *, beta: Scalar = 1,
          alpha: Scalar = 1, out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """beta * self + alpha * (mat1 @ mat2); ``self`` broadcasts and is ignored if beta == 0.
    An integer out takes alpha and beta truncated, as torch."""
    alpha, beta = out.dtype.type(alpha), out.dtype.type(beta)
    calls = [_product(mat1, mat2, out, scratch)]
    if alpha != 1:
        calls.append(functools.partial(np.multiply, out, alpha, out))
    if beta == 1:  # self in out's shape where it only lacks leading 1s: numpy's fast path
        calls.append(functools.partial(np.add, out, out_shaped(self, out), out))
    elif beta != 0:  # rare: a self-sized temporary for the scaled operand
        calls.append(lambda: np.add(out, np.multiply(self, beta), out))
    return calls[0] if len(calls) == 1 else run_all(*calls)


def _addmm_scratch(mat1: np.ndarray, mat2: np.ndarray, **_: object) -> int:
    return _product_scratch(mat1, mat2)


KERNELS: dict[str, Kernel] = {
    "aten::mm.out": Kernel.prepared(mm, NUMERIC, scratch=_mm_scratch, check=check_mm),
    "aten::bmm.out": Kernel.prepared(matmul, NUMERIC, check=check_bmm),
    "aten::addmm.out": Kernel.prepared(addmm, NUMERIC, scratch=_addmm_scratch,
                                       check=check_addmm),
}
