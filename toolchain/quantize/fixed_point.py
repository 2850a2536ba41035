"""The fixed-point parameters TFLite's int8 kernels derive at Prepare, for NEE's int8 kernels.

Scales are read as TFLite reads them from a .tflite file: float32, then widened to double only
where TFLite's C++ widens them (mixing float and double arithmetic exactly as it does is what makes
the multipliers bit-identical). Each ``*_requant`` function returns the non-tensor arguments of
one ``nee::*_int8.out`` kernel as a dict, the defaults reproducing LiteRT's reference kernels
(BUILTIN_REF). ``rounding`` is "double" (TFLite's reference MultiplyByQuantizedMultiplier) or
"single" (its TFLITE_SINGLE_ROUNDING build, TOSA); fully connected layers also have "float"
(see ``linear_requant``), and every kernel "xnnpack" (LiteRT's XNNPACK path: float32 scales,
``xnnpack_scales``; add/sub ``_xnnpack_add``). The ``*_table`` functions compute the tables of
``nee::lookup_int8.out`` and ``nee::softmax_int8.out``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
ADD_LEFT_SHIFT = 20  # TFLite's headroom shift of int8 ADD inputs


class Quant(NamedTuple):
    """Per-tensor affine quantization: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int


def per_tensor(quant: Any) -> Quant:
    """The per-tensor parameters of an IR ``toolchain.ir.Quant`` (its first scale and zero
    point)."""
    return Quant(quant.scale[0], quant.zero_point[0])


def f32(value: float) -> float:
    """``value`` rounded to float32 (as stored in a .tflite), as a Python float."""
    return float(np.float32(value))


def round_half_away(value: float) -> int:
    """C's std::round: to nearest, ties away from zero (exactly: value - trunc(value) and its
    double are exact in floating point, unlike value + 0.5)."""
    whole = math.trunc(value)
    return whole + math.trunc(2 * (value - whole))


def quantize_multiplier(real: float, rounding: str = "double") -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: (q, shift) with real ~= q * 2**(shift - 31), q in
    [2**30, 2**31) (0 for 0); a q rounding up to 2**31 halves it and bumps the shift; shifts
    below -31 flush to (0, 0); the single-rounding build caps the shift at 30."""
    if real == 0:
        return 0, 0
    fraction, shift = math.frexp(real)
    q = round_half_away(fraction * (1 << 31))
    if q == 1 << 31:
        q, shift = q // 2, shift + 1
    if shift < -31:
        return 0, 0
    if rounding == "single" and shift > 30:
        return (1 << 31) - 1, 30
    return q, shift


def quantize_value(real: float, q: Quant) -> int:
    """TFLite's Quantize(scale, zero_point, f) of kernel_util.cc: float32 division, std::round."""
    return q.zero_point + round_half_away(float(np.float32(real) / np.float32(q.scale)))


def quantized_activation_range(activation: str, scale: float, zero_point: int
                               ) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized for an int8 output: the int8 range clipped to
    the fused activation's (NONE, RELU, RELU6, RELU_N1_TO_1)."""
    bounds = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0),
              "RELU_N1_TO_1": (-1.0, 1.0)}[activation]
    q = Quant(scale, zero_point)
    lo, hi = (None if b is None else quantize_value(b, q) for b in bounds)
    return (INT8_MIN if lo is None else max(INT8_MIN, lo),
            INT8_MAX if hi is None else min(INT8_MAX, hi))


def _activation(activation: str, output: Quant) -> dict[str, int]:
    lo, hi = quantized_activation_range(activation, output.scale, output.zero_point)
    return {"activation_min": lo, "activation_max": hi}


def _multipliers(reals: Sequence[float], rounding: str) -> dict[str, list[int]]:
    pairs = [quantize_multiplier(r, rounding) for r in reals]
    return {"output_multiplier": [m for m, _ in pairs], "output_shift": [s for _, s in pairs]}


