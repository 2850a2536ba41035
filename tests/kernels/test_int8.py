"""Int8 kernels against TFLite's reference kernels: each case is a one-op .tflite run in LiteRT
(BUILTIN_REF), compared byte for byte with NEE's kernel on the NCHW equivalent, its arguments
computed by ``toolchain.quantize.fixed_point`` from the same float32 scales."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tflite
import torch
import torch.ao.quantization.fx._decomposed  # registers the quantized_decomposed ops
from int8_oracle import (
    ACTIVATIONS,
    assert_exact,
    builtin,
    nchw,
    nhwc,
    nhwc_shape,
    one_op_model,
    random_int8,
    random_quant,
    random_window,
    run_kernel,
    run_tflite,
    spatial_padding,
)

from runtime_py.kernels import KERNELS
from runtime_py.kernels.quantized import _rescale
from toolchain.quantize import fixed_point
from toolchain.quantize.fixed_point import Quant, f32, quantize_multiplier
from toolchain.serialize import tflite as tfl

CASES = 16  # random cases per op

# -- fixed-point arithmetic -----------------------------------------------------------------


@pytest.mark.parametrize(("real", "expected"), [
    (0.0, (0, 0)), (0.5, (1 << 30, 0)), (1.0, (1 << 30, 1)), (0.75, (1610612736, 0)),
    (0.1, (1717986918, -3)), (3.0, (1610612736, 2)),
    (1 - 2**-40, (1 << 30, 1)),  # rounds up to 2**31: halved, shift + 1
    (2.0**-32, (1 << 30, -31)), (2.0**-33, (0, 0)),  # shift < -31 flushes to zero
])
def test_quantize_multiplier(real: float, expected: tuple[int, int]) -> None:
    assert quantize_multiplier(real) == expected


def test_quantize_multiplier_single_rounding_caps_the_shift() -> None:
    assert quantize_multiplier(2.0**31) == (1 << 30, 32)
    assert quantize_multiplier(2.0**31, "single") == ((1 << 31) - 1, 30)


def _gemmlowp(x: int, multiplier: int, shift: int) -> int:
    """TFLite's double-rounding MultiplyByQuantizedMultiplier, transcribed on Python ints."""
    x *= 1 << max(shift, 0)
    product = x * multiplier
    nudge = (1 << 30) if product >= 0 else 1 - (1 << 30)
    high = abs(product + nudge) // (1 << 31) * (1 if product + nudge >= 0 else -1)  # C's /
    exponent = max(-shift, 0)
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> exponent) + (1 if high & mask > threshold else 0)


def _single(x: int, multiplier: int, shift: int) -> int:
    """TFLITE_SINGLE_ROUNDING's MultiplyByQuantizedMultiplier: one rounding shift of the
    64-bit product."""
    total = 31 - shift
    return (x * multiplier + (1 << (total - 1))) >> total


@pytest.mark.parametrize(("rounding", "reference"), [("double", _gemmlowp), ("single", _single)])
def test_rescale_matches_its_definition(rounding: str, reference) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(-2**31, 2**31, 4000), rng.integers(-3000, 3000, 4000),
                        [0, 1, -1, 2**31 - 1, -2**31]])
    for real in (*np.exp(rng.uniform(np.log(2.0**-30), np.log(1.0), 60)), 0.5, 2**-8, 0.75):
        multiplier, shift = quantize_multiplier(float(real), rounding)
        values = x[np.abs(x * real) < 2**30]  # results within int32, as TFLite requires
        acc = values.astype(np.int64)
        _rescale(acc, multiplier, shift, rounding, np.empty_like(acc))()
        expected = [reference(int(v), multiplier, shift) for v in values]
        assert acc.tolist() == expected, (rounding, real)


def test_rescale_per_channel_with_left_shifts() -> None:
    rng = np.random.default_rng(1)
    reals = [0.3, 1.7, 0.001, 5.0]
    pairs = [quantize_multiplier(r) for r in reals]
    acc = rng.integers(-20000, 20000, (3, 4)).astype(np.int64)
    expected = [[_gemmlowp(int(v), *pairs[c]) for c, v in enumerate(row)] for row in acc]
    _rescale(acc, np.array([m for m, _ in pairs]), np.array([s for _, s in pairs]), "double",
             np.empty_like(acc))()
    assert acc.tolist() == expected


