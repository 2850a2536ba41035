"""The XNNPACK backend: a partition written as .tflite (payload ``model``), run by ai-edge-litert's
interpreter, which applies XNNPACK to what it supports (and TFLite's own kernels to the rest).

The interpreter is made once per partition at load, with its tensors allocated; a run copies
the partition's inputs from the arena into it, invokes it and copies its outputs back (LiteRT's
Python API refuses to run while numpy views of its buffers are alive, so the copies stay). The
backend is registered only where ai-edge-litert is installed (``pip install 'nee[xnnpack]'``);
elsewhere a bundle exported with a CPU fallback runs the partitions on the numpy kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from runtime_py.errors import BundleError
from runtime_py.kernels import Bound

if TYPE_CHECKING:
    from runtime_py.backends import Partition

PACKAGE = "ai_edge_litert"  # the backend is shipped only where this imports


class Xnnpack:
    """Runs .tflite partitions in LiteRT's interpreter, with as many threads as the program may
    use (``Program.load(threads=N)`` or the board recipe's; XNNPACK's own thread pool)."""

    label = "XNNPACK (ai-edge-litert)"

    def prepare(self, partition: Partition) -> Bound:
        """The interpreter of the partition's model, checked against its arena I/O."""
        from ai_edge_litert.interpreter import Interpreter

        model = partition.payload.get("model")
        where = f"partition {partition.index} ({partition.backend})"
        try:
            interpreter = Interpreter(model_content=bytes(model), num_threads=partition.threads)
            interpreter.allocate_tensors()
        except (TypeError, ValueError, RuntimeError) as e:
            raise BundleError(where, "a .tflite model LiteRT loads (payload 'model')", str(e),
                              "export the bundle again") from e
        ins = _indices(where, "input", interpreter.get_input_details(), partition.inputs)
        outs = _indices(where, "output", interpreter.get_output_details(), partition.outputs)
        pairs_in = list(zip(ins, partition.inputs, strict=True))
        pairs_out = list(zip(outs, partition.outputs, strict=True))

        def run() -> None:
            for k, view in pairs_in:
                interpreter.set_tensor(k, view)
            interpreter.invoke()
            for k, view in pairs_out:
                np.copyto(view, interpreter.get_tensor(k))

        return run


def _indices(where: str, role: str, details: list[dict[str, Any]],
             views: list[np.ndarray]) -> list[int]:
    """The model's tensor indices of its inputs or outputs, each matching its arena view."""
    found = [(tuple(int(n) for n in d["shape"]), np.dtype(d["dtype"])) for d in details]
    expected = [(v.shape, v.dtype) for v in views]
    if found != expected:
        raise BundleError(f"{where} {role}s", f"shapes and dtypes {expected} (the arena's)",
                          str(found), "export the bundle again")
    return [int(d["index"]) for d in details]
