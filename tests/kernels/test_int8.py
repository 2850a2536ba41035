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
from ai_edge_litert.interpreter import OpResolverType
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

from runtime_py.kernels import KERNELS, nn, quantized
from runtime_py.kernels.quantized import _rescale
from toolchain.quantize import fixed_point
from toolchain.quantize.fixed_point import Quant, f32, quantize_multiplier
from toolchain.serialize import tflite as tfl

CASES = 16  # random cases per op
# the LiteRT path each rounding reproduces: its reference kernels, or its default (XNNPACK)
_RESOLVERS = {"double": OpResolverType.BUILTIN_REF, "single": OpResolverType.BUILTIN_REF,
              "float": OpResolverType.BUILTIN_REF,
              "xnnpack": OpResolverType.AUTO}

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


def _requant_reference(acc: np.ndarray, bias: np.ndarray, multipliers: list[int],
                       shifts: list[int], rounding: str, zero_point: int, low: int,
                       high: int) -> np.ndarray:
    """clamp(MultiplyByQuantizedMultiplier(acc + bias) + zero_point) per row (``_rescale``)."""
    a = acc + bias[:, None]
    _rescale(a, np.array(multipliers)[:, None], np.array(shifts)[:, None], rounding,
             np.empty_like(a))()
    return np.clip(a + zero_point, low, high).astype(np.int8)


@pytest.mark.parametrize("seed", range(3))
def test_requantization_is_exact(seed: int) -> None:
    """``_Requant`` (float64 with one or two floors, the bias folded or not, or int64 where
    float64 cannot be exact) equals ``_rescale`` on accumulators around every output level and
    at every rounding tie, for random multipliers (tiny and > 1 too), zero points, clamps and
    biases, both roundings, float32 and float64 accumulators."""
    rng = np.random.default_rng(seed)
    seen = set()
    for trial in range(250):
        rounding = "single" if trial % 5 == 0 else "double"
        channels = int(rng.integers(1, 5))
        reals = np.exp2(rng.uniform(-26, 4) + rng.uniform(-1, 1, channels))
        multipliers, shifts = zip(*(quantize_multiplier(float(r), rounding) for r in reals),
                                  strict=True)
        zero_point = int(rng.integers(-128, 128))
        low, high = sorted(int(v) for v in rng.integers(-128, 128, 2))
        low = max(low, zero_point) if trial % 3 == 0 else low  # as after a ReLU
        limit = 2**31 >> max(0, *shifts) if rounding == "double" else 2**31  # TFLite's int32
        bias = rng.integers(-(2 ** int(rng.integers(1, limit.bit_length() - 1))), 2**20, channels)
        reach = int(min(2**23, 300 / reals.min()))
        acc = rng.integers(-reach, reach + 1, (channels, 300)) - bias[:, None]
        for row, (m, s) in enumerate(zip(multipliers, shifts, strict=True)):  # near ties
            unit = m << max(s, 0) if rounding == "double" else m
            step = 2 ** (30 + max(-s, 0)) if rounding == "double" else 2 ** (30 - s)
            near = rng.integers(-300, 300, 100) * step // max(unit, 1) - bias[row]
            acc[row, :300] = np.concatenate([near - 1, near, near + 1])
        acc = np.clip(acc, -2**24, 2**24)  # as float32 sums, with acc + bias in TFLite's int32
        acc = np.clip(acc + bias[:, None], 1 - limit, limit - 1) - bias[:, None]
        expected = _requant_reference(acc, bias, list(multipliers), list(shifts), rounding,
                                      zero_point, low, high)
        req = quantized._Requant(list(multipliers), list(shifts), rounding, zero_point, low,
                                 high, bias)
        seen.add((req.mode, req.folded))
        buf = {name: np.empty(acc.shape, dtype) for name, (_, dtype) in
               quantized._requant_regions(req.mode, acc.shape).items()}
        if trial % 2 and np.abs(acc).max() <= 2**24:  # as a float32 matmul gives them
            src = acc.astype(np.float32)
        else:  # as summed chunks (float64 / int64) give them
            src = buf["v"] if "v" in buf else buf["acc"]
            np.copyto(src, acc)
        out = np.empty(acc.shape, np.int8)
        for call in req.bind(src, buf, out, lambda c: c.reshape(-1, 1)):
            call()
        assert np.array_equal(out, expected), (trial, req.mode, req.folded)
    assert {("floor", True), ("floor", False), ("floor2", True), ("int64", False)} <= seen


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
@pytest.mark.parametrize("rounding", ["double", "xnnpack"])
def test_quantize(case: int, rounding: str) -> None:
    """TFLite's reference QUANTIZE (x / scale, half away from zero), and with rounding
    "xnnpack" LiteRT's default path (XNNPACK: x times 1 / scale, half to even)."""
    rng = np.random.default_rng(case)
    q = random_quant(rng)
    x = (rng.standard_normal((2, 5, 7, 3)) * q.scale * 90).astype(np.float32)
    x.flat[:8] = np.float32(q.scale) * np.float32([0.5, -0.5, 1.5, -2.5, 0, 1e3, -1e3, 126.5])
    model = one_op_model(builtin("QUANTIZE"), [{"shape": x.shape, "dtype": "float32"}],
                         {"shape": x.shape, "dtype": "int8", "scale": q.scale,
                          "zero_point": q.zero_point})
    expected = nchw(run_tflite(model, x, resolver=_RESOLVERS[rounding]))
    actual = run_kernel("nee::quantize_per_tensor.out", expected.shape, input=nchw(x),
                        scale=q.scale, zero_point=q.zero_point, quant_min=-128, quant_max=127,
                        rounding=rounding)
    assert_exact(actual, expected, "quantize")


