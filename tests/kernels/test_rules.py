"""The shape and dtype rules' building blocks against torch (type promotion), and calls every
rule must refuse at bind."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch

from runtime_py.kernels import KERNELS, rules

TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32,
                torch.int16, torch.int8, torch.uint8, torch.bool]
# Every dtype as a 1-d and a 0-d tensor, and Python scalars of each kind.
OPERANDS = [*(torch.ones(2, dtype=d) for d in TORCH_DTYPES),
            *(torch.ones((), dtype=d) for d in TORCH_DTYPES), True, 2, 2.5]


def _numpy(x: torch.Tensor | bool | float) -> Any:
    return x.numpy() if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize(("a", "b"), [(a, b) for a, b in itertools.product(OPERANDS, repeat=2)
                                      if isinstance(a, torch.Tensor)
                                      or isinstance(b, torch.Tensor)])
def test_result_type_is_torchs(a: Any, b: Any) -> None:
    """Dimensioned tensors, 0-d tensors and Python scalars in every combination of dtypes."""
    want = torch.empty(0, dtype=torch.result_type(a, b)).numpy().dtype
    assert rules.result_type(_numpy(a), _numpy(b)) == want


def test_result_type_of_three_tiers() -> None:
    """int8 [n] with an int64 0-d tensor stays int8; a float scalar lifts it to float32."""
    x, zero_d = np.ones(2, np.int8), np.ones((), np.int64)
    assert rules.result_type(x, zero_d) == np.int8
    assert rules.result_type(x, zero_d, 2.5) == np.float32
    assert rules.result_type(np.ones(2, np.bool_), zero_d, 2) == np.int64


F32, I64 = np.float32, np.int64
# (kernel, args without out, an out torch would not give): the examples of the issue and more.
REFUSED: dict[str, tuple[str, dict[str, Any], np.ndarray]] = {
    "broadcast into a larger out": ("aten::relu.out", {"self": np.zeros((1, 10), F32)},
                                    np.zeros((4, 10), F32)),
    "binary broadcast into a larger out": ("aten::add.out", {"self": np.zeros((1, 10), F32),
                                                             "other": np.zeros(10, F32)},
                                           np.zeros((4, 10), F32)),
    "a float result into an int out": ("aten::mul.out", {"self": np.zeros(3, I64),
                                                         "other": 2.5}, np.zeros(3, I64)),
    "an int tensor raised to float by an int scalar": ("aten::add.Scalar_out",
                                                       {"self": np.zeros(3, I64), "other": 2},
                                                       np.zeros(3, F32)),
    "true division of ints into ints": ("aten::div.out", {"self": np.zeros(3, I64),
                                                          "other": np.ones(3, I64)},
                                        np.zeros(3, I64)),
    "a comparison into a float out": ("aten::lt.Tensor_out", {"self": np.zeros(3, F32),
                                                              "other": np.zeros(3, F32)},
                                      np.zeros(3, F32)),
    "a float alpha for ints": ("aten::add.out", {"self": np.zeros(3, I64),
                                                 "other": np.zeros(3, I64), "alpha": 0.5},
                               np.zeros(3, I64)),
    "a reduced dim kept": ("aten::sum.IntList_out", {"self": np.zeros((3, 4), F32),
                                                     "dim": (1,), "keepdim": False},
                           np.zeros((3, 1), F32)),
    "a dim out of range": ("aten::amax.out", {"self": np.zeros((3, 4), F32), "dim": (2,)},
                           np.zeros(3, F32)),
    "a dim twice": ("aten::sum.IntList_out", {"self": np.zeros((3, 4), F32), "dim": (1, -1)},
                    np.zeros(3, F32)),
    "argmax into float": ("aten::argmax.out", {"self": np.zeros((3, 4), F32), "dim": 1},
                          np.zeros(3, F32)),
    "an empty max": ("aten::amax.out", {"self": np.zeros((0, 4), F32), "dim": (0,)},
                     np.zeros(4, F32)),
    "cat sizes differing off dim": ("aten::cat.out", {"tensors": [np.zeros((2, 3), F32),
                                                                  np.zeros((2, 4), F32)]},
                                    np.zeros((4, 3), F32)),
    "arange of another length": ("aten::arange.start_out", {"start": 0, "end": 10, "step": 3},
                                 np.zeros(3, I64)),
    "a float index": ("aten::index_select.out", {"self": np.zeros((3, 4), F32), "dim": 0,
                                                 "index": np.zeros(2, F32)},
                      np.zeros((2, 4), F32)),
    "where on a float condition": ("aten::where.self_out", {
        "condition": np.zeros(3, F32), "self": np.zeros(3, F32), "other": np.zeros(3, F32)},
        np.zeros(3, F32)),
    "a nan fill of ints": ("aten::full.out", {"size": (2,), "fill_value": float("nan")},
                           np.zeros(2, I64)),
    "mm of 3-d tensors": ("aten::mm.out", {"self": np.zeros((2, 3, 4), F32),
                                           "mat2": np.zeros((2, 4, 5), F32)},
                          np.zeros((2, 3, 5), F32)),
    "pooling padded over half the kernel": ("nee::max_pool2d.out", {
        "self": np.zeros((1, 1, 4, 4), F32), "kernel_size": (3, 3), "stride": (1, 1),
        "padding": (2, 2)}, np.zeros((1, 1, 6, 6), F32)),
    "index_put values of another dtype": ("aten::index_put.out", {
        "self": np.zeros((3, 4), F32), "indices": [np.zeros(2, I64)],
        "values": np.zeros(4, I64)}, np.zeros((3, 4), F32)),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_at_bind(case: str) -> None:
    name, args, out = REFUSED[case]
    with pytest.raises(ValueError, match=r"\w"):
        KERNELS[name].bind({**args, "out": out})


def test_bind_can_skip_the_check() -> None:
    """A caller that checked the rule itself (a fused kernel) binds without it."""
    name, args, out = REFUSED["binary broadcast into a larger out"]
    KERNELS[name].bind({**args, "out": out}, check=False)