def channel_scales(input_scale: float, weight_scales: Sequence[float],
                   output_scale: float) -> list[float]:
    """Per-channel effective scales of a conv/FC: double(in) * double(w[c]) / double(out)
    (PopulateConvolutionQuantizationParams; FULLY_CONNECTED's per-channel Prepare and reference
    requantization)."""
    i, o = f32(input_scale), f32(output_scale)
    return [i * f32(w) / o for w in weight_scales]


def conv_requant(input: Quant, weight_scales: Sequence[float], output: Quant,
                 activation: str = "NONE", rounding: str = "double") -> dict[str, Any]:
    """``nee::conv2d_int8.out`` arguments (CONV_2D / DEPTHWISE_CONV_2D, symmetric weights; a
    single weight scale is per-tensor, broadcast over the output channels by the kernel).
    Rounding "xnnpack" rescales by float32 scales (``xnnpack_scales``), single-rounding
    multipliers beside them."""
    reals = channel_scales(input.scale, weight_scales, output.scale)
    args = {"input_zero_point": input.zero_point, "output_zero_point": output.zero_point,
            **_multipliers(reals, "double" if rounding == "double" else "single"),
            **_activation(activation, output), "rounding": rounding}
    if rounding == "xnnpack":
        args["effective_scale"] = xnnpack_scales(input, weight_scales, output)
    return args


def xnnpack_scales(input: Quant, weight_scales: Sequence[float],
                   output: Quant) -> list[float]:
    """XNNPACK's requantization scales of a conv/FC: float32 (in * w[c]) / out per channel."""
    products = np.float32(input.scale) * np.asarray(weight_scales, np.float32)
    return [float(v) for v in products / np.float32(output.scale)]


def linear_requant(input: Quant, weight_scales: Sequence[float], output: Quant,
                   activation: str = "NONE", rounding: str = "float") -> dict[str, Any]:
    """``nee::linear_int8.out`` arguments (FULLY_CONNECTED, symmetric weights).

    The multipliers are those of TFLite's Prepare: per channel as for convolution; per tensor
    from GetQuantizedConvolutionMultipler, whose input * weight product is float32. Rounding
    "float" (the default) requantizes as LiteRT's reference FULLY_CONNECTED does since 2025:
    round(acc * effective_scale) in double, from ``effective_scale``; "double"/"single" use the
    multipliers (about 1 output in 10**4 then differs by 1 from the reference)."""
    if len(weight_scales) == 1:
        product = float(np.float32(input.scale) * np.float32(weight_scales[0]))
        reals = [product / f32(output.scale)]
    else:
        reals = channel_scales(input.scale, weight_scales, output.scale)
    args = {"input_zero_point": input.zero_point, "output_zero_point": output.zero_point,
            **_multipliers(reals, "single" if rounding in ("single", "xnnpack") else "double"),
            **_activation(activation, output), "rounding": rounding}
    if rounding == "float":
        args["effective_scale"] = channel_scales(input.scale, weight_scales, output.scale)
    elif rounding == "xnnpack":
        args["effective_scale"] = xnnpack_scales(input, weight_scales, output)
    return args


def add_requant(self: Quant, other: Quant, output: Quant, activation: str = "NONE",
                scheme: str = "tflite") -> dict[str, Any]:
    """``nee::add_int8.out`` arguments. Scheme "tflite" (ADD's Prepare): both inputs rescaled to
    twice the larger input scale after a left shift of 20, then to the output scale. Scheme
    "xnnpack" (XNNPACK's qs8 add): each input's scale over the output's (float32) times 2**shift,
    rounded to even, with shift = 20 - the larger one's binary exponent; the kernel sums
    (q - zero_point) * multiplier and shifts right with rounding (``rounding`` "xnnpack")."""
    if scheme == "xnnpack":
        return _xnnpack_add(self, other, output, activation)
    twice_max = 2 * max(f32(self.scale), f32(other.scale))
    shifted_out = float(np.float32(1 << ADD_LEFT_SHIFT) * np.float32(output.scale))
    (m1, s1), (m2, s2), (mo, so) = (quantize_multiplier(r) for r in (
        f32(self.scale) / twice_max, f32(other.scale) / twice_max, twice_max / shifted_out))
    return {"self_zero_point": self.zero_point, "other_zero_point": other.zero_point,
            "output_zero_point": output.zero_point, "left_shift": ADD_LEFT_SHIFT,
            "self_multiplier": m1, "self_shift": s1, "other_multiplier": m2, "other_shift": s2,
            "output_multiplier": mo, "output_shift": so, **_activation(activation, output)}