def test_quantize_in_blocks() -> None:
    """A tensor of several blocks, in the default and the least workspace, against TFLite."""
    rng = np.random.default_rng(1)
    q = Quant(f32(0.02), -5)
    x = (rng.standard_normal((2, 30, 30, 20)) * 2).astype(np.float32)
    model = one_op_model(builtin("QUANTIZE"), [{"shape": x.shape, "dtype": "float32"}],
                         {"shape": x.shape, "dtype": "int8", "scale": q.scale,
                          "zero_point": q.zero_point})
    expected = nchw(run_tflite(model, x))
    args = {"input": nchw(x), "scale": q.scale, "zero_point": q.zero_point, "quant_min": -128,
            "quant_max": 127}
    assert_exact(run_kernel("nee::quantize_per_tensor.out", expected.shape, **args), expected,
                 "quantize in blocks")
    assert_exact(_least("nee::quantize_per_tensor.out", np.empty(expected.shape, np.int8),
                        **args), expected, "quantize in the least blocks")


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
    _check_conv2d_case(case, "double")


# case 9 (a 4x3 depthwise convolution at stride 2 over a batch of 2) crashes LiteRT's default
# path (a segmentation fault in its XNNPACK delegate), so it is not among these
@pytest.mark.parametrize("case", [0, 1, 2, 3, 5, 6, 7, 11, 13, 15])
def test_conv2d_as_xnnpack_requantizes(case: int) -> None:
    """Rounding "xnnpack": float32(acc) * float32((in * w[c]) / out), half to even."""
    _check_conv2d_case(case, "xnnpack")


def _check_conv2d_case(case: int, rounding: str) -> None:
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
    expected = nchw(run_tflite(model, nhwc(x), resolver=_RESOLVERS[rounding]))
    args = fixed_point.conv_requant(input, weight_scales, output, g["activation"], rounding)
    actual = run_kernel("nee::conv2d_int8.out", out_shape, input=x, weight=weight, bias=bias,
                        stride=g["stride"], padding=g["padding"], dilation=g["dilation"],
                        groups=g["groups"], **args)
    assert_exact(actual, expected, f"conv2d {g | {'rng': None}}")


