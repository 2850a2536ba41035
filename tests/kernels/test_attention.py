"""``nee::scaled_dot_product_attention.out`` vs. torch.nn.functional.scaled_dot_product_attention.

Tolerance is the elementwise default (rtol 1e-5, atol 1e-6): the kernel scales the query
before q @ k^T and normalises after the value matmul, so its float32 rounding differs slightly
from torch's fused CPU kernel, within that.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from kernel_harness import ATOL, RTOL, check_rules, random, run_kernel, to_kernel_arg

from runtime_py.kernels import KERNELS

sdpa = torch.nn.functional.scaled_dot_product_attention
KERNEL = KERNELS["nee::scaled_dot_product_attention.out"]


def _args(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {name: to_kernel_arg(v) for name, v in kwargs.items()}


def _check(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **options: Any) -> None:
    """The kernel, without and with a planned scratch (then allocating nothing output-sized
    when the inputs are contiguous), equals torch on the same inputs; its rule too
    (``check_rules``)."""
    kwargs = {"query": query, "key": key, "value": value, **options}
    want = sdpa(**kwargs).numpy()
    args = _args(kwargs)
    for scratch in (False, True):
        out = np.full(want.shape, 1e30, np.float32)
        run_kernel(KERNEL, args, {"out": out}, scratch)
        np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL, err_msg=f"scratch={scratch}")
    check_rules("nee::scaled_dot_product_attention.out", args, {"out": out}, reference=sdpa,
                kwargs=kwargs, to_args=_args)


def _qkv(lead: tuple[int, ...], length: int, source: int, dim: int = 8, value_dim: int = 6,
         kv_heads: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random query (lead, L, E), key (lead', S, E), value (lead', S, Ev); lead' has
    ``kv_heads`` heads (dim -1 of ``lead``) if given."""
    kv_lead = lead if kv_heads is None else (*lead[:-1], kv_heads)
    return (random((*lead, length, dim)), random((*kv_lead, source, dim)),
            random((*kv_lead, source, value_dim)))


@pytest.mark.parametrize("lead", [(3,), (2, 3), (2, 2, 3)], ids=["3d", "4d", "5d"])
@pytest.mark.parametrize(("length", "source"), [(5, 5), (4, 9), (9, 4), (1, 7)])
def test_unmasked(lead: tuple[int, ...], length: int, source: int) -> None:
    _check(*_qkv(lead, length, source))


@pytest.mark.parametrize("scale", [0.3, 2.0, -0.5])
def test_scale(scale: float) -> None:
    _check(*_qkv((2, 3), 6, 7), scale=scale)


# attn_mask shapes broadcasting to (N=2, H=3, L=5, S=7)
MASK_SHAPES = [(2, 3, 5, 7), (5, 7), (1, 1, 1, 7), (2, 1, 5, 7), (3, 1, 7), (1, 5, 1)]


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32], ids=["bool", "float"])
@pytest.mark.parametrize("shape", MASK_SHAPES, ids=str)
def test_mask(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    mask = torch.rand(shape) > 0.3 if dtype == torch.bool else random(shape, scale=2)
    _check(*_qkv((2, 3), 5, 7), attn_mask=mask)


@pytest.mark.parametrize("lead", [(3,), (2, 3)], ids=["3d", "4d"])
@pytest.mark.parametrize(("length", "source"), [(6, 6), (4, 9), (9, 4)])
def test_causal(lead: tuple[int, ...], length: int, source: int) -> None:
    """Top-left aligned: query i sees keys j <= i, also when L != S."""
    _check(*_qkv(lead, length, source), is_causal=True)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32], ids=["bool", "float"])
def test_all_masked_rows_give_zeros(dtype: torch.dtype) -> None:
    """Rows with every key masked (False, or -inf) are 0 in torch's CPU float32 result."""
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[0, :, 1] = False
    mask[1, :, 4] = False
    if dtype == torch.float32:
        mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    query, key, value = _qkv((2, 3), 5, 7)
    assert not sdpa(query, key, value, attn_mask=mask)[0, :, 1].any()
    _check(query, key, value, attn_mask=mask)


def test_no_keys() -> None:
    """S = 0: zeros, as torch."""
    _check(*_qkv((2, 3), 4, 0))


@pytest.mark.parametrize("options", [{}, {"is_causal": True},
                                     {"attn_mask": torch.rand(1, 6, 5, 7) > 0.3}],
                         ids=["plain", "causal", "mask"])
@pytest.mark.parametrize("kv_heads", [2, 1, 3])
def test_grouped_query_attention(kv_heads: int, options: dict[str, Any]) -> None:
    """6 query heads share 2, 1 or 3 key/value heads (head h uses h // (6 // kv_heads))."""
    _check(*_qkv((2, 6), 5, 7, kv_heads=kv_heads), enable_gqa=True, **options)


def test_single_kv_head_broadcasts() -> None:
    """Without enable_gqa a 1-head key/value broadcasts over the query heads."""
    _check(*_qkv((2, 4), 5, 7, kv_heads=1))


def _heads_permuted(shape: tuple[int, ...]) -> torch.Tensor:
    """(N, H, L, E) values laid out as (N, L, H, E), as transformers' attention reshapes them."""
    n, h, length, e = shape
    return random((n, length, h, e)).permute(0, 2, 1, 3)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_non_contiguous_inputs(kv_heads: int) -> None:
    query = _heads_permuted((2, 4, 5, 8))
    key, value = _heads_permuted((2, kv_heads, 7, 8)), _heads_permuted((2, kv_heads, 7, 8))
    assert not query.is_contiguous()
    _check(query, key, value, enable_gqa=True, attn_mask=torch.rand(5, 7) > 0.3)
    _check(query.transpose(-1, -2).contiguous().transpose(-1, -2), key[..., ::2, :],
           value[..., ::2, :], enable_gqa=True, is_causal=True)


@pytest.mark.parametrize("options", [{}, {"is_causal": True},
                                     {"attn_mask": torch.rand(1, 1, 128, 128) > 0.2},
                                     {"attn_mask": torch.randn(2, 8, 128, 128)},
                                     {"enable_gqa": True}],
                         ids=["plain", "causal", "bool", "float", "gqa"])
def test_bound_call_allocates_nothing(options: dict[str, Any]) -> None:
    """At a size where an output- or score-sized temporary exceeds run_kernel's limit."""
    kv_heads = 2 if options.get("enable_gqa") else None
    _check(*_qkv((2, 8), 128, 128, dim=64, value_dim=64, kv_heads=kv_heads), **options)


@pytest.mark.parametrize(("options", "kv_heads"), [({"dropout_p": 0.1}, 3),
                                                   ({"is_causal": True,
                                                     "attn_mask": np.ones((5, 7), bool)}, 3),
                                                   ({}, 2), ({"enable_gqa": True}, 4)],
                         ids=["dropout", "causal+mask", "heads-without-gqa", "heads-not-dividing"])
def test_rejected_at_prepare(options: dict[str, Any], kv_heads: int) -> None:
    query, key, value = (t.numpy() for t in _qkv((1, 6), 5, 7, kv_heads=kv_heads))
    with pytest.raises(ValueError):
        KERNEL.bind({"query": query, "key": key, "value": value, **options,
                     "out": np.empty((1, 6, 5, 6), np.float32)})
