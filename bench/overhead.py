"""Where a run's time goes: the runtime's own loop or the kernels' numpy calls.

Usage: python bench/overhead.py [--models mlp,gru,cnn,transformer,mobilenet_v3_small] [--runs 200]

Exports each zoo model (examples/, to a temp dir) and times ``Program.run`` (median of
``--runs``) as is and with every prepared kernel call replaced by a no-op: the second is what
the runtime itself costs (copying the inputs in, the run lock, the thread policy and the loop
over the calls), the difference what the kernels cost. Prints both, the calls per run and the
kernels' average time per call (on small tensors mostly numpy's own per-call dispatch).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.threads import export_zoo, inputs_for  # noqa: E402
from runtime_py.program import Program  # noqa: E402


def median_us(program: Program, inputs: list, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        program.run(*inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,gru,cnn,transformer,mobilenet_v3_small")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    names = args.models.split(",")
    print(f"{'model':20} {'calls':>5} {'run us':>9} {'runtime us':>10} {'kernels us/call':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in export_zoo(names, Path(tmp), None).items():
            program = Program.load(path)
            inputs = inputs_for(program)
            median_us(program, inputs, 10)  # warm-up
            full = median_us(program, inputs, args.runs)
            calls = program.calls
            program.calls = [dataclasses.replace(c, run=lambda: None) for c in calls]
            empty = median_us(program, inputs, args.runs)
            program.calls = calls
            print(f"{name:20} {len(calls):5d} {full:9.1f} {empty:10.1f} "
                  f"{(full - empty) / len(calls):15.2f}")


if __name__ == "__main__":
    main()
