"""Int8 vs float per example model, measured in one process at 1 BLAS thread.

Usage: python bench/quantized.py [--models cnn,mlp,...] [--runs N]

Per model: bundle size int8/float (target <= 0.3), arena int8/float, SQNR (dB) of NEE's int8
bundle against the float model on the held-out calibration samples, beside the SQNR the same
flow gets with torchao's copy of ExecuTorch's XNNPACKQuantizer (same calibration data; the
target is NEE >= XNNPACK's), the latency of NEE int8 / NEE float, and of NEE int8 / LiteRT's
default CPU path (XNNPACK) running NEE's own int8 .tflite (paired runs: median of per-pair
ratios and quartiles; lower is better for NEE).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: no spinning threads
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from latency import _paired_ms  # noqa: E402

from runtime_py.program import Program  # noqa: E402
from toolchain.export import export  # noqa: E402
from toolchain.modules import load_file  # noqa: E402
from toolchain.quantize.accuracy import measure  # noqa: E402
from toolchain.quantize.options import Int8Options, split_samples  # noqa: E402
from toolchain.serialize.bundle import write_bundle  # noqa: E402
from toolchain.serialize.tflite_program import to_tflite  # noqa: E402

MODELS = ["mlp", "cnn", "mobilenet_v2", "resnet18", "gru"]


def xnnpack_sqnr(model: torch.nn.Module, inputs: tuple, options: Int8Options) -> float:
    """SQNR of the model quantized by XNNPACKQuantizer (per-channel) and run by NEE."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    graph = torch.export.export(model, inputs).module(check_guards=False)
    prepared = prepare_pt2e(graph, XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True)))
    with torch.no_grad():
        for sample in options.calibration:
            prepared(*sample)
    result = export(convert_pt2e(prepared), inputs)
    return measure(model, result, options.evaluation, True)[0].sqnr_db


def litert_call(result: object, arrays: list[np.ndarray]):
    """A call running ``result`` as .tflite in LiteRT's default interpreter (XNNPACK), 1 thread."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=to_tflite(result.graph), num_threads=1)
    interpreter.allocate_tensors()
    inputs = [d["index"] for d in interpreter.get_input_details()]
    output = interpreter.get_output_details()[0]["index"]

    def run() -> np.ndarray:
        for index, array in zip(inputs, arrays, strict=True):
            interpreter.set_tensor(index, array)
        interpreter.invoke()
        return interpreter.get_tensor(output)

    return run


def _ratio(ratios: list[float]) -> str:
    q1, q3 = np.percentile(ratios, [25, 75])
    return f"{np.median(ratios):5.2f} [{q1:.2f}-{q3:.2f}]"


def bench(name: str, runs: int, folder: Path) -> str:
    module = load_file(ROOT / "examples" / f"{name}.py")
    model, inputs = module.Model().eval(), module.example_inputs()
    options = Int8Options(*split_samples(module.calibration_inputs()))
    paths, results = {}, {}
    for kind, quantize in (("float", None), ("int8", options)):
        results[kind] = export(model, inputs, quantize=quantize)
        paths[kind] = folder / f"{name}_{kind}.nee"
        write_bundle(results[kind], paths[kind])
    sqnr = results["int8"].accuracy[0].sqnr_db
    programs = {k: Program.load(p) for k, p in paths.items()}
    arrays = [t.numpy() for t in inputs]
    size = paths["int8"].stat().st_size / paths["float"].stat().st_size
    arena = programs["int8"].arena_bytes / programs["float"].arena_bytes
    float_ms, int8_ms, ratios = _paired_ms(lambda: programs["float"].run(*arrays),
                                           lambda: programs["int8"].run(*arrays), runs)
    litert_ms, _, vs_litert = _paired_ms(litert_call(results["int8"], arrays),
                                         lambda: programs["int8"].run(*arrays), runs)
    return (f"{name:14s} size {size:5.2f}  arena {arena:5.2f}  SQNR {sqnr:5.1f} dB "
            f"(XNNPACKQuantizer {xnnpack_sqnr(model, inputs, options):5.1f})  "
            f"int8/float {_ratio(ratios)} ({int8_ms:.2f} vs {float_ms:.2f} ms)  "
            f"int8/LiteRT {_ratio(vs_litert)} (LiteRT {litert_ms:.2f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            print(bench(name, args.runs, Path(folder)), flush=True)


if __name__ == "__main__":
    main()