@pytest.mark.parametrize(("activation", "expected"), [
    ("NONE", (-128, 127)), ("RELU", (-5, 127)), ("RELU6", (-5, 55)), ("RELU_N1_TO_1", (-15, 5)),
])
def test_quantized_activation_range(activation: str, expected: tuple[int, int]) -> None:
    assert fixed_point.quantized_activation_range(activation, 0.1, -5) == expected


# -- the .tflite writer --------------------------------------------------------------------


def test_tflite_writer_layout() -> None:
    """Schema version 3 under the TFL3 identifier, buffer 0 the empty sentinel and one buffer
    per constant, operator codes deduplicated, a code above 127 behind the deprecated
    placeholder; LiteRT runs the model."""
    writer = tfl.TfliteWriter()
    x, y, z, g = (writer.tensor(name, (1, 4), "float32") for name in "xyzg")
    c = writer.tensor("c", (1, 4), "float32", data=np.full((1, 4), 2.0))
    writer.op(builtin("ADD"), [x, c], [y], tfl.add_options())
    writer.op(builtin("ADD"), [y, c], [z], tfl.add_options("RELU"))
    writer.op(builtin("GELU"), [z], [g])
    data = writer.finish([x], [g])
    model = tflite.Model.GetRootAs(data)
    assert data[4:8] == b"TFL3" and model.Version() == 3
    assert model.BuffersLength() == 2 and model.Buffers(0).DataLength() == 0
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    assert [(op.BuiltinCode(), op.DeprecatedBuiltinCode()) for op in codes] == [
        (builtin("ADD"), builtin("ADD")), (builtin("GELU"), 127)]
    x_value = np.array([[-9.0, -4.0, -1.0, 3.0]], np.float32)
    expected = torch.nn.functional.gelu(torch.relu(torch.from_numpy(x_value) + 4)).numpy()
    np.testing.assert_allclose(run_tflite(data, x_value), expected, rtol=1e-5, atol=1e-6)


# -- quantize / dequantize ----------------------------------------------------------------


@pytest.mark.parametrize("case", range(CASES))
def test_quantize(case: int) -> None:
    rng = np.random.default_rng(case)
    q = random_quant(rng)
    x = (rng.standard_normal((2, 5, 7, 3)) * q.scale * 90).astype(np.float32)
    x.flat[:8] = np.float32(q.scale) * np.float32([0.5, -0.5, 1.5, -2.5, 0, 1e3, -1e3, 126.5])
    model = one_op_model(builtin("QUANTIZE"), [{"shape": x.shape, "dtype": "float32"}],
                         {"shape": x.shape, "dtype": "int8", "scale": q.scale,
                          "zero_point": q.zero_point})
    expected = nchw(run_tflite(model, x))
    actual = run_kernel("nee::quantize_per_tensor.out", expected.shape, input=nchw(x),
                        scale=q.scale, zero_point=q.zero_point, quant_min=-128, quant_max=127)
    assert_exact(actual, expected, "quantize")


@pytest.mark.parametrize("case", range(CASES))
def test_dequantize(case: int) -> None:
    rng = np.random.default_rng(case)
    q = random_quant(rng, 1e-4, 10.0)
    x = random_int8(rng, (1, 4, 6, 5))
    model = one_op_model(builtin("DEQUANTIZE"),
                         [{"shape": x.shape, "dtype": "int8", "scale": q.scale,
                           "zero_point": q.zero_point}],
                         {"shape": x.shape, "dtype": "float32"})
    expected = nchw(run_tflite(model, x))
    actual = run_kernel("nee::dequantize_per_tensor.out", expected.shape, "float32",
                        input=nchw(x), scale=q.scale, zero_point=q.zero_point, quant_min=-128,
                        quant_max=127)
    assert_exact(actual, expected, "dequantize")


