"""One kernel list for every build on a board: NEE's (op, dtype) pairs written as ExecuTorch's
``selected_operators.yaml`` and as a TFLite Micro op-resolver header.

ExecuTorch's codegen reads ``selected_operators.yaml`` (the format its
``codegen/tools/gen_oplist.py`` writes): operators by ATen out-variant name, with kernel keys
``v1/<ScalarType>;`` for the dtypes used. ``nee::`` operators are NEE's own (fused calls, int8
kernels): an ExecuTorch build would need them as custom kernels, so they are listed too.

TFLite Micro registers only the builtins a model uses with ``MicroMutableOpResolver<N>``. The
header registers the builtins NEE's TFLite writer (``toolchain/serialize/tflite_program.py``)
can emit for the listed kernels: a superset of what one model needs (a convolution may become
CONV_2D or DEPTHWISE_CONV_2D, with or without a PAD), plus the layout conversions the writer
inserts between NEE's and TFLite's layouts, and ``AddEthosU()`` for NPU partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# ExecuTorch's ScalarType codes (runtime/core/portable_type/scalar_type.h).
ET_SCALAR_TYPES = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5,
                   "float32": 6, "float64": 7, "bool": 11}

# TFLite builtins the TFLite writer emits for each NEE kernel it converts.
# A float activation TFLite cannot fuse is an op of its own after the convolution or linear.
_ACTIVATIONS = ("HARD_SWISH", "LOGISTIC", "TANH", "GELU", "ADD", "MUL")
_CONV = ("CONV_2D", "DEPTHWISE_CONV_2D", "PAD", *_ACTIVATIONS)
_MATMUL = ("FULLY_CONNECTED", *_ACTIVATIONS)
TFLITE_BUILTINS: dict[str, tuple[str, ...]] = {
    "nee::quantize_per_tensor.out": ("QUANTIZE",),
    "nee::dequantize_per_tensor.out": ("DEQUANTIZE",),
    "nee::conv2d_int8.out": _CONV,
    "aten::convolution.out": _CONV,
    "nee::convolution_act.out": _CONV,
    "nee::linear_int8.out": _MATMUL,
    "aten::addmm.out": _MATMUL,
    "aten::mm.out": _MATMUL,
    "nee::addmm_act.out": _MATMUL,
    "nee::mm_act.out": _MATMUL,
    "nee::add_int8.out": ("ADD",),
    "nee::sub_int8.out": ("SUB",),
    "aten::add.out": ("ADD",),
    "aten::add.Scalar_out": ("ADD",),
    "aten::sub.out": ("SUB",),
    "aten::sub.Scalar_out": ("SUB",),
    "nee::mul_int8.out": ("MUL",),
    "aten::mul.out": ("MUL",),
    "aten::mul.Scalar_out": ("MUL",),
    "nee::avg_pool2d_int8.out": ("AVERAGE_POOL_2D", "PAD"),
    "aten::avg_pool2d.out": ("AVERAGE_POOL_2D", "PAD"),
    "nee::max_pool2d.out": ("MAX_POOL_2D", "PAD", "PADV2"),
    "nee::mean_int8.out": ("MEAN",),
    "aten::mean.out": ("MEAN",),
    "nee::softmax_int8.out": ("SOFTMAX",),
    "aten::_softmax.out": ("SOFTMAX",),
    "nee::lookup_int8.out": ("HARD_SWISH", "LOGISTIC", "TANH"),
    "aten::cat.out": ("CONCATENATION",),
    "aten::clone.out": (),
    "aten::relu.out": ("RELU",),
    "aten::hardtanh.out": ("RELU6", "RELU_N1_TO_1"),
    "aten::sigmoid.out": ("LOGISTIC",),
    "aten::tanh.out": ("TANH",),
    "aten::hardswish.out": ("HARD_SWISH",),
    "aten::hardsigmoid.out": ("ADD", "MUL"),
    "aten::gelu.out": ("GELU",),
    "aten::silu.out": ("LOGISTIC", "MUL"),
    "aten::rsqrt.out": ("RSQRT",),
    "aten::neg.out": ("NEG",),
    "aten::pow.Tensor_Scalar_out": ("MUL", "SQRT", "RSQRT"),
    "aten::bmm.out": ("BATCH_MATMUL",),
    "aten::where.self_out": ("SELECT_V2",),
    "nee::scaled_dot_product_attention.out": ("MUL", "BATCH_MATMUL", "ADD", "SOFTMAX"),
    "aten::native_layer_norm.out": ("MEAN", "SUB", "MUL", "ADD", "RSQRT"),
    "nee::gru_cell.out": ("SLICE", "ADD", "LOGISTIC", "MUL", "TANH", "SUB"),
    "nee::lstm_cell.out": ("SLICE", "LOGISTIC", "TANH", "MUL", "ADD"),
}
LAYOUT_BUILTINS = ("RESHAPE", "TRANSPOSE", "SLICE", "BROADCAST_TO")

# MicroMutableOpResolver's Add* method per builtin; RELU_N1_TO_1 has no TFLite Micro kernel.
TFLM_METHODS = {
    "ADD": "AddAdd", "AVERAGE_POOL_2D": "AddAveragePool2D", "BROADCAST_TO": "AddBroadcastTo",
    "CONCATENATION": "AddConcatenation", "CONV_2D": "AddConv2D",
    "DEPTHWISE_CONV_2D": "AddDepthwiseConv2D", "DEQUANTIZE": "AddDequantize",
    "FULLY_CONNECTED": "AddFullyConnected", "HARD_SWISH": "AddHardSwish",
    "LOGISTIC": "AddLogistic", "MAX_POOL_2D": "AddMaxPool2D", "MEAN": "AddMean",
    "MUL": "AddMul", "PAD": "AddPad", "PADV2": "AddPadV2", "QUANTIZE": "AddQuantize",
    "RELU": "AddRelu", "RELU6": "AddRelu6", "RESHAPE": "AddReshape", "SLICE": "AddSlice",
    "SOFTMAX": "AddSoftmax", "SUB": "AddSub", "TANH": "AddTanh", "TRANSPOSE": "AddTranspose",
    "BATCH_MATMUL": "AddBatchMatMul", "GELU": "AddGelu", "RSQRT": "AddRsqrt",
    "SELECT_V2": "AddSelectV2", "NEG": "AddNeg", "SQRT": "AddSqrt",
}


def executorch_yaml(kernels: Iterable[tuple[str, str]], sources: Sequence[str]) -> str:
    """``selected_operators.yaml`` for ``kernels`` ((op, dtype) pairs) used by ``sources``."""
    by_op: dict[str, set[str]] = {}
    for op, dtype in kernels:
        by_op.setdefault(op, set()).add(dtype)
    lines = [f"# ExecuTorch selective build: the operators of {', '.join(sources)}",
             "# (written by nee-build; nee:: operators are NEE's own, custom kernels there)",
             "build_features: []", "custom_classes: []", "et_kernel_metadata:"]
    for op in sorted(by_op):
        lines.append(f"  {op}:")
        lines += [f"  - v1/{ET_SCALAR_TYPES[d]};" for d in sorted(by_op[op])]
    lines += ["include_all_non_op_selectives: false", "include_all_operators: false",
              "kernel_metadata: {}", "operators:"]
    for op in sorted(by_op):
        lines += [f"  {op}:", "    debug_info:", *(f"    - {s}" for s in sources),
                  "    include_all_overloads: false", "    is_root_operator: true",
                  "    is_used_for_training: false"]
    return "\n".join(lines) + "\n"


def tflite_builtins(kernels: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """The TFLite builtins the writer may emit for ``kernels`` (layout ones included when
    any kernel converts), and the ops it cannot write."""
    ops = {op for op, _ in kernels}
    builtins = {b for op in ops for b in TFLITE_BUILTINS.get(op, ())}
    if ops & TFLITE_BUILTINS.keys():
        builtins.update(LAYOUT_BUILTINS)
    return sorted(builtins), sorted(ops - TFLITE_BUILTINS.keys())


def tflm_resolver(kernels: Iterable[tuple[str, str]], sources: Sequence[str],
                  ethos_u: bool) -> str:
    """A C++ header registering in a ``MicroMutableOpResolver`` the builtins ``kernels`` may
    need (``AddEthosU()`` too with NPU partitions)."""
    builtins, without = tflite_builtins(kernels)
    calls = [TFLM_METHODS[b] for b in builtins if b in TFLM_METHODS]
    calls += ["AddEthosU"] if ethos_u else []
    lines = [f"// TFLite Micro op resolver for {', '.join(sources)} (written by nee-build).",
             "// Builtins NEE's TFLite writer may emit for these kernels, layout conversions",
             "// included: a superset of what one model needs.",
             *(f"// No TFLite Micro kernel: {b}" for b in builtins if b not in TFLM_METHODS),
             *(f"// No TFLite builtin (NEE runtime only): {op}" for op in without),
             "#pragma once", '#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"', "",
             f"using NeeOpResolver = tflite::MicroMutableOpResolver<{max(len(calls), 1)}>;", "",
             "inline TfLiteStatus RegisterNeeOps(NeeOpResolver& resolver) {",
             *(f"  TF_LITE_ENSURE_STATUS(resolver.{call}());" for call in calls),
             "  return kTfLiteOk;", "}"]
    return "\n".join(lines) + "\n"
