"""One-op .tflite oracles for the int8 kernels: random quantization, model building with
``toolchain.serialize.tflite``, running in LiteRT's reference kernels, exact comparison.

TFLite runs NHWC; NEE's kernels run NCHW: ``nhwc``/``nchw`` convert 4-D arrays, other ranks are
left alone. Scales are drawn as float32 values, so that the kernel arguments (computed by
``toolchain.quantize.fixed_point`` from the same numbers) and the .tflite agree exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tflite
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from kernel_harness import check_rules, peak_bytes

from runtime_py.kernels import KERNELS
from toolchain.quantize.fixed_point import Quant, f32
from toolchain.serialize.tflite import Options, TfliteWriter
from toolchain.serialize.tflite_program import window_padding

ACTIVATIONS = ("NONE", "RELU", "RELU6")


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if x.ndim == 4 else x


def nhwc_shape(shape: Sequence[int]) -> tuple[int, ...]:
    n, c, h, w = shape
    return n, h, w, c


def random_quant(rng: np.random.Generator, low: float = 0.005, high: float = 0.2) -> Quant:
    """A float32 scale drawn log-uniformly from [low, high) and a zero point in [-40, 40]."""
    return Quant(f32(np.exp(rng.uniform(np.log(low), np.log(high)))),
                 int(rng.integers(-40, 41)))


def random_int8(rng: np.random.Generator, shape: Sequence[int], low: int = -128) -> np.ndarray:
    return rng.integers(low, 128, tuple(shape), dtype=np.int8)


def one_op_model(builtin: int, inputs: Sequence[dict[str, Any]], output: dict[str, Any],
                 options: Options | None = None) -> bytes:
    """A model of one ``builtin`` op. ``inputs``/``output``: ``TfliteWriter.tensor`` keyword
    arguments; inputs with ``data`` are constants, the others are the model's inputs in order."""
    writer = TfliteWriter()
    indices = [writer.tensor(name=f"t{i}", **spec) for i, spec in enumerate(inputs)]
    out = writer.tensor(name="out", **output)
    writer.op(builtin, indices, [out], options)
    feeds = [i for i, spec in zip(indices, inputs, strict=True) if spec.get("data") is None]
    return writer.finish(feeds, [out])


def run_tflite(model: bytes, *inputs: np.ndarray,
               resolver: OpResolverType = OpResolverType.BUILTIN_REF) -> np.ndarray:
    """The model's single output on ``inputs``, in LiteRT's reference kernels by default."""
    interpreter = Interpreter(model_content=model, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs, strict=True):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


RUN_ALLOCATION_LIMIT = 8192  # bytes a prepared kernel's run may allocate: numpy's iterator
# buffers (the float convolution inside conv2d_int8 runs with 512-element ones), nothing sized
# by the data


def run_kernel(name: str, out_shape: Sequence[int], out_dtype: str = "int8",
               **args: Any) -> np.ndarray:
    """NEE kernel ``name`` on ``args`` into a fresh out (pre-filled with garbage), bound as the
    runtime binds it, with the workspace its ``scratch`` asks for; a prepared kernel is run
    twice, the second run allocating (nearly) nothing. Its rule refuses wrong outs
    (``check_rules``)."""
    kernel = KERNELS[name]
    out = np.full(tuple(out_shape), 99, out_dtype)
    if kernel.scratch is not None:
        args["scratch"] = np.zeros(kernel.scratch(**args), np.uint8)
    call = kernel.bind({**args, "out": out})
    call()
    if kernel.prepare is not None:
        peak = peak_bytes(call)
        assert peak < RUN_ALLOCATION_LIMIT, f"{name}: a run allocated {peak} bytes"
    check_rules(name, args, {"out": out})
    return out


def assert_exact(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    differ = actual != expected
    if actual.dtype.kind == "f":
        differ &= ~(np.isnan(actual) & np.isnan(expected))
    assert not differ.any(), (
        f"{what}: {int(differ.sum())} of {differ.size} elements differ, max |diff| "
        f"{np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max()}")


spatial_padding = window_padding  # TFLite's SAME/VALID for torch's padding (the writer's)


def random_window(rng: np.random.Generator, padding: str, dilated: bool) -> dict[str, tuple]:
    """Random 2-D window geometry (kernel, stride, dilation, padding, hw) whose torch padding is
    TFLite's "VALID", "SAME" (kernels of 3 or 5, half-kernel padding, odd sizes as strides of 2
    need) or "other" (1 up to half the kernel: a PAD op in TFLite)."""
    stride = tuple(int(s) for s in rng.integers(1, 3, 2))
    dilation = tuple(int(d) for d in rng.integers(1, 3, 2)) if dilated else (1, 1)
    if padding == "SAME":
        kernel = tuple(int(k) for k in rng.choice([3, 5], 2))
        pads = tuple(d * (k - 1) // 2 for k, d in zip(kernel, dilation, strict=True))
        hw = tuple(2 * int(v) + 1 for v in rng.integers(3, 6, 2))
    else:
        kernel = tuple(int(k) for k in rng.integers(2, 5, 2))
        pads = (0, 0) if padding == "VALID" else tuple(int(rng.integers(1, k // 2 + 1))
                                                        for k in kernel)
        hw = tuple(int(v) for v in rng.integers(7, 12, 2))
    return {"kernel": kernel, "stride": stride, "dilation": dilation, "padding": pads, "hw": hw}


def builtin(name: str) -> int:
    return getattr(tflite.BuiltinOperator, name)
