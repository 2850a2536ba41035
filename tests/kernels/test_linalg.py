"""Matmul kernels vs. torch.

Tolerance rtol 1e-4 / atol 1e-5: BLAS and torch sum the K products in different orders, so
float32 results differ by a few ulp of the partial sums, which exceeds 1e-5 relative on
outputs that are small through cancellation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_harness import LAYOUTS, check_op, random, with_layout

from runtime_py.kernels import linalg, nn

aten = torch.ops.aten
TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.mark.parametrize("layout_b", LAYOUTS)
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize(("m", "k", "n"), [(1, 16, 32), (4, 33, 10), (7, 1, 5)])
def test_mm(m: int, k: int, n: int, layout_a: str, layout_b: str) -> None:
    a, b = with_layout(random((m, k)), layout_a), with_layout(random((k, n)), layout_b)
    check_op(aten.mm.default, self=a, mat2=b, **TOL)


def test_mm_int64() -> None:
    check_op(aten.mm.default, self=random((3, 4), torch.int64), mat2=random((4, 5), torch.int64))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("b", "m", "k", "n"), [(4, 32, 32, 32), (3, 5, 7, 2), (1, 1, 8, 1)])
def test_bmm(b: int, m: int, k: int, n: int, layout: str) -> None:
    x, y = with_layout(random((b, m, k)), layout), with_layout(random((b, k, n)), layout)
    check_op(aten.bmm.default, self=x, mat2=y, **TOL)


@pytest.mark.parametrize(("beta", "alpha"), [(1, 1), (0.5, 2), (0, 1), (1, -1)])
@pytest.mark.parametrize("bias_shape", [(10,), (4, 10), (1, 10)])
def test_addmm(bias_shape: tuple[int, ...], beta: float, alpha: float) -> None:
    """As nn.Linear exports it: addmm(bias, x, weight.t()) with a transposed weight view."""
    weight = random((10, 16))
    check_op(aten.addmm.default, self=random(bias_shape), mat1=random((4, 16)), mat2=weight.t(),
             beta=beta, alpha=alpha, **TOL)


def test_addmm_beta_zero_ignores_nan_bias() -> None:
    check_op(aten.addmm.default, self=torch.full((3,), float("nan")), mat1=random((2, 4)),
             mat2=random((4, 3)), beta=0, **TOL)


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Row blocking for any weight size, 3 rows of 16 floats per block; the list collects the
    row count of every blocked weight (so a test sees the blocked path run), as with a BLAS
    that has the small-matrix kernel."""
    monkeypatch.setattr(linalg, "SMALL_KERNEL", True)
    monkeypatch.setattr(linalg, "ROW_BLOCKED_MIN_BYTES", 0)
    monkeypatch.setattr(nn, "ROW_BLOCK_MACS", 3 * 16 * 4)
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)
    monkeypatch.setattr(linalg, "ROW_BLOCK_BYTES", 3 * 16 * 4)
    seen: list[int] = []

    def counted(w: np.ndarray, b: np.ndarray, out: np.ndarray, step: int | None = None) -> list:
        seen.append(w.shape[0])
        return linalg_blocked(w, b, out, step)

    linalg_blocked = linalg.blocked_products
    monkeypatch.setattr(linalg, "blocked_products", counted)
    return seen


@pytest.mark.parametrize("rows", [2, 5, 12])
@pytest.mark.parametrize("op", ["mm", "addmm"])
def test_row_blocked_products(blocks: list[int], op: str, rows: int) -> None:
    """2-12 rows by a weight stored (N, K): row blocks of the weight, the last one partial."""
    weight, x = random((10, 16)), random((rows, 16))
    if op == "mm":
        check_op(aten.mm.default, self=x, mat2=weight.t(), **TOL)
    else:
        check_op(aten.addmm.default, self=random((10,)), mat1=x, mat2=weight.t(), beta=0.5,
                 alpha=2, **TOL)
    assert blocks and set(blocks) == {10}


@pytest.mark.parametrize(("rows", "layout"), [(1, "transposed"), (13, "transposed"),
                                              (5, "contiguous")])
def test_other_products_are_one_matmul(blocks: list[int], rows: int, layout: str) -> None:
    """One row, 13 and more rows, or a (K, N) right operand: no row blocks."""
    weight = random((10, 16))
    mat2 = weight.t() if layout == "transposed" else weight.t().contiguous()
    check_op(aten.mm.default, self=random((rows, 16)), mat2=mat2, **TOL)
    assert not blocks


@pytest.mark.parametrize(("kernel", "stride", "size"), [(1, 1, 3), (2, 2, 6), (1, 1, 8),
                                                       (1, 1, 9)])
def test_row_blocked_convolution(blocks: list[int], kernel: int, stride: int,
                                 size: int) -> None:
    """A 1x1 or non-overlapping 2x2 convolution over 9-64 positions: row blocks of the
    (C_out, C_in * KH * KW) weight; 81 positions: one matmul."""
    check_op(aten.convolution.default, input=random((1, 16, size, size)),
             weight=random((10, 16, kernel, kernel)), bias=random((10,)), stride=[stride] * 2,
             padding=[0, 0], dilation=[1, 1], transposed=False, output_padding=[0, 0], groups=1,
             **TOL)
    assert blocks == ([] if size == 9 else [10] * len(blocks)) and (size == 9 or blocks)


