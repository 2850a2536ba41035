"""Convolutions of tensors stored channels-last (``nee::convolution_cl.out`` and its fused
activation) vs. torch's convolution, its input and output permuted as the flags say."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from kernel_harness import check_rules, peak_bytes, planned_scratch, random

from runtime_py.kernels import KERNELS, numpy_mode

TOL = {"rtol": 1e-4, "atol": 1e-5}
NHWC = (0, 2, 3, 1)

# name -> (input (N, C, H, W), weight, stride, padding, groups)
CASES = {
    "1x1 expand": ((1, 8, 6, 6), (24, 8, 1, 1), 1, 0, 1),
    "1x1 project": ((1, 24, 6, 6), (8, 24, 1, 1), 1, 0, 1),
    "1x1 one position": ((1, 16, 1, 1), (32, 16, 1, 1), 1, 0, 1),
    "depthwise 3x3": ((1, 24, 7, 7), (24, 1, 3, 3), 1, 1, 24),
    "depthwise 3x3 stride 2": ((1, 24, 8, 8), (24, 1, 3, 3), 2, 1, 24),
    "depthwise 5x5": ((1, 16, 9, 9), (16, 1, 5, 5), 1, 2, 16),
    "depthwise 3x3 wide": ((1, 64, 12, 12), (64, 1, 3, 3), 1, 1, 64),
}
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


def _case(name: str, input_cl: bool, out_cl: bool, act: bool) -> tuple[dict[str, Any], np.ndarray]:
    """(the kernel's args, torch's output in out's stored layout)."""
    x_shape, w_shape, stride, padding, groups = CASES[name]
    x, weight, bias = random(x_shape), random(w_shape), random((w_shape[0],))
    want = torch.nn.functional.conv2d(x, weight, bias, stride, padding, 1, groups)
    if act:
        want = torch.nn.functional.hardtanh(want, 0.0, 6.0)
    args = {"input": np.ascontiguousarray(x.numpy().transpose(NHWC)) if input_cl else x.numpy(),
            "weight": weight.numpy(), "bias": bias.numpy(), "stride": (stride, stride),
            "padding": (padding, padding), "dilation": (1, 1), "transposed": False,
            "output_padding": (0, 0), "groups": groups, "input_channels_last": input_cl,
            "out_channels_last": out_cl}
    if act:
        args |= {"activation": "aten::hardtanh.out", "act_min_val": 0.0, "act_max_val": 6.0}
    want = want.numpy()
    return args, np.ascontiguousarray(want.transpose(NHWC)) if out_cl else want


@pytest.mark.parametrize("act", [False, True])
@pytest.mark.parametrize(("input_cl", "out_cl"), LAYOUTS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_channels_last_convolution(name: str, input_cl: bool, out_cl: bool, act: bool) -> None:
    """torch's values in out's stored layout, with and without a planned scratch; the rule
    refuses outs of another shape or dtype."""
    key = "nee::convolution_cl_act.out" if act else "nee::convolution_cl.out"
    args, want = _case(name, input_cl, out_cl, act)
    for scratch in (planned_scratch(KERNELS[key], args), {}):
        out = np.full(want.shape, np.nan, np.float32)
        with numpy_mode():
            KERNELS[key].bind({**args, "out": out, **scratch})()
        np.testing.assert_allclose(out, want, **TOL)
    check_rules(key, args, {"out": out})


def test_depthwise_accumulates_into_a_channels_last_out() -> None:
    """With out stored channels-last the einsum writes out itself: its scratch holds only the
    padded phases, and a run allocates no accumulator."""
    kernel = KERNELS["nee::convolution_cl.out"]
    sizes, peaks = [], []
    for out_cl in (False, True):
        args, want = _case("depthwise 3x3 wide", True, out_cl, act=False)
        scratch = planned_scratch(kernel, args)
        out = np.empty(want.shape, np.float32)
        with numpy_mode():
            call = kernel.bind({**args, "out": out, **scratch})
            call()
            peaks.append(peak_bytes(call))
        sizes.append(scratch["scratch"].nbytes)
    accumulator = 12 * 12 * 64 * 4
    assert sizes[0] - sizes[1] >= accumulator and peaks[1] < accumulator / 4


@pytest.mark.parametrize(("x_shape", "w_shape", "stride", "padding", "groups"), [
    ((2, 8, 6, 6), (8, 1, 3, 3), 1, 1, 8),  # two images
    ((1, 8, 6, 6), (16, 8, 3, 3), 1, 1, 1),  # a 3x3 ungrouped convolution
    ((1, 8, 6, 6), (16, 8, 1, 1), 2, 0, 1),  # a 1x1 one at stride 2
    ((1, 8, 6, 6), (8, 4, 3, 3), 1, 1, 2),  # grouped, not depthwise
])
def test_other_convolutions_are_not_implemented(x_shape: tuple[int, ...],
                                                w_shape: tuple[int, ...], stride: int,
                                                padding: int, groups: int) -> None:
    """Only what the channels_last pass rewrites: one image, 1x1 or depthwise."""
    weight = random(w_shape)
    want = torch.nn.functional.conv2d(random(x_shape), weight, None, stride, padding, 1, groups)
    args = {"input": np.zeros(x_shape, np.float32), "weight": weight.numpy(), "bias": None,
            "stride": (stride, stride), "padding": (padding, padding), "dilation": (1, 1),
            "transposed": False, "output_padding": (0, 0), "groups": groups,
            "input_channels_last": False, "out_channels_last": False}
    with pytest.raises(NotImplementedError):
        KERNELS["nee::convolution_cl.out"].bind({**args, "out": np.zeros(want.shape,
                                                                          np.float32)})