@pytest.mark.parametrize(("axis", "with_zero_points"), [(0, True), (1, True), (3, False)])
def test_dequantize_per_channel_matches_torch(axis: int, with_zero_points: bool) -> None:
    rng = np.random.default_rng(axis)
    x = random_int8(rng, (6, 5, 3, 4))
    channels = x.shape[axis]
    scales = np.exp(rng.uniform(-9, 0, channels)).astype(np.float32)
    zero_points = rng.integers(-10, 10, channels) if with_zero_points else None
    expected = torch.ops.quantized_decomposed.dequantize_per_channel(
        torch.from_numpy(x), torch.from_numpy(scales),
        None if zero_points is None else torch.from_numpy(zero_points), axis, -128, 127,
        torch.int8).numpy()
    actual = run_kernel("nee::dequantize_per_channel.out", x.shape, "float32", input=x,
                        scales=scales, zero_points=zero_points, axis=axis, quant_min=-128,
                        quant_max=127)
    assert_exact(actual, expected, "dequantize_per_channel")


# -- convolution --------------------------------------------------------------------------


def _output_quant(rng: np.random.Generator, input: Quant, weight_scales: np.ndarray,
                  terms: int) -> Quant:
    """An output scale near the accumulator's spread (some results saturate, most do not)."""
    spread = input.scale * float(np.mean(weight_scales)) * math.sqrt(terms) * 74 * 73
    return Quant(f32(spread / 40 * np.exp(rng.uniform(-1, 1))), int(rng.integers(-30, 31)))


