"""Median latency of the NEE numpy runtime vs torch eager, per model, at 1 and 2 threads.

Usage: python bench/latency.py [--models a,b] [--tier] [--runs N] [--profile] [--executorch]
                               [--threads 1,2]
``--tier`` times the real-model tier, or the ``--models`` named there (tests/models/tier.py: HF
transformers models and the in-project CNNs; the target there is NEE/torch <= 1.0 on each). Each
thread count runs in a fresh subprocess (BLAS/OpenMP thread pools are fixed at start-up; NEE is
loaded with ``threads=N``, its thread policy: at 2 it falls back to 1 thread while that is faster,
see runtime_py/threads.py), with NEE and torch eager measured in that same process on the same
inputs, run for run alternately (``--threads``: which counts, default 1 and 2). Prints the median
of the per-pair ratios NEE / torch and their quartiles (lower is better; the target is <= 1.5 on
mobilenet_v2, resnet18 and transformer) and, with --profile, the per-op breakdown of the slowest
model. With --executorch (needs ``pip install executorch==1.5.1``) the peer runtime is timed too:
its portable CPU kernels (the same role as NEE's numpy kernels) and its XNNPACK delegate
(ET-xnnpack/NEE: paired run for run with NEE's numpy program, the median of the per-pair ratios).
With --xnnpack, NEE's XNNPACK delegate (the model exported for board rpi5, whose recipe names it;
LiteRT runs the partitions) is timed too, paired with the numpy program run for run: its ms and
numpy/xnnpack (> 1: the delegate faster); with --openvino, the same partitions run by OpenVINO
(runtime_py/backends/openvino.py), likewise; with --fastest, run by whichever of the two was faster
on each partition at load (runtime_py/backends/fastest.py; its choice is printed after the table),
likewise; with any of them and --executorch, ET-xnnpack / NEE-best (NEE's fastest backend for the
board, timed run for run beside ExecuTorch's XNNPACK delegate: the median of the per-pair ratios,
>= 1: NEE as fast or faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["mlp", "cnn", "mobilenet_v2", "mobilenet_v3_small", "resnet18", "transformer", "gru"]
TIER_FILE = ROOT / "tests" / "models" / "tier.py"  # build(name): tier models and examples
THREADS = (1, 2)


def _median_ms(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _paired_ms(first, second, runs: int) -> tuple[float, float, list[float]]:
    """Median ms of ``first`` and ``second`` timed alternately (run i of each back to back, so
    machine noise hits both alike), and the per-pair ratios second/first, sorted."""
    first(), second()  # warm-up
    a, b = [], []
    for _ in range(runs):
        for fn, times in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    ratios = sorted(y / x for x, y in zip(a, b, strict=True))
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3, ratios


def executorch_ms(model, inputs, runs: int, threads: int, numpy_run,
                  delegate_run=None) -> dict[str, float]:
    """ExecuTorch portable kernels and XNNPACK delegate latency for the same model, its thread
    pool set to ``threads`` (by default it has one thread per core, whatever torch's setting).
    The XNNPACK delegate is timed run for run beside ``numpy_run`` (NEE's numpy program):
    ``et_xnnpack_over_numpy`` is the median of the per-pair ratios; and beside NEE's best
    backend, ``delegate_run`` if given (NEE's delegate, where it is faster) else the numpy
    program: ``et_xnnpack_over_best``."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime

    portable_lib._unsafe_reset_threadpool(threads)
    if portable_lib._threadpool_get_thread_count() != threads:
        raise RuntimeError(f"ExecuTorch's thread pool has "
                           f"{portable_lib._threadpool_get_thread_count()} threads, not {threads}")
    times = {}
    for label, partitioner in (("et_portable_ms", []), ("et_xnnpack_ms", [XnnpackPartitioner()])):
        program = to_edge_transform_and_lower(torch.export.export(model, inputs),
                                              partitioner=partitioner).to_executorch()
        method = Runtime.get().load_program(program.buffer).load_method("forward")
        call = lambda m=method: m.execute(list(inputs))  # noqa: E731
        if not partitioner:
            times[label] = _median_ms(call, max(3, runs // 5))
            continue
        _, times[label], ratios = _paired_ms(numpy_run, call, runs)
        times["et_xnnpack_over_numpy"] = statistics.median(ratios)
        if delegate_run is not None:
            _, _, ratios = _paired_ms(delegate_run, call, runs)
        times["et_xnnpack_over_best"] = statistics.median(ratios)
    return times


def delegate_ms(model, inputs, name: str, folder: Path, program, runs: int, threads: int,
                engines: list[str]) -> tuple[dict[str, float], object]:
    """NEE with the CPU delegate (board rpi5) run by each of ``engines`` ("xnnpack": LiteRT,
    "openvino"), each paired with ``program`` (numpy); and a call running the fastest of them
    if it is faster than numpy, else None."""
    from runtime_py.backends import xnnpack_engine
    from runtime_py.program import Program
    from toolchain.boards import load_board
    from toolchain.export import export
    from toolchain.serialize.bundle import write_bundle

    path = folder / f"{name}-rpi5.nee"
    write_bundle(export(model, inputs, name=name, board=load_board("rpi5")), path)
    arrays = [t.numpy() for t in inputs]
    row, best, fastest = {}, 1.0, None
    for engine in engines:
        backend = xnnpack_engine("litert" if engine == "xnnpack" else engine)
        delegated = Program.load(path, {"xnnpack": backend}, threads=threads)
        if engine == "fastest":
            row["fastest_choice"] = backend.label
        run = lambda p=delegated: p.run(*arrays)  # noqa: E731
        row[f"{engine}_ms"], _, ratios = _paired_ms(run, lambda: program.run(*arrays), runs)
        row[f"numpy_over_{engine}"] = speedup = statistics.median(ratios)
        row["partitions"] = len(delegated.partitions)
        if speedup >= best:
            best, fastest = speedup, run
    return row, fastest


def measure(models: list[str], runs: int, threads: int, peer: bool,
            engines: list[str] = ()) -> list[dict]:
    """In this process: export each model, then time NEE and torch eager alternately."""
    import torch

    from runtime_py.program import Program
    from toolchain.export import export
    from toolchain.modules import load_file
    from toolchain.serialize.bundle import write_bundle

    torch.set_num_threads(threads)
    rows = []
    tier = load_file(TIER_FILE)
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            model, inputs = tier.build(name)
            write_bundle(export(model, inputs, name=name), Path(tmp) / f"{name}.nee")
            program = Program.load(Path(tmp) / f"{name}.nee", threads=threads)
            arrays = [t.numpy() for t in inputs]
            with torch.no_grad():
                torch_ms, nee_ms, ratios = _paired_ms(lambda m=model, i=inputs: m(*i),
                                                      lambda p=program, a=arrays: p.run(*a), runs)
            profile = [(call.op, t) for call, t in program.profile(*arrays)]
            quartiles = (ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4])
            fast, delegate = (delegate_ms(model, inputs, name, Path(tmp), program, runs,
                                          threads, engines) if engines else ({}, None))
            rows.append({"model": name, "threads": threads, "nee_ms": nee_ms,
                         "torch_ms": torch_ms, "ratio": statistics.median(ratios),
                         "quartiles": quartiles, "profile": profile, **fast,
                         **(executorch_ms(model, inputs, runs, threads,
                                          lambda p=program, a=arrays: p.run(*a), delegate)
                            if peer else {})})
    return rows


def _run_child(models: list[str], runs: int, threads: int, peer: bool,
               engines: list[str]) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(threads), "--models", ",".join(models),
         "--runs", str(runs), *(["--executorch"] if peer else []),
         *(f"--{engine}" for engine in engines)],
        env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the {threads}-thread measurement failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_profile(row: dict) -> None:
    total = sum(t for _, t in row["profile"]) or 1e-12
    per_op: dict[str, float] = {}
    for op, t in row["profile"]:
        per_op[op] = per_op.get(op, 0.0) + t
    print(f"\nper-op breakdown, {row['model']} at {row['threads']} thread(s):")
    for op, t in sorted(per_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:40s} {t * 1e3:8.3f} ms {t / total:6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated (default: every zoo model, or with "
                        "--tier every tier model)")
    parser.add_argument("--tier", action="store_true", help="time the real-model tier")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--executorch", action="store_true", help="time ExecuTorch too")
    parser.add_argument("--xnnpack", action="store_true",
                        help="time NEE's XNNPACK delegate (board rpi5) too")
    parser.add_argument("--openvino", action="store_true",
                        help="time the same partitions run by OpenVINO too (pip install "
                        "'nee[openvino]')")
    parser.add_argument("--fastest", action="store_true",
                        help="time the same partitions run by the faster of LiteRT and OpenVINO "
                        "on each, chosen at load, too")
    parser.add_argument("--threads", default=",".join(map(str, THREADS)),
                        help="comma-separated thread counts (default: 1,2)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.threads.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        parser.error(f"--threads {args.threads!r}: comma-separated counts >= 1 expected")
    models = args.models.split(",") if args.models else MODELS
    if args.tier:
        from toolchain.modules import load_file

        tier = load_file(TIER_FILE).TIER
        models = models if args.models else list(tier)
        if unknown := [m for m in models if m not in tier]:
            parser.error(f"--models: {', '.join(unknown)} not in the tier ({', '.join(tier)})")
    engines = [e for e in ("xnnpack", "openvino", "fastest") if getattr(args, e)]
    if args.child:
        print(json.dumps(measure(models, args.runs, args.child, args.executorch, engines)))
        return
    rows = [row for n in counts
            for row in _run_child(models, args.runs, n, args.executorch, engines)]
    peer = " ET-portable/NEE ET-xnnpack/NEE" if args.executorch else ""
    peer += "".join(f" NEE-{e} ms numpy/{e}" for e in engines)
    peer += " ET-xnnpack/NEE-best" if engines and args.executorch else ""
    print(f"{'model':20s} {'threads':>7s} {'NEE ms':>9s} {'torch ms':>9s} {'NEE/torch':>9s} "
          f"{'(quartiles of paired runs)':>26s}{peer}")
    for row in rows:
        low, high = row["quartiles"]
        line = (f"{row['model']:20s} {row['threads']:7d} {row['nee_ms']:9.3f} "
                f"{row['torch_ms']:9.3f} {row['ratio']:9.2f} {f'{low:.2f}-{high:.2f}':>26s}")
        if args.executorch:
            line += (f" {row['et_portable_ms'] / row['nee_ms']:15.2f}"
                     f" {row['et_xnnpack_over_numpy']:15.2f}")
        for e in engines:
            line += f" {row[f'{e}_ms']:{len(e) + 8}.3f} {row[f'numpy_over_{e}']:{len(e) + 6}.2f}"
        if engines and args.executorch:
            line += f" {row['et_xnnpack_over_best']:19.2f}"
        print(line)
    for row in rows:
        if "fastest_choice" in row:
            print(f"{row['model']} at {row['threads']} thread(s): {row['fastest_choice']}")
    if args.profile:
        _print_profile(max(rows, key=lambda r: r["ratio"]))


if __name__ == "__main__":
    main()
