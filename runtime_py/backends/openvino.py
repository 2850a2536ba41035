"""The OpenVINO backend: another engine for the XNNPACK delegate's float .tflite partitions.

A bundle exported for a board whose recipe names ``cpu_delegate = "xnnpack"`` holds its
partitions as .tflite models (payload ``model``, specs ``format = "tflite"``). LiteRT runs them
by default (``runtime_py.backends.xnnpack``); this backend runs the same payloads with
OpenVINO's CPU plugin instead, chosen at load: ``Program.load(path, {"xnnpack": OpenVino()})``.
Which engine is faster depends on the model and the machine (bench/latency.py --openvino times
both): on one x86 machine OpenVINO ran resnet18 faster than LiteRT and small models slower.

At load the payload is parsed by OpenVINO's TFLite frontend (from a temporary ``.tflite`` file:
that frontend reads only named files), its tensors are checked against the caller's
``max_arena_bytes``, and it is compiled for float32 arithmetic (OpenVINO would otherwise pick
bfloat16 or float16 where the CPU has them) with the program's threads (where that is more than
1, a second time with 1 thread: the program's governor switches between the two) and no core
pinning; the partition's arena views are bound as its input and output tensors, so a run copies
nothing, and it is run once. Only float partitions: OpenVINO's int8 arithmetic is not TFLite's
(its rounding differs), so a partition with quantized tensors is refused at load. Needs ``pip
install 'nee[openvino]'``.
"""

from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime_py.backends.tflite_io import check_io, check_memory, refused
from runtime_py.errors import BundleError
from runtime_py.kernels import Bound
from runtime_py.threads import per_count

if TYPE_CHECKING:
    from runtime_py.backends import Partition

ENGINE = "OpenVINO"
QUANTIZED = {"i8", "u8", "i4", "u4"}  # element types of TFLite's quantized tensors


class OpenVino:
    """Runs float .tflite partitions with OpenVINO's CPU plugin (module docstring)."""

    label = "OpenVINO CPU"

    @functools.cached_property
    def core(self) -> Any:
        """The one OpenVINO ``Core`` of this backend's partitions."""
        import openvino as ov

        return ov.Core()

    def prepare(self, partition: Partition) -> Bound:
        """The compiled partition bound to its arena views, run once (a payload OpenVINO
        refuses or cannot run, quantized tensors, or tensors over the caller's memory limit
        are a BundleError here, not at a run); with more than 1 thread, compiled once per
        count the program's governor switches between (``per_count``)."""
        where = f"partition {partition.index} ({partition.backend})"
        if partition.specs.get("format") != "tflite":
            raise BundleError(f"{where} specs", "format 'tflite'",
                              repr(partition.specs.get("format")), "give OpenVino only the "
                              "xnnpack delegate's partitions: {'xnnpack': OpenVino()}")
        try:
            model = _read(self.core, partition.payload.get("model"))
            _check_model(where, model, partition)
            _check_contiguous(where, partition)
        except (TypeError, ValueError, RuntimeError) as e:
            raise refused(where, ENGINE, e) from e
        return per_count(partition.threads,
                         functools.partial(self._compiled_run, where, model, partition))

    def _compiled_run(self, where: str, model: Any, partition: Partition, threads: int
                      ) -> Bound:
        """``prepare``'s run with ``threads`` threads."""
        import openvino as ov

        try:
            compiled = self.core.compile_model(model, "CPU", _config(threads))
            request = compiled.create_infer_request()
            for k, view in enumerate(partition.inputs):
                request.set_input_tensor(k, ov.Tensor(view, shared_memory=True))
            for k, view in enumerate(partition.outputs):
                request.set_output_tensor(k, ov.Tensor(view, shared_memory=True))
            request.infer()
        except (TypeError, ValueError, RuntimeError) as e:
            raise refused(where, ENGINE, e) from e
        infer = request.infer

        def run() -> None:
            try:
                infer()
            except RuntimeError as e:
                raise refused(where, ENGINE, e) from e

        return run


def _config(threads: int) -> dict[str, Any]:
    """Float32 arithmetic, ``threads`` threads, one latency-bound stream, no core pinning (the
    device runs other work: the runtime's thread policy, runtime_py/threads.py)."""
    return {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "ENABLE_CPU_PINNING": False}


def _read(core: Any, payload: np.ndarray | None) -> Any:
    """The OpenVINO model of a .tflite payload, through a temporary file."""
    if payload is None:
        raise ValueError("no payload 'model'")
    with tempfile.TemporaryDirectory(prefix="nee-openvino-") as folder:
        path = Path(folder) / "partition.tflite"
        path.write_bytes(payload)
        return core.read_model(path)


def _check_model(where: str, model: Any, partition: Partition) -> None:
    """No quantized tensors, within the memory limit, and inputs and outputs as the arena's."""
    if quantized := _quantized(model):
        raise BundleError(f"{where} tensors", "float partitions only (OpenVINO does not "
                          "compute TFLite's int8 arithmetic)",
                          f"quantized tensors ({', '.join(quantized)})",
                          "run int8 partitions with the default xnnpack backend (LiteRT)")
    # before compiling, OpenVINO bounds some shapes (a Slice's) rather than fixing them: their
    # upper bounds count (an unbounded dimension counts 2^63 - 1)
    check_memory(where, sum(math.prod(port.get_partial_shape().get_max_shape())
                            * port.get_element_type().size
                            for op in model.get_ordered_ops() for port in op.outputs()),
                 partition.memory_limit)
    for role, ports, views in (("input", model.inputs, partition.inputs),
                               ("output", model.outputs, partition.outputs)):
        check_io(where, role, [(tuple(port.get_shape()), np.dtype(port.get_element_type()
                                                                  .to_dtype()))
                               for port in ports], views)


def _quantized(model: Any) -> list[str]:
    """The quantized element types and FakeQuantize ops (TFLite's quantization, as OpenVINO's
    frontend reads it) in ``model``."""
    found = set()
    for op in model.get_ordered_ops():
        if op.get_type_name() == "FakeQuantize":
            found.add("FakeQuantize")
        found |= {port.get_element_type().get_type_name() for port in op.outputs()} & QUANTIZED
    return sorted(found)


def _check_contiguous(where: str, partition: Partition) -> None:
    """OpenVINO shares only contiguous memory (it would copy any other view, and write outputs
    to the copy)."""
    strided = [k for k, view in enumerate([*partition.inputs, *partition.outputs])
               if not view.flags.c_contiguous]
    if strided:
        raise BundleError(f"{where} inputs and outputs", "contiguous arena buffers",
                          f"strided buffers at positions {strided}", "export the bundle again")