def _conv_oracle_case(rng: np.random.Generator, x_shape: tuple[int, ...], o: int,
                      geometry: dict, weight_low: int = -127, bias_bound: int = 20000,
                      real_scale: float = 1.0) -> tuple[dict, tuple[int, ...], np.ndarray]:
    """(conv2d_int8 arguments, out shape, TFLite's result) for random int8 data of this
    geometry (kernel, stride, padding, dilation, groups, activation); ``real_scale`` scales the
    output's requantization multiplier (tiny ones need int64)."""
    c, groups = x_shape[1], geometry["groups"]
    weight = random_int8(rng, (o, c // groups, *geometry["kernel"]), low=weight_low)
    bias = rng.integers(-bias_bound, bias_bound, o, dtype=np.int32)
    input = random_quant(rng, 0.01, 0.1)
    weight_scales = np.exp(rng.uniform(np.log(4e-3), np.log(8e-3), o)).astype(np.float32)
    output = _output_quant(rng, input, weight_scales, weight[0].size)
    output = Quant(f32(output.scale / real_scale), output.zero_point)
    x = random_int8(rng, x_shape)
    out_hw = tuple((size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in zip(
        x_shape[2:], geometry["kernel"], geometry["stride"], geometry["padding"],
        geometry["dilation"], strict=True))
    out_shape = (x_shape[0], o, *out_hw)
    model = _conv_model(x_shape, weight, bias, input, weight_scales, output, out_shape, geometry)
    args = {"input": x, "weight": weight, "bias": bias, "stride": geometry["stride"],
            "padding": geometry["padding"], "dilation": geometry["dilation"],
            "groups": groups, **fixed_point.conv_requant(input, weight_scales, output,
                                                         geometry["activation"])}
    return args, out_shape, nchw(run_tflite(model, nhwc(x)))


def _geometry(kernel: int, groups: int = 1, stride: int = 1, padding: int | None = None,
              activation: str = "NONE") -> dict:
    pad = kernel // 2 if padding is None else padding
    return {"kernel": (kernel, kernel), "stride": (stride, stride), "padding": (pad, pad),
            "dilation": (1, 1), "groups": groups, "activation": activation}


# (x shape, output channels, geometry, options): one of each way conv2d_int8 can run
CONV_PLANS = {
    "gemm": ((1, 40, 14, 13), 8, _geometry(3), {}),
    "gemm-channels-last": ((2, 40, 5, 5), 48, _geometry(3, stride=2), {}),
    "gemm-chunks": ((1, 200, 4, 5), 16, _geometry(3, activation="RELU"), {"weight_low": 100}),
    "gemm-chunks-last": ((1, 200, 4, 5), 40, _geometry(3), {"weight_low": 100}),
    "gemm-grouped": ((1, 12, 9, 9), 18, _geometry(3, groups=3), {}),
    "fused": ((2, 8, 9, 10), 40, _geometry(3, activation="RELU6"), {}),
    "fused-raw": ((1, 8, 9, 10), 40, _geometry(1), {"bias_bound": 2**30}),
    "phase": ((2, 16, 12, 11), 16, _geometry(3, groups=16, stride=2), {}),
    "channels-last": ((1, 40, 5, 6), 40, _geometry(3, groups=40, activation="RELU"), {}),
    "int64": ((1, 8, 9, 10), 16, _geometry(3), {"real_scale": 2.0**-14}),
}


# the CONV_PLANS whose columns come from a flat copy of the input (stride 1, "same" padding)
FLAT_PLANS = {"gemm", "gemm-chunks", "gemm-chunks-last", "gemm-grouped", "fused", "int64"}


@pytest.mark.parametrize("flat", [True, False])
@pytest.mark.parametrize("kind", list(CONV_PLANS))
def test_conv2d_plans(kind: str, flat: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each way of running a convolution, in its whole workspace and in the least one (budget
    0: one output row or channel at a time), against TFLite; with the columns from a flat copy
    of the input (``nn.FLAT_COLUMNS``, its wrapped values the zero point) and without."""
    monkeypatch.setattr(nn, "FLAT_COLUMNS", flat)
    quantized._conv_plan.cache_clear()
    x_shape, o, geometry, options = CONV_PLANS[kind]
    args, out_shape, expected = _conv_oracle_case(np.random.default_rng(7), x_shape, o,
                                                  geometry, **options)
    kernel = KERNELS["nee::conv2d_int8.out"]
    mode = quantized._requant_mode(*(args[k] for k in (
        "output_multiplier", "output_shift", "rounding", "output_zero_point", "activation_min",
        "activation_max")))
    plan = quantized._conv_plan(x_shape, (o, x_shape[1] // geometry["groups"],
                                          *geometry["kernel"]), geometry["stride"],
                                geometry["padding"], geometry["dilation"], geometry["groups"],
                                mode)
    assert (mode == "int64") == (kind == "int64")
    assert plan.kind == ("last" if kind == "channels-last" else "fused" if "fused" in kind
                         else "phase" if kind == "phase" else "gemm")
    assert plan.channels_last == kind.endswith("last")
    assert plan.flat == (flat and kind in FLAT_PLANS)
    least, full = kernel.scratch(**args, budget=0), kernel.scratch(**args)
    assert least < full or plan.tile == 1
    for nbytes in (full, least):
        out = np.full(out_shape, 99, np.int8)
        kernel.bind({**args, "out": out, "scratch": np.zeros(nbytes, np.uint8)})()
        assert_exact(out, expected, f"conv2d {kind} in {nbytes} bytes")
    quantized._conv_plan.cache_clear()


def test_conv2d_reduction_chunks() -> None:
    """Chunks of a reduction keep every float32 partial sum of w * x exact: sum(|w|) <=
    2**17 per output channel."""
    weight = np.full((3, 5000), 127, np.int8)
    weight[1, ::2] = -127
    chunks = quantized._chunks(weight)
    assert chunks[0] == (0, 1032) and chunks[-1][1] == 5000 and len(chunks) == 5
    assert all(int(np.abs(weight[:, a:b].astype(np.int64)).sum(axis=1).max()) <= 2**17
               for a, b in chunks)
    assert quantized._chunks(np.ones((2, 3000), np.int8)) == [(0, 3000)]


# -- fully connected ----------------------------------------------------------------------


# LiteRT's reference FULLY_CONNECTED requantizes in double precision (rounding "float"); the
# fixed-point rounding differs from it in about 1 element in 10**4: the cases are large enough
# to see some. (Its optimized kernel is no oracle for "double": ruy rounds ties upward.)
@pytest.mark.parametrize("case", range(CASES))
def test_linear(case: int) -> None:
    _check_linear_case(case, "float")


@pytest.mark.parametrize("case", range(8))
def test_linear_as_xnnpack_requantizes(case: int) -> None:
    """Rounding "xnnpack" against LiteRT's default path (XNNPACK's fully connected), also over
    reductions of more than 1024 columns (where single rounding differs on ~1 output in 10**5)."""
    _check_linear_case(case, "xnnpack")


def _check_linear_case(case: int, rounding: str) -> None:
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
    expected = run_tflite(model, x, resolver=_RESOLVERS[rounding])
    args = fixed_point.linear_requant(input, weight_scales, output, activation, rounding)
    actual = run_kernel("nee::linear_int8.out", expected.shape, input=x, weight=weight,
                        bias=bias, **args)
    assert_exact(actual, expected, f"linear k={k} n={n} per_channel={per_channel}")


@pytest.mark.parametrize("rounding", ["double", "single", "float"])
def test_linear_in_tiles(rounding: str) -> None:
    """Rows in several tiles (and one row at a time in the least workspace), a reduction in
    several exact chunks (large weights), against the int64 definition: acc in int64, then
    ``_rescale`` ("float": TFLite, as test_linear)."""
    rng = np.random.default_rng(5)
    x, weight = random_int8(rng, (3, 200, 1500)), random_int8(rng, (40, 1500), low=90)
    weight[::2] *= -1
    bias = rng.integers(-20000, 20000, 40, dtype=np.int32)
    input, weight_scales = Quant(0.05, -7), np.full(40, 0.004, np.float32)
    output = _output_quant(rng, input, weight_scales, 1500)
    args = {"input": x, "weight": weight, "bias": bias, **fixed_point.linear_requant(
        input, weight_scales, output, "RELU6", rounding)}
    assert len(quantized._chunks(weight)) > 1
    acc = (x.astype(np.int64) - input.zero_point) @ weight.astype(np.int64).T + bias
    if rounding == "float":
        scaled = acc * np.asarray(args["effective_scale"])
        rounded = np.trunc(scaled) + np.trunc(2 * (scaled - np.trunc(scaled)))
        expected = np.clip(rounded + output.zero_point, args["activation_min"],
                           args["activation_max"]).astype(np.int8)
    else:
        expected = _requant_reference(
            acc.reshape(-1, 40).T, np.zeros(40, np.int64), args["output_multiplier"],
            args["output_shift"], rounding, output.zero_point, args["activation_min"],
            args["activation_max"]).T.reshape(acc.shape)
    assert_exact(run_kernel("nee::linear_int8.out", expected.shape, **args), expected,
                 f"linear {rounding}")
    assert_exact(_least("nee::linear_int8.out", np.empty(expected.shape, np.int8), **args),
                 expected, f"linear {rounding} one row at a time")


# -- add / sub / mul ----------------------------------------------------------------------

_BINARY_OPTIONS = {"ADD": tfl.add_options, "SUB": tfl.sub_options, "MUL": tfl.mul_options}
_BINARY_REQUANT = {"ADD": fixed_point.add_requant, "SUB": fixed_point.sub_requant,
            "MUL": fixed_point.mul_requant}


def _broadcast_pair(rng: np.random.Generator, case: int) -> tuple[tuple, tuple]:
    """Shapes: equal, one side with size-1 dims, or of lower rank."""
    shape = tuple(int(v) for v in rng.integers(1, 6, 4))
    kind = case % 3
    if kind == 0:
        return shape, shape
    if kind == 1:
        return shape, tuple(1 if rng.random() < 0.5 else v for v in shape)
    return shape[-2:], shape


def _add_mul_case(rng: np.random.Generator, op: str, a_shape: tuple, b_shape: tuple,
                  activation: str, scheme: str = "tflite") -> tuple[dict, np.ndarray]:
    """(add/sub/mul_int8 arguments, TFLite's result) for random inputs of these shapes: its
    reference kernels' for scheme "tflite", its default path's (XNNPACK) for "xnnpack"."""
    a_q, b_q, out_q = random_quant(rng), random_quant(rng), random_quant(rng)
    spread = a_q.scale * b_q.scale * 60 if op == "MUL" else (a_q.scale + b_q.scale) * 0.8
    out_q = Quant(f32(spread * np.exp(rng.uniform(-1, 1))), out_q.zero_point)
    a, b = random_int8(rng, a_shape), random_int8(rng, b_shape)
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    spec = [{"shape": t.shape, "dtype": "int8", "scale": q.scale, "zero_point": q.zero_point}
            for t, q in ((a, a_q), (b, b_q))]
    model = one_op_model(builtin(op), spec, {"shape": out_shape, "dtype": "int8",
                                             "scale": out_q.scale,
                                             "zero_point": out_q.zero_point},
                         _BINARY_OPTIONS[op](activation))
    resolver = OpResolverType.AUTO if scheme == "xnnpack" else OpResolverType.BUILTIN_REF
    return ({"self": a, "other": b, **_BINARY_REQUANT[op](a_q, b_q, out_q, activation, scheme)},
            run_tflite(model, a, b, resolver=resolver))


@pytest.mark.parametrize("scheme", ["tflite", "xnnpack"])
@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("case", range(CASES))
def test_add_sub_mul(op: str, case: int, scheme: str) -> None:
    """Against LiteRT's reference kernels, and with rounding "xnnpack" against its default
    path, which runs these ops in XNNPACK (its own requantization: not the reference's)."""
    rng = np.random.default_rng(case)
    a_shape, b_shape = _broadcast_pair(rng, case)
    args, expected = _add_mul_case(rng, op, a_shape, b_shape, ACTIVATIONS[case % 3], scheme)
    actual = run_kernel(f"nee::{op.lower()}_int8.out", expected.shape, **args)
    assert_exact(actual, expected, f"{op} {a_shape} {b_shape}")


def _least(name: str, out: np.ndarray, **args: object) -> np.ndarray:
    """Kernel ``name`` bound to ``out`` with the least workspace it takes (budget 0), run."""
    kernel = KERNELS[name]
    nbytes = kernel.scratch(**args, budget=0)
    assert nbytes < kernel.scratch(**args)
    kernel.bind({**args, "out": out, "scratch": np.zeros(nbytes, np.uint8)})()
    return out


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((2, 24, 30, 31), (2, 24, 30, 31)), ((2, 24, 30, 31), (1, 24, 1, 1)),
    ((30, 31), (3, 5, 30, 31)), ((1, 9000), (3, 1))])
def test_add_sub_mul_in_blocks(op: str, a_shape: tuple, b_shape: tuple) -> None:
    """Tensors of several blocks (BLOCK elements; MIN_BLOCK in the least workspace), whose
    broadcasting crosses the blocks; out may be the input of its shape."""
    args, expected = _add_mul_case(np.random.default_rng(3), op, a_shape, b_shape, "RELU")
    name = f"nee::{op.lower()}_int8.out"
    assert_exact(run_kernel(name, expected.shape, **args), expected, f"{op} in blocks")
    assert_exact(_least(name, np.empty(expected.shape, np.int8), **args), expected,
                 f"{op} in the least blocks")
    for donor in ("self", "other"):
        if args[donor].shape == expected.shape:
            inputs = {**args, donor: args[donor].copy()}
            KERNELS[name].fn(**inputs, out=inputs[donor])
            assert_exact(inputs[donor], expected, f"{op} in place of {donor}")


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


@pytest.mark.parametrize(("kernel", "stride", "padding"), [((2, 2), (2, 2), (0, 0)),
                                                           ((3, 3), (1, 1), (1, 1))])
def test_max_pool2d_separable(kernel: tuple[int, int], stride: tuple[int, int],
                              padding: tuple[int, int]) -> None:
    """Geometries pooled one axis at a time (``nn._separable``; the random cases are not):
    the -128 padding is never picked, as torch's float max pooling of the same values."""
    x = random_int8(np.random.default_rng(0), (2, 3, 9, 7))
    expected = torch.nn.functional.max_pool2d(torch.from_numpy(x.astype(np.float32)), kernel,
                                              stride, padding).numpy().astype(np.int8)
    actual = run_kernel("nee::max_pool2d.out", expected.shape, self=x, kernel_size=kernel,
                        stride=stride, padding=padding)
    assert_exact(actual, expected, f"max_pool2d {kernel} {stride} {padding}")


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


@pytest.mark.parametrize("case", range(8))
def test_mean_as_xnnpack_requantizes(case: int) -> None:
    """Rounding "xnnpack", against LiteRT's default path over H and W (the mean fold_qdq
    makes): the sum times float32(in / out) / count in float32, half to even."""
    rng = np.random.default_rng(case)
    x = random_int8(rng, (1, int(rng.integers(1, 40)), *(int(v) for v in rng.integers(1, 15, 2))))
    input, output = random_quant(rng), random_quant(rng)
    kept = (1, 1, 1, x.shape[1])
    model = one_op_model(
        builtin("MEAN"),
        [{"shape": nhwc(x).shape, "dtype": "int8", "scale": input.scale,
          "zero_point": input.zero_point},
         {"shape": (2,), "dtype": "int32", "data": np.array([1, 2], np.int32)}],
        {"shape": kept, "dtype": "int8", "scale": output.scale,
         "zero_point": output.zero_point}, tfl.reducer_options(True))
    expected = nchw(run_tflite(model, nhwc(x), resolver=OpResolverType.AUTO))
    actual = run_kernel("nee::mean_int8.out", expected.shape, self=x, dim=(2, 3), keepdim=True,
                        **fixed_point.mean_requant(input, output, "xnnpack"))
    assert_exact(actual, expected, f"mean {x.shape} as XNNPACK")


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


def test_lookup_in_blocks() -> None:
    """A strided tensor of several blocks, in the default and the least workspace, and in
    place."""
    rng = np.random.default_rng(2)
    table = random_int8(rng, (256,))
    x = random_int8(rng, (3, 40, 30, 60))[..., ::2]
    expected = table[x.view(np.uint8)]
    assert_exact(run_kernel("nee::lookup_int8.out", x.shape, self=x, table=table), expected,
                 "lookup in blocks")
    assert_exact(_least("nee::lookup_int8.out", np.empty(x.shape, np.int8), self=x,
                        table=table), expected, "lookup in the least blocks")
    inplace = x.copy()
    KERNELS["nee::lookup_int8.out"].fn(self=inplace, table=table, out=inplace)
    assert_exact(inplace, expected, "lookup in place")


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


# -- shape and dtype rules ----------------------------------------------------------------

_I8 = np.int8
_REQUANT = {"output_zero_point": 0, "output_multiplier": [1 << 30], "output_shift": [-1],
            "activation_min": -128, "activation_max": 127, "rounding": "double"}
# kernel -> (args it binds with, its out)
RULE_BASES: dict[str, tuple[dict, np.ndarray]] = {
    "nee::conv2d_int8.out": ({"input": np.zeros((1, 4, 6, 6), _I8),
                              "weight": np.zeros((8, 4, 3, 3), _I8),
                              "bias": np.zeros(8, np.int32), "stride": (1, 1),
                              "padding": (1, 1), "dilation": (1, 1), "groups": 1,
                              "input_zero_point": 0, **_REQUANT}, np.zeros((1, 8, 6, 6), _I8)),
    "nee::linear_int8.out": ({"input": np.zeros((5, 16), _I8), "weight": np.zeros((8, 16), _I8),
                              "bias": np.zeros(8, np.int32), "input_zero_point": 0, **_REQUANT},
                             np.zeros((5, 8), _I8)),
    "nee::add_int8.out": ({"self": np.zeros((2, 3), _I8), "other": np.zeros(3, _I8),
                           "self_zero_point": 0, "other_zero_point": 0, "output_zero_point": 0,
                           "left_shift": 20, "self_multiplier": 1 << 30, "self_shift": 0,
                           "other_multiplier": 1 << 30, "other_shift": 0,
                           "output_multiplier": 1 << 30, "output_shift": 0,
                           "activation_min": -128, "activation_max": 127},
                          np.zeros((2, 3), _I8)),
    "nee::mul_int8.out": ({"self": np.zeros((2, 3), _I8), "other": np.zeros(3, _I8),
                           "self_zero_point": 0, "other_zero_point": 0, "output_zero_point": 0,
                           "output_multiplier": 1 << 30, "output_shift": 0,
                           "activation_min": -128, "activation_max": 127},
                          np.zeros((2, 3), _I8)),
    "nee::lookup_int8.out": ({"self": np.zeros((2, 3), _I8), "table": np.zeros(256, _I8)},
                             np.zeros((2, 3), _I8)),
    "nee::softmax_int8.out": ({"self": np.zeros((2, 3), _I8), "dim": 1,
                               "table": np.zeros(256, np.int32)}, np.zeros((2, 3), _I8)),
    "nee::mean_int8.out": ({"self": np.zeros((1, 3, 4, 4), _I8), "dim": (2, 3), "keepdim": True,
                            "input_zero_point": 0, "output_zero_point": 0,
                            "multiplier": 1 << 30, "shift": 0}, np.zeros((1, 3, 1, 1), _I8)),
    "nee::dequantize_per_channel.out": ({"input": np.zeros((3, 4), _I8),
                                         "scales": np.ones(4, np.float32), "zero_points": None,
                                         "axis": 1, "quant_min": -128, "quant_max": 127},
                                        np.zeros((3, 4), np.float32)),
}
# (kernel, argument changes) each refused at bind
RULE_BREAKS = [
    ("nee::conv2d_int8.out", {"bias": np.zeros(8, np.int64)}),
    ("nee::conv2d_int8.out", {"bias": np.zeros(7, np.int32)}),
    ("nee::conv2d_int8.out", {"weight": np.zeros((8, 3, 3, 3), _I8)}),
    ("nee::conv2d_int8.out", {"input": np.zeros((1, 4, 6, 6), np.float32)}),
    ("nee::conv2d_int8.out", {"output_multiplier": [1 << 30] * 3}),
    ("nee::conv2d_int8.out", {"activation_min": 100, "activation_max": 50}),
    ("nee::conv2d_int8.out", {"input_zero_point": 300}),
    ("nee::conv2d_int8.out", {"rounding": "float"}),
    ("nee::conv2d_int8.out", {"groups": 3}),
    ("nee::linear_int8.out", {"weight": np.zeros((8, 15), _I8)}),
    ("nee::linear_int8.out", {"rounding": "float"}),  # without effective_scale
    ("nee::linear_int8.out", {"bias": np.zeros(8, np.int64)}),
    ("nee::add_int8.out", {"other": np.zeros(3, np.int64)}),
    ("nee::add_int8.out", {"other": np.zeros(4, _I8)}),
    ("nee::add_int8.out", {"self_zero_point": 200}),
    ("nee::add_int8.out", {"rounding": "single"}),
    ("nee::add_int8.out", {"rounding": "xnnpack"}),  # its right shift of 0
    ("nee::add_int8.out", {"rounding": "xnnpack", "output_shift": 20, "self_multiplier": 1 << 22}),
    ("nee::mul_int8.out", {"rounding": "xnnpack", "effective_scale": -1.0}),
    ("nee::mul_int8.out", {"rounding": "xnnpack", "effective_scale": math.inf}),
    ("nee::lookup_int8.out", {"table": np.zeros(255, _I8)}),
    ("nee::lookup_int8.out", {"table": np.zeros(256, np.int32)}),
    ("nee::softmax_int8.out", {"table": np.zeros(256, np.float32)}),
    ("nee::softmax_int8.out", {"dim": 2}),
    ("nee::mean_int8.out", {"dim": (2, -2)}),
    ("nee::mean_int8.out", {"keepdim": False}),
    ("nee::dequantize_per_channel.out", {"scales": np.ones(3, np.float32)}),
    ("nee::dequantize_per_channel.out", {"axis": 2}),
]


@pytest.mark.parametrize("name", sorted(RULE_BASES))
def test_rule_accepts_the_base_call(name: str) -> None:
    args, out = RULE_BASES[name]
    KERNELS[name].bind({**args, "out": out})


@pytest.mark.parametrize(("name", "change"), RULE_BREAKS, ids=lambda v: v if isinstance(
    v, str) else ",".join(v))
def test_rule_refuses_at_bind(name: str, change: dict) -> None:
    """Operand dtypes and shapes against each other, per-channel lengths, int8 ranges."""
    args, out = RULE_BASES[name]
    with pytest.raises(ValueError):
        KERNELS[name].bind({**args, **change, "out": out})
