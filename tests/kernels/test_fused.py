"""Fused conv/addmm + activation kernels vs. torch (base op, then the activation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from kernel_harness import planned_scratch, random, to_kernel_arg

from runtime_py.kernels import KERNELS
from toolchain.passes.fuse_activation import FUSED

aten = torch.ops.aten
TOL = {"rtol": 1e-4, "atol": 1e-5}

torch.manual_seed(0)  # the cases below are drawn at import, before the per-test seed fixture
CONV = {"input": random((1, 4, 9, 9)), "weight": random((6, 4, 3, 3)), "bias": random((6,)),
        "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "transposed": False,
        "output_padding": [0, 0], "groups": 1}
ADDMM = {"self": random((10,)), "mat1": random((4, 16)), "mat2": random((10, 16)).t()}
MM = {"self": random((4, 16)), "mat2": random((10, 16)).t()}

# name -> (fused key, base op, base args, activation key, act args, torch activation)
CASES: dict[str, tuple[str, Any, dict[str, Any], str, dict[str, Any], Callable]] = {
    "conv+relu": ("nee::convolution_act.out", aten.convolution.default, CONV, "aten::relu.out",
                  {}, torch.relu),
    "conv+hardtanh": ("nee::convolution_act.out", aten.convolution.default, CONV,
                      "aten::hardtanh.out", {"min_val": 0.0, "max_val": 6.0},
                      lambda x: torch.nn.functional.hardtanh(x, 0.0, 6.0)),
    "conv+hardswish": ("nee::convolution_act.out", aten.convolution.default, CONV,
                       "aten::hardswish.out", {}, torch.nn.functional.hardswish),
    "addmm+relu": ("nee::addmm_act.out", aten.addmm.default, ADDMM, "aten::relu.out", {},
                   torch.relu),
    "addmm+gelu": ("nee::addmm_act.out", aten.addmm.default, ADDMM, "aten::gelu.out", {},
                   torch.nn.functional.gelu),
    "mm+silu": ("nee::mm_act.out", aten.mm.default, MM, "aten::silu.out", {},
                torch.nn.functional.silu),
}


def test_fused_keys_registered() -> None:
    assert set(FUSED.values()) == {k for k in KERNELS if k.startswith("nee::") and "_act." in k}


@pytest.mark.parametrize("scratch", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused(case: str, scratch: bool) -> None:
    key, base_op, base_args, activation, act_args, torch_act = CASES[case]
    want = torch_act(base_op(**base_args)).numpy()
    kernel = KERNELS[key]
    args = {**{k: to_kernel_arg(v) for k, v in base_args.items()}, "activation": activation,
            **{f"act_{k}": v for k, v in act_args.items()}}
    out = np.full(want.shape, np.nan, np.float32)
    kernel.fn(**args, out=out, **(planned_scratch(kernel, args) if scratch else {}))
    np.testing.assert_allclose(out, want, **TOL)