def _xnnpack_add(self: Quant, other: Quant, output: Quant, activation: str) -> dict[str, Any]:
    scales = [np.float32(q.scale) / np.float32(output.scale) for q in (self, other)]
    shift = 21 - int(np.frexp(max(scales))[1])  # 20 - floor(log2(larger scale))
    m1, m2 = (int(np.rint(r * np.float32(2.0**shift))) for r in scales)
    return {"self_zero_point": self.zero_point, "other_zero_point": other.zero_point,
            "output_zero_point": output.zero_point, "left_shift": 0, "self_multiplier": m1,
            "self_shift": 0, "other_multiplier": m2, "other_shift": 0, "output_multiplier": 0,
            "output_shift": shift, **_activation(activation, output), "rounding": "xnnpack"}


def sub_requant(self: Quant, other: Quant, output: Quant, activation: str = "NONE",
                scheme: str = "tflite") -> dict[str, Any]:
    """``nee::sub_int8.out`` arguments: ADD's, the other input's multiplier negated (SUB's
    Prepare for int8, and XNNPACK's subtract)."""
    args = add_requant(self, other, output, activation, scheme)
    return {**args, "other_multiplier": -args["other_multiplier"]}


def mul_requant(self: Quant, other: Quant, output: Quant, activation: str = "NONE",
                scheme: str = "tflite") -> dict[str, Any]:
    """``nee::mul_int8.out`` arguments: s1 * s2 / s_out in float32 (MUL's Prepare), as a
    fixed-point multiplier (scheme "tflite") or as the float32 scale the product is multiplied
    by and rounded to even (scheme "xnnpack": XNNPACK's qs8 multiply)."""
    real = np.float32(self.scale) * np.float32(other.scale) / np.float32(output.scale)
    zero_points = {"self_zero_point": self.zero_point, "other_zero_point": other.zero_point,
                   "output_zero_point": output.zero_point}
    if scheme == "xnnpack":
        return {**zero_points, "output_multiplier": 0, "output_shift": 0,
                **_activation(activation, output), "rounding": "xnnpack",
                "effective_scale": float(real)}
    multiplier, shift = quantize_multiplier(float(real))
    return {**zero_points, "output_multiplier": multiplier, "output_shift": shift,
            **_activation(activation, output)}


def mean_requant(input: Quant, output: Quant, scheme: str = "tflite") -> dict[str, Any]:
    """``nee::mean_int8.out`` arguments: QuantizeMultiplier(double(in) / double(out)) of MEAN's
    Prepare; the kernel folds in 1 / count as TFLite's QuantizedMeanOrSum does at Eval. Scheme
    "xnnpack": in / out in float32 as ``effective_scale`` (the kernel divides it by the count
    in float32, as XNNPACK's qs8 mean)."""
    multiplier, shift = quantize_multiplier(f32(input.scale) / f32(output.scale))
    args = {"input_zero_point": input.zero_point, "output_zero_point": output.zero_point,
            "multiplier": multiplier, "shift": shift}
    if scheme == "xnnpack":
        ratio = np.float32(input.scale) / np.float32(output.scale)
        args |= {"rounding": "xnnpack", "effective_scale": float(ratio)}
    return args


# -- 256-entry tables for ``nee::lookup_int8.out`` (index: the int8 value's byte) ------------

