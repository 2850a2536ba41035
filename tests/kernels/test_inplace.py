"""Every ``Kernel.inplace`` kernel, with ``out`` aliasing each same-shaped input, vs. torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from kernel_harness import kernel_args, out_variant, planned_scratch, random

from runtime_py.kernels import KERNELS
from toolchain.export.out_variant import canonical_name

aten = torch.ops.aten
F, INT, B = torch.float32, torch.int64, torch.bool


def _x(dtype: torch.dtype = F) -> torch.Tensor:
    return random((3, 5), dtype, scale=4)


def _pos() -> torch.Tensor:
    return _x().abs() + 0.5


torch.manual_seed(0)  # the samples below are drawn at import, before the per-test seed fixture
# (functional op, kwargs): one call per in-place kernel (each resolves to its out variant).
SAMPLES: list[tuple[torch._ops.OpOverload, dict[str, Any]]] = [
    *[(getattr(aten, op).Tensor, {"self": _x(dt), "other": _x(dt)})
      for op in ("add", "sub", "mul") for dt in (F, INT)],
    *[(getattr(aten, op).Scalar, {"self": _x(), "other": 2}) for op in ("add", "sub", "mul")],
    (aten.div.Tensor, {"self": _x(), "other": _pos()}),
    (aten.div.Scalar, {"self": _x(), "other": 3}),
    (aten.div.Tensor_mode, {"self": _x(INT), "other": _pos().long() + 1, "rounding_mode": "trunc"}),
    (aten.div.Scalar_mode, {"self": _x(), "other": 3, "rounding_mode": "floor"}),
    (aten.maximum.default, {"self": _x(), "other": _x()}),
    (aten.minimum.default, {"self": _x(INT), "other": _x(INT)}),
    (aten.pow.Tensor_Tensor, {"self": _pos(), "exponent": _x() / 4}),
    (aten.pow.Scalar, {"self": 2.0, "exponent": _x()}),
    *[(getattr(aten, op).Tensor, {"self": _x(B), "other": _x(B)})
      for op in ("eq", "ne", "lt", "le", "gt", "ge")],
    *[(getattr(aten, op).Scalar, {"self": _x(B), "other": 0})
      for op in ("eq", "ne", "lt", "le", "gt", "ge")],
    *[(getattr(aten, f"logical_{op}").default, {"self": _x(B), "other": _x(B)})
      for op in ("and", "or", "xor")],
    (aten.logical_not.default, {"self": _x(B)}),
    *[(getattr(aten, f"bitwise_{op}").Tensor, {"self": _x(dt), "other": _x(dt)})
      for op in ("and", "or", "xor") for dt in (INT, B)],
    *[(getattr(aten, f"bitwise_{op}").Scalar, {"self": _x(INT), "other": 6})
      for op in ("and", "or", "xor")],
    *[(getattr(aten, f"bitwise_{op}").Scalar_Tensor, {"self": True, "other": _x(B)})
      for op in ("and", "or", "xor")],
    (aten.bitwise_not.default, {"self": _x(INT)}),
    (aten.isnan.default, {"self": _x(B)}),
    (aten.isinf.default, {"self": _x(B)}),
    *[(getattr(aten, op).Tensor, {"self": _x(), "other": _pos()}) for op in ("fmod", "remainder")],
    *[(getattr(aten, op).Tensor, {"self": _x(INT), "other": _pos().long() + 1})
      for op in ("fmod", "remainder")],
    *[(getattr(aten, op).Scalar, {"self": _x(), "other": -1.5}) for op in ("fmod", "remainder")],
    (aten.remainder.Scalar_Tensor, {"self": 7, "other": _pos().long() + 1}),
    *[(getattr(aten, op).default, {"self": _x()})
      for op in ("sin", "cos", "expm1", "floor", "ceil", "trunc", "round", "sign")],
    (aten.round.decimals, {"self": _x(), "decimals": 1}),
    (aten.elu.default, {"self": _x(), "alpha": 1.5, "scale": 2.0, "input_scale": 0.5}),
    *[(getattr(aten, op).default, {"self": _pos()})
      for op in ("exp", "log", "sqrt", "tanh", "reciprocal", "rsqrt", "erf", "sigmoid", "silu",
                 "hardsigmoid", "hardswish", "neg", "abs", "relu", "log1p", "log2")],
    (aten.gelu.default, {"self": _x()}),
    (aten.gelu.default, {"self": _x(), "approximate": "tanh"}),
    (aten.leaky_relu.default, {"self": _x(), "negative_slope": 0.2}),
    (aten.hardtanh.default, {"self": _x(), "min_val": 0.0, "max_val": 6.0}),
    (aten.clamp.default, {"self": _x(), "min": -1.0, "max": 2.0}),
    (aten.clamp.Tensor, {"self": _x(), "min": _x() - 1, "max": _x() + 1}),
    (aten.where.self, {"condition": _x(B), "self": _x(), "other": _x()}),
    (aten.where.self, {"condition": _x(B), "self": _x(B), "other": _x(B)}),
    (aten._softmax.default, {"self": _x(), "dim": 1, "half_to_float": False}),
    (aten._log_softmax.default, {"self": _x(), "dim": 0, "half_to_float": False}),
    (aten.clone.default, {"self": _x()}),
    (aten._to_copy.default, {"self": _x(), "dtype": F}),
    (aten.copy.default, {"self": _x(), "src": _x()}),
    (aten.slice_scatter.default, {"self": _x(), "src": random((3, 2)), "dim": 1, "start": 1,
                                  "step": 2}),
    (aten.select_scatter.default, {"self": _x(), "src": random((3,)), "dim": 1, "index": -1}),
    (aten.index_put.default, {"self": _x(), "indices": [None, torch.tensor([0, -2])],
                              "values": random((3, 2))}),
    (aten.index_put.default, {"self": _x(), "indices": [torch.tensor([1, 1])],
                              "values": random((5,)), "accumulate": True}),
    (aten.tril.default, {"self": _x(), "diagonal": 1}),
    (aten.triu.default, {"self": _x(), "diagonal": -1}),
]


def _int8(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)


_REQUANT = {"output_zero_point": 3, "output_multiplier": 1 << 30, "output_shift": -1,
            "activation_min": -128, "activation_max": 127}
# NEE's int8 kernels (no torch op: each aliased call is checked against the same call into a
# fresh out, whose values tests/kernels/test_int8.py checks against TFLite).
INT8_SAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("nee::add_int8.out", {"self": _int8((3, 5), 0), "other": _int8((3, 5), 1),
                           "self_zero_point": -4, "other_zero_point": 7, "left_shift": 20,
                           "self_multiplier": 1 << 30, "self_shift": 0,
                           "other_multiplier": 1 << 30, "other_shift": -1, **_REQUANT}),
    ("nee::add_int8.out", {"self": _int8((3, 5), 2), "other": _int8((5,), 3),
                           "self_zero_point": 0, "other_zero_point": 0, "left_shift": 20,
                           "self_multiplier": 1 << 30, "self_shift": 0,
                           "other_multiplier": 1 << 30, "other_shift": 0, **_REQUANT}),
    ("nee::sub_int8.out", {"self": _int8((3, 5), 8), "other": _int8((3, 5), 9),
                           "self_zero_point": 1, "other_zero_point": -3, "left_shift": 20,
                           "self_multiplier": 1 << 30, "self_shift": 0,
                           "other_multiplier": -(1 << 30), "other_shift": -1, **_REQUANT}),
    ("nee::mul_int8.out", {"self": _int8((3, 5), 4), "other": _int8((3, 5), 5),
                           "self_zero_point": 2, "other_zero_point": -1, **_REQUANT}),
    ("nee::lookup_int8.out", {"self": _int8((3, 5), 6), "table": _int8((256,), 7)}),
]


def test_every_inplace_kernel_has_a_sample() -> None:
    inplace = {name for name, kernel in KERNELS.items() if kernel.inplace}
    assert inplace == ({canonical_name(out_variant(op)) for op, _ in SAMPLES}
                       | {name for name, _ in INT8_SAMPLES})


@pytest.mark.parametrize("scratch", [False, True])
@pytest.mark.parametrize(("name", "kwargs"), INT8_SAMPLES, ids=lambda v: v if isinstance(
    v, str) else "")
def test_int8_out_aliases_input(name: str, kwargs: dict[str, Any], scratch: bool) -> None:
    """For each int8 input of out's shape: out is that very array, same result."""
    kernel = KERNELS[name]
    extra = planned_scratch(kernel, kwargs) if scratch else {}
    want = np.empty(np.broadcast_shapes(*(v.shape for k, v in kwargs.items()
                                         if k in ("self", "other"))), np.int8)
    kernel.fn(**kwargs, out=want, **extra)
    donors = [k for k in ("self", "other") if k in kwargs and kwargs[k].shape == want.shape]
    assert donors
    for donor in donors:
        args = {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        kernel.fn(**args, out=args[donor], **extra)
        np.testing.assert_array_equal(args[donor], want, err_msg=donor)


@pytest.mark.parametrize("scratch", [False, True])
@pytest.mark.parametrize(("op", "kwargs"), SAMPLES, ids=lambda v: str(v) if
                         isinstance(v, torch._ops.OpOverload) else "")
def test_out_aliases_input(op: torch._ops.OpOverload, kwargs: dict[str, Any],
                           scratch: bool) -> None:
    """For each tensor input of out's shape and dtype: out is that very array."""
    out_op = out_variant(op)
    kernel = KERNELS[canonical_name(out_op)]
    want = op(**kwargs).numpy()
    donors = [k for k, v in kwargs.items()
              if isinstance(v, torch.Tensor) and v.shape == want.shape and v.numpy().dtype ==
              want.dtype]
    assert donors
    for donor in donors:
        args = {k: np.array(v) if isinstance(v, np.ndarray) else v  # fresh: out overwrites
                for k, v in kernel_args(out_op, kwargs).items()}
        extra = planned_scratch(kernel, args) if scratch else {}
        kernel.fn(**args, out=args[donor], **extra)
        np.testing.assert_allclose(args[donor], want, rtol=1e-5, atol=1e-6, err_msg=donor)