def _conv_case(case: int) -> dict:
    """Random conv geometry: regular, depthwise (multiplier 1 or 2) or grouped; a few ("long")
    with reductions longer than the float32-exact chunk, with 1 or 2 groups."""
    rng = np.random.default_rng(case)
    kind = ("regular", "depthwise", "grouped", "long")[case % 4]
    long_groups = 1 + case // 4 % 2
    c = {"regular": int(rng.integers(1, 9)), "depthwise": int(rng.integers(1, 9)),
         "grouped": 2 * int(rng.integers(1, 5)), "long": 120 * long_groups}[kind]
    groups = {"regular": 1, "depthwise": c, "grouped": 2, "long": long_groups}[kind]
    o = {"regular": int(rng.integers(1, 9)), "depthwise": c * (1 + case // 4 % 2),
         "grouped": 2 * int(rng.integers(1, 4)), "long": 3 * long_groups}[kind]
    window = random_window(rng, ("VALID", "SAME", "other")[case % 3], dilated=case % 2 == 0)
    if kind == "long":
        window["kernel"], window["padding"] = (3, 3), (1, 1)
    return {"rng": rng, "n": int(rng.integers(1, 3)), "c": c, "o": o, "groups": groups,
            **window, "activation": ACTIVATIONS[case // 3 % 3], "bias": case % 5 != 4}


def _conv_model(x_shape: tuple[int, ...], weight: np.ndarray, bias: np.ndarray | None,
                input: Quant, weight_scales: np.ndarray, output: Quant, out_shape: tuple,
                geometry: dict) -> bytes:
    """CONV_2D or DEPTHWISE_CONV_2D on NHWC, with torch's symmetric padding as SAME/VALID if
    one matches, else as a PAD op (padding with the zero point) before a VALID convolution."""
    writer = tfl.TfliteWriter()
    x = writer.tensor("x", nhwc_shape(x_shape), "int8", scale=input.scale,
                      zero_point=input.zero_point)
    feed = x
    padding = spatial_padding(x_shape[2:], geometry["kernel"], geometry["stride"],
                              geometry["dilation"], geometry["padding"])
    if padding is None:
        (ph, pw), (n, h, w, c) = geometry["padding"], nhwc_shape(x_shape)
        pads = writer.tensor("pads", (4, 2), "int32",
                             data=np.array([[0, 0], [ph, ph], [pw, pw], [0, 0]]))
        x = writer.tensor("padded", (n, h + 2 * ph, w + 2 * pw, c), "int8", scale=input.scale,
                          zero_point=input.zero_point)
        writer.op(builtin("PAD"), [feed, pads], [x], tfl.pad_options())
        padding = "VALID"
    o = weight.shape[0]
    depthwise = geometry["groups"] == x_shape[1] and weight.shape[1] == 1
    filter_data = weight.transpose(1, 2, 3, 0) if depthwise else weight.transpose(0, 2, 3, 1)
    w = writer.tensor("w", filter_data.shape, "int8", data=filter_data, scale=weight_scales,
                      zero_point=0, axis=3 if depthwise else 0)
    if bias is None and not depthwise:  # TFLite's CONV_2D requires a bias
        bias = np.zeros(o, np.int32)
    operands = [x, w] + ([] if bias is None else [writer.tensor(
        "b", (o,), "int32", data=bias, scale=np.float32(input.scale) * weight_scales,
        zero_point=0)])
    y = writer.tensor("y", nhwc_shape(out_shape), "int8", scale=output.scale,
                      zero_point=output.zero_point)
    common = {"stride": geometry["stride"], "dilation": geometry["dilation"],
              "padding": padding, "activation": geometry["activation"]}
    if depthwise:
        writer.op(builtin("DEPTHWISE_CONV_2D"), operands, [y],
                  tfl.depthwise_conv2d_options(o // x_shape[1], **common))
    else:
        writer.op(builtin("CONV_2D"), operands, [y], tfl.conv2d_options(**common))
    return writer.finish([feed], [y])


@pytest.mark.parametrize("case", range(2 * CASES))
def test_conv2d(case: int) -> None:
    g = _conv_case(case)
    rng = g["rng"]
    x_shape = (g["n"], g["c"], *g["hw"])
    weight = random_int8(rng, (g["o"], g["c"] // g["groups"], *g["kernel"]), low=-127)
    bias = rng.integers(-20000, 20000, g["o"], dtype=np.int32) if g["bias"] else None
    input = random_quant(rng, 0.01, 0.1)
    channels = 1 if case % 7 == 6 else g["o"]  # some per-tensor weights
    weight_scales = np.exp(rng.uniform(np.log(1e-3), np.log(2e-2), channels)).astype(np.float32)
    output = _output_quant(rng, input, weight_scales, weight[0].size)
    x = random_int8(rng, x_shape)
    out_hw = tuple((size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in zip(
        g["hw"], g["kernel"], g["stride"], g["padding"], g["dilation"], strict=True))
    out_shape = (g["n"], g["o"], *out_hw)
    model = _conv_model(x_shape, weight, bias, input, weight_scales, output, out_shape, g)
    expected = nchw(run_tflite(model, nhwc(x)))
    args = fixed_point.conv_requant(input, weight_scales, output, g["activation"])
    actual = run_kernel("nee::conv2d_int8.out", out_shape, input=x, weight=weight, bias=bias,
                        stride=g["stride"], padding=g["padding"], dilation=g["dilation"],
                        groups=g["groups"], **args)
    assert_exact(actual, expected, f"conv2d {g | {'rng': None}}")


def test_conv2d_within_a_budget() -> None:
    """With the least scratch it can work in (budget 0: im2col one output row at a time), the
    result is the same."""
    rng = np.random.default_rng(0)
    x, weight = random_int8(rng, (2, 120, 9, 8)), random_int8(rng, (6, 120, 3, 3), low=-127)
    args = {"input": x, "weight": weight, "bias": rng.integers(-9999, 9999, 6, dtype=np.int32),
            "stride": (1, 2), "padding": (1, 1), "dilation": (1, 1), "groups": 1,
            **fixed_point.conv_requant(Quant(0.05, 3), [0.004] * 6, Quant(0.9, -4), "RELU")}
    kernel = KERNELS["nee::conv2d_int8.out"]
    least, full = kernel.scratch(**args, budget=0), kernel.scratch(**args)
    assert least < full
    results = []
    for nbytes in (least, full):
        out = np.empty((2, 6, 9, 4), np.int8)
        kernel.bind({**args, "out": out, "scratch": np.zeros(nbytes, np.uint8)})()
        results.append(out)
    assert_exact(*results, "conv2d within a budget")


# -- fully connected ----------------------------------------------------------------------


# LiteRT's reference FULLY_CONNECTED requantizes in double precision (rounding "float"); the
# fixed-point rounding differs from it in about 1 element in 10**4: the cases are large enough
# to see some. (Its optimized kernel is no oracle for "double": ruy rounds ties upward.)
@pytest.mark.parametrize("case", range(CASES))
def test_linear(case: int) -> None:
    rng = np.random.default_rng(case)
    per_channel, activation = case % 2 == 0, ACTIVATIONS[case % 3]
    lead = ((int(rng.integers(1, 257)),), (4, int(rng.integers(1, 65))))[case % 2]
    # every fourth case reduces over more columns than one exact float32 chunk
    k = int(rng.integers(1025, 2100) if case % 4 == 3 else rng.integers(1, 1025))
    n = int(rng.integers(1, 49))
    weight = random_int8(rng, (n, k), low=-127)
    bias = rng.integers(-20000, 20000, n, dtype=np.int32)
    input = random_quant(rng, 0.01, 0.1)
    weight_scales = np.exp(rng.uniform(np.log(1e-3), np.log(2e-2), n if per_channel else 1)
                           ).astype(np.float32)
    output = _output_quant(rng, input, weight_scales, k)
    x = random_int8(rng, (*lead, k))
    model = one_op_model(
        builtin("FULLY_CONNECTED"),
        [{"shape": x.shape, "dtype": "int8", "scale": input.scale,
          "zero_point": input.zero_point},
         {"shape": weight.shape, "dtype": "int8", "data": weight, "scale": weight_scales,
          "zero_point": 0},
         {"shape": (n,), "dtype": "int32", "data": bias,
          "scale": np.float32(input.scale) * weight_scales, "zero_point": 0}],
        {"shape": (*lead, n), "dtype": "int8", "scale": output.scale,
         "zero_point": output.zero_point},
        tfl.fully_connected_options(activation, keep_num_dims=True))
    expected = run_tflite(model, x)
    args = fixed_point.linear_requant(input, weight_scales, output, activation)
    actual = run_kernel("nee::linear_int8.out", expected.shape, input=x, weight=weight,
                        bias=bias, **args)
    assert_exact(actual, expected, f"linear k={k} n={n} per_channel={per_channel}")


# -- add / mul ----------------------------------------------------------------------------


def _broadcast_pair(rng: np.random.Generator, case: int) -> tuple[tuple, tuple]:
    """Shapes: equal, one side with size-1 dims, or of lower rank."""
    shape = tuple(int(v) for v in rng.integers(1, 6, 4))
    kind = case % 3
    if kind == 0:
        return shape, shape
    if kind == 1:
        return shape, tuple(1 if rng.random() < 0.5 else v for v in shape)
    return shape[-2:], shape


@pytest.mark.parametrize("op", ["ADD", "MUL"])
@pytest.mark.parametrize("case", range(CASES))
def test_add_mul(op: str, case: int) -> None:
    rng = np.random.default_rng(case)
    a_shape, b_shape = _broadcast_pair(rng, case)
    a_q, b_q, out_q = random_quant(rng), random_quant(rng), random_quant(rng)
    spread = a_q.scale * b_q.scale * 60 if op == "MUL" else (a_q.scale + b_q.scale) * 0.8
    out_q = Quant(f32(spread * np.exp(rng.uniform(-1, 1))), out_q.zero_point)
    activation = ACTIVATIONS[case % 3]
    a, b = random_int8(rng, a_shape), random_int8(rng, b_shape)
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    spec = [{"shape": t.shape, "dtype": "int8", "scale": q.scale, "zero_point": q.zero_point}
            for t, q in ((a, a_q), (b, b_q))]
    options = (tfl.add_options if op == "ADD" else tfl.mul_options)(activation)
    model = one_op_model(builtin(op), spec, {"shape": out_shape, "dtype": "int8",
                                             "scale": out_q.scale,
                                             "zero_point": out_q.zero_point}, options)
    expected = run_tflite(model, a, b)
    requant = fixed_point.add_requant if op == "ADD" else fixed_point.mul_requant
    actual = run_kernel(f"nee::{op.lower()}_int8.out", out_shape, self=a, other=b,
                        **requant(a_q, b_q, out_q, activation))
    assert_exact(actual, expected, f"{op} {a_shape} {b_shape}")


# -- pooling, mean, concatenation ---------------------------------------------------------


def _pool_case(case: int) -> tuple[np.random.Generator, np.ndarray, dict, str]:
    """(rng, NCHW int8 input, kernel/stride/padding, TFLite padding): torch padding only where
    SAME equals it."""
    rng = np.random.default_rng(case)
    window = random_window(rng, ("VALID", "SAME", "other")[case % 3], dilated=False)
    kernel, stride, padding, hw = (window[k] for k in ("kernel", "stride", "padding", "hw"))
    mode = spatial_padding(hw, kernel, stride, (1, 1), padding)
    if mode is None:  # TFLite pools cannot pad otherwise (a PAD op would count in the mean)
        padding, mode = (0, 0), "VALID"
    x = random_int8(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 6)), *hw))
    return rng, x, {"kernel_size": kernel, "stride": stride, "padding": padding}, mode


def _pool_out_shape(x: np.ndarray, geometry: dict) -> tuple[int, ...]:
    return (*x.shape[:2], *((size + 2 * p - k) // s + 1 for size, k, s, p in zip(
        x.shape[2:], geometry["kernel_size"], geometry["stride"], geometry["padding"],
        strict=True)))


@pytest.mark.parametrize("case", range(CASES))
def test_avg_pool2d(case: int) -> None:
    rng, x, geometry, mode = _pool_case(case)
    q, activation = random_quant(rng), ACTIVATIONS[case % 3]
    out_shape = _pool_out_shape(x, geometry)
    spec = {"dtype": "int8", "scale": q.scale, "zero_point": q.zero_point}
    model = one_op_model(builtin("AVERAGE_POOL_2D"), [{"shape": nhwc(x).shape, **spec}],
                         {"shape": nhwc_shape(out_shape), **spec},
                         tfl.pool2d_options(geometry["kernel_size"], geometry["stride"], mode,
                                            activation))
    expected = nchw(run_tflite(model, nhwc(x)))
    low, high = fixed_point.quantized_activation_range(activation, q.scale, q.zero_point)
    actual = run_kernel("nee::avg_pool2d_int8.out", out_shape, self=x, **geometry,
                        activation_min=low, activation_max=high)
    assert_exact(actual, expected, f"avg_pool2d {geometry} {mode}")


@pytest.mark.parametrize("name", ["nee::max_pool2d.out", "aten::max_pool2d_with_indices.out"])
@pytest.mark.parametrize("case", range(CASES // 2))
def test_max_pool2d(name: str, case: int) -> None:
    rng, x, geometry, mode = _pool_case(case)
    q = random_quant(rng)
    out_shape = _pool_out_shape(x, geometry)
    spec = {"dtype": "int8", "scale": q.scale, "zero_point": q.zero_point}
    model = one_op_model(builtin("MAX_POOL_2D"), [{"shape": nhwc(x).shape, **spec}],
                         {"shape": nhwc_shape(out_shape), **spec},
                         tfl.pool2d_options(geometry["kernel_size"], geometry["stride"], mode))
    expected = nchw(run_tflite(model, nhwc(x)))
    extra = {"indices": np.empty(out_shape, np.int64)} if "indices" in name else {}
    actual = run_kernel(name, out_shape, self=x, **geometry, **extra)
    assert_exact(actual, expected, f"{name} {geometry} {mode}")


@pytest.mark.parametrize("case", range(CASES))
def test_mean(case: int) -> None:
    rng = np.random.default_rng(case)
    dims = ([2, 3], [2, 3], [1], [3], [1, 2, 3])[case % 5]
    keepdim = case % 2 == 0
    x = random_int8(rng, tuple(int(v) for v in rng.integers(1, 9, 4)))
    input = random_quant(rng)
    output = input if case % 4 == 0 else random_quant(rng)  # equal or different params
    to_nhwc = {0: 0, 1: 3, 2: 1, 3: 2}
    axes = np.array([to_nhwc[d] for d in dims], np.int32)
    kept = tuple(1 if i in axes else v for i, v in enumerate(nhwc(x).shape))
    out_nhwc = tuple(v for i, v in enumerate(kept) if keepdim or i not in axes)
    model = one_op_model(
        builtin("MEAN"),
        [{"shape": nhwc(x).shape, "dtype": "int8", "scale": input.scale,
          "zero_point": input.zero_point},
         {"shape": axes.shape, "dtype": "int32", "data": axes}],
        {"shape": out_nhwc, "dtype": "int8", "scale": output.scale,
         "zero_point": output.zero_point}, tfl.reducer_options(keepdim))
    expected = nchw(run_tflite(model, nhwc(x)).reshape(kept))
    expected = expected if keepdim else expected.squeeze(tuple(dims))
    actual = run_kernel("nee::mean_int8.out", expected.shape, self=x, dim=tuple(dims),
                        keepdim=keepdim, **fixed_point.mean_requant(input, output))
    assert_exact(actual, expected, f"mean {x.shape} dims={dims} keepdim={keepdim}")


@pytest.mark.parametrize("case", range(4))
def test_cat(case: int) -> None:
    rng = np.random.default_rng(case)
    n, h, w = (int(v) for v in rng.integers(1, 6, 3))
    parts = [random_int8(rng, (n, int(rng.integers(1, 5)), h, w)) for _ in range(case + 2)]
    q = random_quant(rng)
    spec = {"dtype": "int8", "scale": q.scale, "zero_point": q.zero_point}
    out_shape = (n, sum(p.shape[1] for p in parts), h, w)
    model = one_op_model(builtin("CONCATENATION"),
                         [{"shape": nhwc(p).shape, **spec} for p in parts],
                         {"shape": nhwc_shape(out_shape), **spec},
                         tfl.concatenation_options(3))
    expected = nchw(run_tflite(model, *map(nhwc, parts)))
    actual = run_kernel("aten::cat.out", out_shape, tensors=parts, dim=1)
    assert_exact(actual, expected, "cat")


# -- elementwise functions as 256-entry tables --------------------------------------------


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH", "HARD_SWISH"])
@pytest.mark.parametrize("case", range(CASES))
def test_lookup(op: str, case: int) -> None:
    """Every int8 input value (and a strided 4-D tensor of them) through TFLite's op and NEE's
    table lookup, the table from fixed_point."""
    rng = np.random.default_rng(case)
    input = random_quant(rng, 0.005, 0.2)
    output = {"LOGISTIC": fixed_point.SIGMOID_OUTPUT, "TANH": fixed_point.TANH_OUTPUT,
              "HARD_SWISH": random_quant(rng, input.scale / 2, input.scale * 4)}[op]
    table = {"LOGISTIC": fixed_point.sigmoid_table, "TANH": fixed_point.tanh_table,
             "HARD_SWISH": fixed_point.hardswish_table}[op](input, output)
    x = rng.permutation(np.arange(-128, 128, dtype=np.int8)).reshape(2, 4, 4, 8)
    model = one_op_model(builtin(op), [{"shape": x.shape, "dtype": "int8",
                                        "scale": input.scale, "zero_point": input.zero_point}],
                         {"shape": x.shape, "dtype": "int8", "scale": output.scale,
                          "zero_point": output.zero_point})
    expected = nchw(run_tflite(model, x))
    actual = run_kernel("nee::lookup_int8.out", expected.shape, self=nchw(x), table=table)
    assert_exact(actual, expected, f"{op} {input} {output}")
    strided = run_kernel("nee::lookup_int8.out", (2, 8, 2, 4), self=nchw(x)[:, :, ::2],
                         table=table)
    assert_exact(strided, expected[:, :, ::2], f"{op} strided")


@pytest.mark.parametrize("case", range(CASES))
def test_softmax(case: int) -> None:
    """Along the channels (NCHW dim 1, TFLite's last NHWC axis), betas other than 1 too."""
    rng = np.random.default_rng(case)
    input = random_quant(rng, 0.01, 0.5)
    beta = (1.0, 0.5, 2.0)[case % 3]
    x = random_int8(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 40)),
                          *(int(v) for v in rng.integers(1, 5, 2))))
    output = fixed_point.SOFTMAX_OUTPUT
    model = one_op_model(builtin("SOFTMAX"),
                         [{"shape": nhwc(x).shape, "dtype": "int8", "scale": input.scale,
                           "zero_point": input.zero_point}],
                         {"shape": nhwc(x).shape, "dtype": "int8", "scale": output.scale,
                          "zero_point": output.zero_point}, tfl.softmax_options(beta))
    expected = nchw(run_tflite(model, nhwc(x)))
    actual = run_kernel("nee::softmax_int8.out", x.shape, self=x, dim=1,
                        table=fixed_point.softmax_table(input, beta))
    assert_exact(actual, expected, f"softmax {x.shape} {input} beta={beta}")