INT8_VALUES = np.arange(INT8_MIN, INT8_MAX + 1)
TABLE_INDEX = INT8_VALUES.astype(np.int8).view(np.uint8)  # where each value's entry goes


def _table(values: np.ndarray) -> np.ndarray:
    """Results for INT8_VALUES (in order), clamped to int8, laid out as TFLite's LUTs."""
    table = np.empty(256, np.int8)
    table[TABLE_INDEX] = np.clip(values, INT8_MIN, INT8_MAX)
    return table


def float_table(fn: Any, input: Quant, output: Quant) -> np.ndarray:
    """TFLite's LUTPopulate<int8_t>: fn (float32 -> float32, vectorized) of each dequantized
    int8 value, requantized (times the float32 reciprocal of the output scale, std::round, +
    zero point in float32), clamped."""
    dequantized = np.float32(input.scale) * (INT8_VALUES - input.zero_point).astype(np.float32)
    scaled = np.asarray(fn(dequantized), np.float32) * (np.float32(1) / np.float32(output.scale))
    rounded = np.trunc(scaled) + np.trunc(2 * (scaled - np.trunc(scaled)))  # half away from 0
    return _table((rounded + np.float32(output.zero_point)).astype(np.int64))


SIGMOID_OUTPUT = Quant(1 / 256, -128)  # TFLite's int8 LOGISTIC requires the scale 1/256
TANH_OUTPUT = Quant(1 / 128, 0)  # what TFLite's converter gives int8 TANH


def sigmoid_table(input: Quant, output: Quant = SIGMOID_OUTPUT) -> np.ndarray:
    """LOGISTIC int8."""
    one = np.float32(1)
    return float_table(lambda x: one / (one + np.exp(-x)), input, output)


def tanh_table(input: Quant, output: Quant = TANH_OUTPUT) -> np.ndarray:
    """TANH int8."""
    return float_table(np.tanh, input, output)


def hardsigmoid_table(input: Quant, output: Quant) -> np.ndarray:
    """relu6(x + 3) / 6 in float32 (TFLite has no such op: NEE's own table)."""
    return float_table(lambda x: np.clip(x + np.float32(3), 0, 6) / np.float32(6), input, output)


def _srdhm(a: Any, b: Any, bits: int = 32) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int32 (or int16) values, vectorized:
    (a * b + 2**(bits-2)) >> (bits-1), which is its nudge-and-truncate, saturating min * min."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    low = -(1 << (bits - 1))
    product = (a * b + (1 << (bits - 2))) >> (bits - 1)
    return np.where((a == low) & (b == low), -low - 1, product)


