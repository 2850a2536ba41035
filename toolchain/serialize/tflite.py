"""Write .tflite models: one subgraph, built with the ``tflite`` package's flatbuffer builders.

``TfliteWriter`` collects tensors (shape, dtype, constant data, per-tensor or per-axis affine
quantization) and builtin operators with their options, and ``finish`` writes a schema-v3 model:
buffer 0 is the empty sentinel TFLite requires (activations point at it), every constant has its
own 16-byte-aligned buffer, operator codes are deduplicated with ``builtin_code`` and
``deprecated_builtin_code`` (capped at 127, PLACEHOLDER_FOR_GREATER_OP_CODES) both set, and the
file identifier is "TFL3". Tensors are described in TFLite's layouts (NHWC activations, OHWI
convolution weights, 1HWO depthwise weights): converting an NCHW graph is the caller's job.
Each operator's options table has a function here (``conv2d_options`` ...) returning the
``Options`` that ``TfliteWriter.op`` takes; ops without options take none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import flatbuffers
import numpy as np
import tflite

SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"
BUFFER_ALIGN = 16
_DEPRECATED_CODE_LIMIT = 127  # deprecated_builtin_code of every op with a larger code


@dataclass(frozen=True)
class Options:
    """A builtin options table: its BuiltinOptions union type and the function building it."""

    kind: int
    build: Callable[[flatbuffers.Builder], int]


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: int
    buffer: int
    scale: tuple[float, ...] | None
    zero_point: tuple[int, ...] | None
    axis: int


@dataclass
class _Operator:
    opcode: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: Options | None


@dataclass
class TfliteWriter:
    """One subgraph under construction; ``tensor`` and ``op`` add to it, ``finish`` writes it."""

    description: str = "NEE"
    _tensors: list[_Tensor] = field(default_factory=list, init=False)
    _buffers: list[bytes] = field(default_factory=lambda: [b""], init=False)
    _opcodes: dict[tuple[int, int], int] = field(default_factory=dict, init=False)
    _operators: list[_Operator] = field(default_factory=list, init=False)

    def tensor(self, name: str, shape: Sequence[int], dtype: str | np.dtype,
               data: np.ndarray | None = None, scale: float | Sequence[float] | None = None,
               zero_point: int | Sequence[int] | None = None, axis: int | None = None) -> int:
        """Add a tensor, constant if ``data`` is given; returns its index. Quantization: a
        ``scale`` (per tensor, or a sequence along ``axis``) and ``zero_point`` (default 0,
        broadcast to the scales)."""
        buffer = 0
        if data is not None:
            array = np.asarray(data, dtype=dtype)
            if array.shape != tuple(shape):
                raise ValueError(f"{name}: data of shape {array.shape}, not {tuple(shape)}")
            self._buffers.append(array.astype(array.dtype.newbyteorder("<")).tobytes())
            buffer = len(self._buffers) - 1
        scales = zero_points = None
        if scale is not None:
            scales = tuple(map(float, np.atleast_1d(scale)))
            zero_points = tuple(map(int, np.broadcast_to(
                0 if zero_point is None else zero_point, len(scales))))
        self._tensors.append(_Tensor(name, tuple(shape), _tensor_type(dtype), buffer, scales,
                                     zero_points, axis or 0))
        return len(self._tensors) - 1

    @property
    def tensor_names(self) -> list[str]:
        """Names of the tensors added so far, by index."""
        return [t.name for t in self._tensors]

    def op(self, builtin: int, inputs: Sequence[int], outputs: Sequence[int],
           options: Options | None = None, version: int = 1) -> None:
        """Add a builtin operator (a ``tflite.BuiltinOperator`` code) on tensor indices; -1 is
        an omitted optional input."""
        opcode = self._opcodes.setdefault((builtin, version), len(self._opcodes))
        self._operators.append(_Operator(opcode, tuple(inputs), tuple(outputs), options))

    def finish(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        """The model with these subgraph inputs and outputs, as .tflite bytes."""
        b = flatbuffers.Builder(1024)
        buffers = [_buffer(b, data) for data in self._buffers]
        tensors = [_tensor(b, t) for t in self._tensors]
        operators = [_operator(b, op) for op in self._operators]
        opcodes = [_opcode(b, code, version) for code, version in self._opcodes]
        subgraph_fields = [(tflite.SubGraphAddTensors, _offsets(b, tensors)),
                           (tflite.SubGraphAddInputs, _int32s(b, inputs)),
                           (tflite.SubGraphAddOutputs, _int32s(b, outputs)),
                           (tflite.SubGraphAddOperators, _offsets(b, operators)),
                           (tflite.SubGraphAddName, b.CreateString("main"))]
        tflite.SubGraphStart(b)
        for add, value in subgraph_fields:
            add(b, value)
        subgraph = tflite.SubGraphEnd(b)
        model_fields = [(tflite.ModelAddOperatorCodes, _offsets(b, opcodes)),
                        (tflite.ModelAddSubgraphs, _offsets(b, [subgraph])),
                        (tflite.ModelAddDescription, b.CreateString(self.description)),
                        (tflite.ModelAddBuffers, _offsets(b, buffers))]
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, SCHEMA_VERSION)
        for add, value in model_fields:
            add(b, value)
        b.Finish(tflite.ModelEnd(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())


def _tensor_type(dtype: str | np.dtype) -> int:
    return getattr(tflite.TensorType, np.dtype(dtype).name.upper())


def _offsets(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    """A vector of table offsets."""
    b.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        b.PrependUOffsetTRelative(offset)
    return b.EndVector()


def _int32s(b: flatbuffers.Builder, values: Sequence[int]) -> int:
    return b.CreateNumpyVector(np.asarray(values, np.int32))


def _buffer(b: flatbuffers.Builder, data: bytes) -> int:
    vector = None
    if data:
        b.StartVector(1, len(data), BUFFER_ALIGN)
        b.head -= len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        vector = b.EndVector()
    tflite.BufferStart(b)
    if vector is not None:
        tflite.BufferAddData(b, vector)
    return tflite.BufferEnd(b)


def _quantization(b: flatbuffers.Builder, t: _Tensor) -> int:
    scale = b.CreateNumpyVector(np.asarray(t.scale, np.float32))
    zero_point = b.CreateNumpyVector(np.asarray(t.zero_point, np.int64))
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, scale)
    tflite.QuantizationParametersAddZeroPoint(b, zero_point)
    tflite.QuantizationParametersAddQuantizedDimension(b, t.axis)
    return tflite.QuantizationParametersEnd(b)


def _tensor(b: flatbuffers.Builder, t: _Tensor) -> int:
    name = b.CreateString(t.name)
    shape = _int32s(b, t.shape)
    quantization = None if t.scale is None else _quantization(b, t)
    tflite.TensorStart(b)
    tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, t.dtype)
    tflite.TensorAddBuffer(b, t.buffer)
    tflite.TensorAddName(b, name)
    if quantization is not None:
        tflite.TensorAddQuantization(b, quantization)
    return tflite.TensorEnd(b)


def _operator(b: flatbuffers.Builder, op: _Operator) -> int:
    inputs, outputs = _int32s(b, op.inputs), _int32s(b, op.outputs)
    options = None if op.options is None else op.options.build(b)
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, op.opcode)
    tflite.OperatorAddInputs(b, inputs)
    tflite.OperatorAddOutputs(b, outputs)
    if op.options is not None:
        tflite.OperatorAddBuiltinOptionsType(b, op.options.kind)
        tflite.OperatorAddBuiltinOptions(b, options)
    return tflite.OperatorEnd(b)


def _opcode(b: flatbuffers.Builder, code: int, version: int) -> int:
    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, _DEPRECATED_CODE_LIMIT))
    tflite.OperatorCodeAddBuiltinCode(b, code)
    tflite.OperatorCodeAddVersion(b, version)
    return tflite.OperatorCodeEnd(b)


def _options(table: str, **fields: int) -> Options:
    """The options table ``table`` (e.g. "Conv2DOptions") with these fields (schema names in
    CamelCase, e.g. StrideH); unset fields keep the schema defaults."""

    def build(b: flatbuffers.Builder) -> int:
        getattr(tflite, f"{table}Start")(b)
        for name, value in fields.items():
            getattr(tflite, f"{table}Add{name}")(b, value)
        return getattr(tflite, f"{table}End")(b)

    return Options(getattr(tflite.BuiltinOptions, table), build)


def _activation(name: str) -> int:
    """A fused activation: NONE, RELU, RELU_N1_TO_1, RELU6, TANH."""
    return getattr(tflite.ActivationFunctionType, name)


def _padding(name: str) -> int:
    return getattr(tflite.Padding, name)


def conv2d_options(stride: Sequence[int] = (1, 1), dilation: Sequence[int] = (1, 1),
                   padding: str = "VALID", activation: str = "NONE") -> Options:
    """CONV_2D: (h, w) stride and dilation, SAME/VALID padding, fused activation."""
    return _options("Conv2DOptions", Padding=_padding(padding), StrideH=stride[0],
                    StrideW=stride[1], DilationHFactor=dilation[0], DilationWFactor=dilation[1],
                    FusedActivationFunction=_activation(activation))


def depthwise_conv2d_options(depth_multiplier: int, stride: Sequence[int] = (1, 1),
                             dilation: Sequence[int] = (1, 1), padding: str = "VALID",
                             activation: str = "NONE") -> Options:
    """DEPTHWISE_CONV_2D: as CONV_2D, plus output channels per input channel."""
    return _options("DepthwiseConv2DOptions", Padding=_padding(padding), StrideH=stride[0],
                    StrideW=stride[1], DilationHFactor=dilation[0], DilationWFactor=dilation[1],
                    DepthMultiplier=depth_multiplier,
                    FusedActivationFunction=_activation(activation))


def fully_connected_options(activation: str = "NONE", keep_num_dims: bool = False) -> Options:
    """FULLY_CONNECTED: fused activation; keep_num_dims keeps the input's leading dims (else
    the output is 2-D)."""
    return _options("FullyConnectedOptions", FusedActivationFunction=_activation(activation),
                    KeepNumDims=keep_num_dims)


def pool2d_options(kernel: Sequence[int], stride: Sequence[int], padding: str = "VALID",
                   activation: str = "NONE") -> Options:
    """AVERAGE_POOL_2D / MAX_POOL_2D: (h, w) window and stride."""
    return _options("Pool2DOptions", Padding=_padding(padding), StrideH=stride[0],
                    StrideW=stride[1], FilterHeight=kernel[0], FilterWidth=kernel[1],
                    FusedActivationFunction=_activation(activation))


def concatenation_options(axis: int, activation: str = "NONE") -> Options:
    return _options("ConcatenationOptions", Axis=axis,
                    FusedActivationFunction=_activation(activation))


def add_options(activation: str = "NONE") -> Options:
    return _options("AddOptions", FusedActivationFunction=_activation(activation))


def sub_options(activation: str = "NONE") -> Options:
    return _options("SubOptions", FusedActivationFunction=_activation(activation))


def mul_options(activation: str = "NONE") -> Options:
    return _options("MulOptions", FusedActivationFunction=_activation(activation))


def reducer_options(keep_dims: bool) -> Options:
    """MEAN, SUM, REDUCE_MAX ... (the axes are an int32 input tensor)."""
    return _options("ReducerOptions", KeepDims=keep_dims)


def pad_options() -> Options:
    """PAD (the paddings are an int32 [rank, 2] input tensor)."""
    return _options("PadOptions")


def softmax_options(beta: float = 1.0) -> Options:
    return _options("SoftmaxOptions", Beta=beta)


def gelu_options(approximate: bool) -> Options:
    """GELU: the tanh approximation or the exact (erf) form."""
    return _options("GeluOptions", Approximate=approximate)


def batch_matmul_options(adj_y: bool = False) -> Options:
    """BATCH_MATMUL: [..., M, K] @ [..., K, N], or @ [..., N, K] transposed with ``adj_y``."""
    return _options("BatchMatMulOptions", AdjY=adj_y)
