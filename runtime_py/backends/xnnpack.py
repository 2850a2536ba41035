"""The XNNPACK backend: a partition written as .tflite (payload ``model``), run by ai-edge-litert's
interpreter, which applies XNNPACK to what it supports (and TFLite's own kernels to the rest).

The interpreter is made once per partition at load (twice where the program may use more than
1 thread: XNNPACK's pool is fixed when the interpreter is made, and the program's governor
switches between 1 thread and its most), with its tensors allocated (within the caller's
``max_arena_bytes``, checked before LiteRT allocates), and invoked once there, so a
payload LiteRT refuses or cannot run is a BundleError at load; a run copies
the partition's inputs from the arena into numpy views of LiteRT's input buffers (taken once, at
load), invokes the model and copies its outputs back from views of its output buffers. The
backend is registered only where ai-edge-litert is installed (``pip install 'nee[xnnpack]'``);
elsewhere a bundle exported with a CPU fallback runs the partitions on the numpy kernels.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime_py.backends.tflite_io import check_io, check_memory, refused
from runtime_py.kernels import Bound
from runtime_py.kernels._common import copier
from runtime_py.threads import per_count

if TYPE_CHECKING:
    from runtime_py.backends import Partition

PACKAGE = "ai_edge_litert"  # the backend is shipped only where this imports
ENGINE = "LiteRT"


class Xnnpack:
    """Runs .tflite partitions in LiteRT's interpreter, with as many threads as the program's
    policy chooses for the run (1, or the most it may use: ``Program.load(threads=N)`` or the
    board recipe's; XNNPACK's own thread pool)."""

    label = "XNNPACK (ai-edge-litert)"

    def prepare(self, partition: Partition) -> Bound:
        """The interpreter of the partition's model, checked against its arena I/O and run once
        (a model LiteRT refuses, cannot run, or whose tensors exceed the caller's memory limit
        is a BundleError here, not at a run); with more than 1 thread, one interpreter per
        count the program's governor switches between (``per_count``), both on one copy of
        the model."""
        where = f"partition {partition.index} ({partition.backend})"
        try:
            model = bytes(partition.payload.get("model"))
        except TypeError as e:  # no payload "model"
            raise refused(where, ENGINE, e) from e
        return per_count(partition.threads,
                         functools.partial(_interpreter_run, where, model, partition))


def _interpreter_run(where: str, model: bytes, partition: Partition, threads: int) -> Bound:
    """``Xnnpack.prepare`` with ``threads`` threads."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        interpreter = Interpreter(model_content=model, num_threads=threads)
        check_memory(where, _tensor_bytes(interpreter), partition.memory_limit)
        interpreter.allocate_tensors()
        ins = _indices(where, "input", interpreter.get_input_details(), partition.inputs)
        outs = _indices(where, "output", interpreter.get_output_details(), partition.outputs)
        interpreter.invoke()
    except (TypeError, ValueError, RuntimeError) as e:  # UnicodeDecodeError is a ValueError
        raise refused(where, ENGINE, e) from e
    copies_in = [copier(interpreter.tensor(k)(), view)
                 for k, view in zip(ins, partition.inputs, strict=True)]
    copies_out = [copier(view, interpreter.tensor(k)())
                  for k, view in zip(outs, partition.outputs, strict=True)]
    # ``Interpreter.invoke`` refuses to run while views of LiteRT's buffers are alive, as they
    # would dangle if its tensors were allocated again; nothing allocates them after this, so
    # the views stay valid and the run calls the wrapped interpreter's Invoke (of the pinned
    # ai-edge-litert): 2 us a run less than set_tensor, invoke and get_tensor (a copy) on cnn's
    # 75 us. The run reaches it through ``interpreter``, which must live as long as the run: it
    # holds the model's bytes, which the wrapped interpreter does not keep alive though its
    # constant tensors point into them (a transformer's partition ran to NaNs once they were
    # freed and reused).

    def run() -> None:
        for copy in copies_in:
            copy()
        try:
            interpreter._interpreter.Invoke()
        except (RuntimeError, ValueError) as e:
            raise refused(where, ENGINE, e) from e
        for copy in copies_out:
            copy()

    return run


def _tensor_bytes(interpreter: Any) -> int:
    """The bytes of the model's tensors (constants and activations) before LiteRT allocates."""
    return sum(math.prod(int(n) for n in d["shape"]) * np.dtype(d["dtype"]).itemsize
               for d in interpreter.get_tensor_details())


def _indices(where: str, role: str, details: list[dict[str, Any]],
             views: list[np.ndarray]) -> list[int]:
    """The model's tensor indices of its inputs or outputs, each matching its arena view."""
    check_io(where, role, [(tuple(int(n) for n in d["shape"]), np.dtype(d["dtype"]))
                           for d in details], views)
    return [int(d["index"]) for d in details]