def _rounding_divide(x: Any, exponent: int) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2**exponent, rounded half away from zero."""
    x = np.asarray(x, np.int64)
    return np.sign(x) * ((np.abs(x) + ((1 << exponent) >> 1)) >> exponent)


def _saturating_shift(x: Any, exponent: int, bits: int = 32) -> np.ndarray:
    """gemmlowp's SaturatingRoundingMultiplyByPOT for exponent > 0: x << exponent, saturated."""
    limit = 1 << (bits - 1)
    return np.clip(np.asarray(x, np.int64) << exponent, -limit, limit - 1)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier, then DownScaleInt32ToInt16Multiplier (rounded, capped at 2**15-1)."""
    multiplier, exponent = quantize_multiplier(real)
    if multiplier >= (1 << 31) - 1 - (1 << 15):
        return (1 << 15) - 1, exponent
    return (multiplier + (1 << 15)) >> 16, exponent


def hardswish_table(input: Quant, output: Quant) -> np.ndarray:
    """HARD_SWISH int8 (reference_ops::HardSwish and its Prepare, for all 256 inputs): the input
    on a 2**7 finer scale, times the output multiplier (int16); a "reluish" factor in [0, 1]
    from the same value times the multiplier for 3/32768, saturated; their product."""
    hires = np.float32(1 / 128) * np.float32(input.scale)
    out_m, out_e = _int16_multiplier(float(hires / np.float32(output.scale)))
    relu_m, relu_e = _int16_multiplier(float(hires / np.float32(3 / 32768)))
    if out_e > 0:
        raise ValueError("hardswish: TFLite requires output_scale >= input_scale / 128")
    x = (INT8_VALUES - input.zero_point) * (1 << 7)
    preshift = _srdhm(x, out_m, bits=16)
    reluish = x
    if relu_e > 0:
        reluish = _saturating_shift(reluish, relu_e - 1, bits=16)
    reluish = _srdhm(reluish, relu_m, bits=16)
    if relu_e > 0:
        reluish = _saturating_shift(reluish, 1, bits=16)
    if relu_e < 0:
        reluish = _rounding_divide(reluish, -relu_e)
    reluish = (reluish + (1 << 15)) >> 1
    product = reluish * preshift  # SaturatingDoublingHighMul: cannot saturate (reluish >= 0)
    value = np.sign(product) * (np.abs(product) >> 15)
    return _table(_rounding_divide(value, -out_e) + output.zero_point)


# -- SOFTMAX ---------------------------------------------------------------------------------

SOFTMAX_OUTPUT = Quant(1 / 256, -128)  # what TFLite's int8 SOFTMAX requires
SOFTMAX_DIFF_BITS = 5  # integer bits of the scaled input differences (Q5.26)


def _exp_near_zero(a: np.ndarray) -> np.ndarray:
    """gemmlowp's exp_on_interval_between_negative_one_quarter_and_0_excl (Q0.31): a Taylor
    expansion around -1/8."""
    x = a + (1 << 28)
    x2 = _srdhm(x, x)
    x3, x4 = _srdhm(x2, x), _srdhm(x2, x2)
    rest = _rounding_divide(_srdhm(_rounding_divide(x4, 2) + x3, 715827883) + x2, 1)
    return 1895147668 + _srdhm(1895147668, x + rest)


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))  # exp(-2**k) in Q0.31


def _exp_on_negative_values(a: np.ndarray) -> np.ndarray:
    """gemmlowp's exp_on_negative_values from Q5.26 to Q0.31: exp of a's remainder modulo 1/4,
    times exp(-2**k) for each bit k of the rest."""
    fractional = 31 - SOFTMAX_DIFF_BITS
    quarter = 1 << (fractional - 2)
    shifted = (a & (quarter - 1)) - quarter
    result = _exp_near_zero(_saturating_shift(shifted, SOFTMAX_DIFF_BITS))
    remainder = shifted - a
    for k, multiplier in _EXP_BARREL:
        result = np.where(remainder & (1 << (fractional + k)), _srdhm(result, multiplier), result)
    return np.where(a == 0, (1 << 31) - 1, result)


def softmax_table(input: Quant, beta: float = 1.0) -> np.ndarray:
    """``nee::softmax_int8.out``'s table (int32[256]): entry d is exp(-d * beta * input_scale)
    in Q0.31 as TFLite's int8 SOFTMAX computes it for an input d below its row's maximum, 0 for
    the differences it ignores (below diff_min). From PreprocessSoftmaxScaling (the multiplier
    of beta * input_scale * 2**26, capped at 2**31 - 1), CalculateInputRadius and
    MultiplyByQuantizedMultiplierGreaterThanOne."""
    real = min(f32(beta) * f32(input.scale) * (1 << (31 - SOFTMAX_DIFF_BITS)), (1 << 31) - 1.0)
    multiplier, left_shift = quantize_multiplier(real)
    radius = math.floor(((1 << SOFTMAX_DIFF_BITS) - 1) * (1 << (31 - SOFTMAX_DIFF_BITS))
                        / (1 << left_shift))
    diffs = -np.arange(256, dtype=np.int64)
    exps = _exp_on_negative_values(_srdhm(diffs * (1 << left_shift), multiplier))
    return np.where(diffs >= -radius, exps, 0).astype(np.int32)
