"""Fused conv/addmm + activation kernels vs. torch (base op, then the activation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from kernel_harness import check_rules, planned_scratch, random, to_kernel_arg

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
    key, base_op, base_args, _, _, torch_act = CASES[case]
    want = torch_act(base_op(**base_args)).numpy()
    kernel = KERNELS[key]
    args = _args(case, base_args)
    out = np.full(want.shape, np.nan, np.float32)
    kernel.bind({**args, "out": out, **(planned_scratch(kernel, args) if scratch else {})})()
    np.testing.assert_allclose(out, want, **TOL)
    check_rules(key, args, {"out": out}, reference=lambda **kw: torch_act(base_op(**kw)),
                kwargs=base_args, to_args=lambda kw: _args(case, kw), **TOL)


def _args(case: str, base_args: dict[str, Any]) -> dict[str, Any]:
    """The fused kernel's args: the base op's, the activation and its ``act_`` args."""
    _, _, _, activation, act_args, _ = CASES[case]
    return {**{k: to_kernel_arg(v) for k, v in base_args.items()}, "activation": activation,
            **{f"act_{k}": v for k, v in act_args.items()}}


@pytest.mark.parametrize(("change", "error"), [
    ({"activation": "aten::nonexistent.out"}, ValueError),
    ({"activation": "aten::cat.out"}, ValueError),  # not an in-place kernel
    ({"activation": "aten::add.out"}, TypeError),  # its ``other`` is missing
    ({"act_max_val": 6.0}, TypeError),  # relu takes no max_val
    ({"activation": "aten::hardtanh.out", "act_mini": 0.0}, TypeError),
    ({"activation": "aten::silu.out", "act_beta": 1.0}, TypeError),  # a prepared activation
    ({"activation": "aten::gelu.out", "act_approximate": "sigmoid"}, ValueError),
])
def test_fused_activation_arguments_refused_at_bind(change: dict[str, Any],
                                                    error: type[Exception]) -> None:
    """An unknown or non-in-place activation, or arguments its kernel does not take, are
    refused when the call is bound, not when it runs."""
    args = {**_args("conv+relu", CONV), **change}
    out = np.empty(CONV_OUT, np.float32)
    with pytest.raises(error):
        KERNELS["nee::convolution_act.out"].bind({**args, "out": out})


CONV_OUT = tuple(aten.convolution.default(**CONV).shape)