@pytest.mark.parametrize("op", ["mm", "convolution"])
def test_no_blocks_without_the_small_kernel(blocks: list[int], monkeypatch: pytest.MonkeyPatch,
                                            op: str) -> None:
    """A BLAS without the small-matrix kernel gets every product whole: no row blocks, no
    column blocks."""
    monkeypatch.setattr(linalg, "SMALL_KERNEL", False)
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 8 * 36 * 128)
    monkeypatch.setattr(nn, "MIN_BLOCK_DEPTH", 36)
    widths = set()  # of every product's output
    monkeypatch.setattr(linalg, "product", lambda a, b, out, _product=linalg.product: (
        widths.add(out.shape[-1]), _product(a, b, out))[1])
    if op == "mm":
        check_op(aten.mm.default, self=random((5, 16)), mat2=random((10, 16)).t(), **TOL)
    else:
        check_op(aten.convolution.default, input=random((1, 4, 20, 20)),
                 weight=random((8, 4, 3, 3)), bias=random((8,)), stride=[1, 1], padding=[1, 1],
                 dilation=[1, 1], transposed=False, output_padding=[0, 0], groups=1, **TOL)
    assert not blocks and widths == {10 if op == "mm" else 400}


@pytest.mark.parametrize(("libraries", "small"), [
    ([{"internal_api": "openblas", "architecture": "SkylakeX"}], True),
    ([{"internal_api": "openblas", "architecture": "SapphireRapids"}], True),
    ([{"internal_api": "openblas", "architecture": "Haswell"}], False),
    ([{"internal_api": "openblas", "architecture": "neoversen1"}], False),
    ([{"internal_api": "mkl"}], False), ([], False)])
def test_which_blas_has_the_small_kernel(libraries: list[dict], small: bool) -> None:
    """OpenBLAS on its AVX-512 cores only, by threadpoolctl's report of the loaded BLAS."""
    assert linalg.has_small_kernel(libraries) is small


def test_row_blocked_sizes() -> None:
    """Float32, 2-12 rows, weights of 2 MiB and up."""
    assert linalg.row_blocked(9, 768, 3072, np.float32)
    assert linalg.row_blocked(2, 768, 768, "float32")
    assert not linalg.row_blocked(1, 768, 3072, np.float32)
    assert not linalg.row_blocked(13, 768, 3072, np.float32)
    assert not linalg.row_blocked(9, 256, 1024, np.float32)
    assert not linalg.row_blocked(9, 768, 3072, np.float64)


@pytest.mark.parametrize(("o", "k", "positions", "step"), [
    (1280, 320, 9, 204), (96, 576, 36, 28), (960, 160, 64, 57), (960, 160, 1, 0),
    (960, 160, 65, 0), (576, 96, 9, 0), (160, 576, 9, 0)])
def test_conv_row_steps(o: int, k: int, positions: int, step: int) -> None:
    """A convolution's (o, k) weight times 2-64 positions, above linalg.SMALL_PRODUCT
    multiply-adds in all: row blocks of at most nn.ROW_BLOCK_MACS."""
    assert nn.conv_row_step(o, k, positions, np.dtype(np.float32)) == step
    assert nn.conv_row_step(o, k, positions, np.dtype(np.float64)) == 0
    assert step * k * positions <= nn.ROW_BLOCK_MACS < linalg.SMALL_PRODUCT


def test_column_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small weight times many im2col columns: blocks of linalg.SMALL_PRODUCT or less, whole
    multiples of BLOCK_COLUMNS (the last block partial); none where a block would be narrower,
    the product is small already or shallower than MIN_BLOCK_DEPTH."""
    assert nn.column_block(16, 144, 1024, np.dtype(np.float32)) == 384
    assert nn.column_block(16, 27, 1024, np.dtype(np.float32)) == 0  # 442k: small already
    assert nn.column_block(64, 27, 1024, np.dtype(np.float32)) == 0  # shallow
    assert nn.column_block(64, 576, 1024, np.dtype(np.float32)) == 0  # blocks of 27 columns
    assert nn.column_block(16, 144, 1024, np.dtype(np.float64)) == 0
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 8 * 36 * 128)
    monkeypatch.setattr(nn, "MIN_BLOCK_DEPTH", 36)
    assert nn.column_block(8, 36, 400, np.dtype(np.float32)) == 128
    check_op(aten.convolution.default, input=random((1, 4, 20, 20)), weight=random((8, 4, 3, 3)),
             bias=random((8,)), stride=[1, 1], padding=[1, 1], dilation=[1, 1],
             transposed=False, output_padding=[0, 0], groups=1, **TOL)


@pytest.mark.parametrize(("a_shape", "b_shape", "layout", "dot"), [
    ((1, 16), (16, 8), "contiguous", True),
    ((4, 16), (16, 8), "transposed", True),
    ((1, 4, 16), (1, 16, 8), "contiguous", True),
    ((4, 16), (16, 8), "strided", False),
    ((2, 4, 16), (2, 16, 8), "contiguous", False)])
def test_one_matrix_each_multiplies_with_dot(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                                             layout: str, dot: bool) -> None:
    """One float matrix each (leading dims 1), contiguous or transposed: np.dot, whose call
    costs less; batched or strided operands: np.matmul. The same values either way."""
    a, b = (with_layout(random(s), layout).numpy() for s in (a_shape, b_shape))
    out = np.empty(np.matmul(a, b).shape, np.float32)
    call = linalg.product(a, b, out)
    call()
    assert (call.func is np.dot) == dot
    np.testing.assert_array_equal(out, np.matmul(a, b))
