"""Decode tokens/s and prefill latency of examples/llama.py: NEE's bucketed bundle vs torch eager.

Usage: python bench/llm.py [--buckets 1,32,64,128,256] [--prompt 16] [--new-tokens 64]
                           [--repeats 5] [--prefill-runs 10] [--threads 1]
                           [--executorch [--et-python /tmp/et-venv/bin/python]]

Exports the example once with the given buckets (to a temp dir; the export time is printed),
then in this one process, with BLAS/OpenMP and torch at ``--threads`` threads (1 by default;
set before numpy and torch are imported, so OpenBLAS threads do not spin):

* decode: ``runtime_py.generate.generate`` on the bundle vs torch eager running the same model
  with its own KV cache (prefill the prompt once, then one L = 1 call per token, as
  ``eager_generate``), both greedy from the same seeded prompt, alternately (which one goes
  first alternates too), ``--repeats`` times after one warm-up each. Prints tokens/s of each
  (median, min-max), the per-pair ratio NEE/eager of tokens/s (> 1: NEE faster) and whether
  both produced the same token ids (a mismatch is printed loudly and makes the exit code 1).
* prefill: for each bucket B, a prompt of exactly B tokens and of B - 1 tokens (served by
  bucket B, padded) from a reset state, NEE ``Program.run`` vs the eager forward of the same
  length, paired ``--prefill-runs`` times; the state reset is outside the timing. Prints the
  median ms of each, the per-pair ratio NEE/eager of ms (< 1: NEE faster) with its min-max,
  and the largest logits difference.

With ``--executorch``, bench/_llm_executorch.py runs under ``--et-python`` (a separate venv
with ``torch==2.13.0 executorch==1.5.1``; ExecuTorch is not in the project's venv) and exports
the same model with its KV cache as mutable state to ExecuTorch with the XNNPACK partitioner,
then times its decode loop against torch eager in that process. That comparison is in another
process than NEE's, so ET vs NEE is given only through each one's ratio to eager.
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
EXAMPLE = ROOT / "examples" / "llama.py"
ET_SCRIPT = Path(__file__).resolve().parent / "_llm_executorch.py"
DEFAULT_ET_PYTHON = "/tmp/et-venv/bin/python"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def pin_threads(threads: int) -> None:
    """Thread pools are sized when numpy/torch load: set the env before either is imported."""
    loaded = [m for m in ("numpy", "torch") if m in sys.modules]
    if loaded:
        raise RuntimeError(f"{loaded} imported before the thread env vars were set")
    for var in THREAD_VARS:
        os.environ[var] = str(threads)


def spread(values: list[float]) -> str:
    """median (min-max)."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def prompt_ids(length: int, seed: int = 1) -> list[int]:
    import torch

    from_vocab = torch.randint(0, 4096, (length,), generator=torch.Generator().manual_seed(seed))
    return [int(t) for t in from_vocab]


def eager_decode(mod, model, prompt: list[int], new_tokens: int) -> tuple[list[int], float, float]:
    """``eager_generate`` with timings: (ids, prefill seconds, decode tokens/s) measured as
    GenerationStats does (decode = the new_tokens - 1 calls after the prefill)."""
    import torch

    with torch.no_grad():
        mod.reset(model)
        start = time.perf_counter()
        logits = model(torch.tensor([prompt]), torch.tensor([0]))
        token = int(logits[0, -1].argmax())
        prefill = time.perf_counter() - start
        ids, pos = [token], len(prompt)
        start = time.perf_counter()
        while len(ids) < new_tokens:
            token = int(model(torch.tensor([[token]]), torch.tensor([pos]))[0, -1].argmax())
            ids.append(token)
            pos += 1
        decode = time.perf_counter() - start
    return ids, prefill, (new_tokens - 1) / decode if new_tokens > 1 else 0.0


def nee_decode(program, prompt: list[int], new_tokens: int) -> tuple[list[int], float, float]:
    from runtime_py.generate import GenerationStats, generate

    stats = GenerationStats()
    ids = list(generate(program, prompt, new_tokens, stats))
    return ids, stats.prefill_seconds, stats.decode_tokens_per_s


def bench_decode(mod, model, program, prompt: list[int], new_tokens: int,
                 repeats: int) -> tuple[dict, bool]:
    runners = {"nee": lambda: nee_decode(program, prompt, new_tokens),
               "eager": lambda: eager_decode(mod, model, prompt, new_tokens)}
    runs: dict[str, list[tuple[list[int], float, float]]] = {"nee": [], "eager": []}
    for name in runners:  # warm-up, not counted
        runners[name]()
    for i in range(repeats):
        order = ("nee", "eager") if i % 2 == 0 else ("eager", "nee")
        for name in order:
            runs[name].append(runners[name]())
    reference = mod.eager_generate(model, prompt, new_tokens)
    same = all(ids == reference for name in runs for ids, _, _ in runs[name])
    tps = {name: [r[2] for r in runs[name]] for name in runs}
    prefill_ms = {name: [r[1] * 1e3 for r in runs[name]] for name in runs}
    ratios = [n / e for n, e in zip(tps["nee"], tps["eager"], strict=True)]
    result = {"tps": tps, "prefill_ms": prefill_ms, "ratios": ratios, "reference": reference,
              "ids": {name: runs[name][-1][0] for name in runs}}
    return result, same


def bench_prefill(mod, model, program, buckets: list[int], runs: int) -> list[dict]:
    import numpy as np
    import torch

    rows = []
    start_np, start_t = np.zeros(1, np.int64), torch.tensor([0])
    for bucket in buckets:
        for length in ([bucket] if bucket == 1 else [bucket, bucket - 1]):
            ids = prompt_ids(length, seed=2)
            tokens_np = np.asarray([ids], np.int64)
            tokens_t = torch.tensor([ids])
            served = program.bucket(tokens_np, start_np).dim.size
            nee_s, eager_s = [], []

            def nee(out: list[float] | None = None, a=tokens_np):
                program.reset()
                t0 = time.perf_counter()
                logits = program.run(a, start_np)[0]
                if out is not None:
                    out.append(time.perf_counter() - t0)
                return logits

            def eager(out: list[float] | None = None, t=tokens_t):
                mod.reset(model)
                with torch.no_grad():
                    t0 = time.perf_counter()
                    logits = model(t, start_t)
                    if out is not None:
                        out.append(time.perf_counter() - t0)
                return logits

            diff = float(np.abs(nee().copy() - eager().numpy()).max())  # also the warm-up
            for i in range(runs):
                for fn, out in (((nee, nee_s), (eager, eager_s)) if i % 2 == 0
                                else ((eager, eager_s), (nee, nee_s))):
                    fn(out)
            rows.append({"length": length, "bucket": served,
                         "nee_ms": [s * 1e3 for s in nee_s],
                         "eager_ms": [s * 1e3 for s in eager_s],
                         "ratios": [n / e for n, e in zip(nee_s, eager_s, strict=True)],
                         "max_abs_diff": diff})
    return rows


def run_executorch(et_python: str, prompt: list[int], new_tokens: int, repeats: int,
                   threads: int) -> dict:
    """The ExecuTorch child's JSON, or {"error": reason}."""
    if not Path(et_python).exists():
        return {"error": f"{et_python} not found (create a venv with torch==2.13.0 "
                         "executorch==1.5.1 and pass --et-python)"}
    env = dict(os.environ, **{var: str(threads) for var in THREAD_VARS})
    try:
        done = subprocess.run(
            [et_python, str(ET_SCRIPT), "--example", str(EXAMPLE), "--prompt",
             ",".join(map(str, prompt)), "--new-tokens", str(new_tokens), "--repeats",
             str(repeats), "--threads", str(threads)],
            env=env, capture_output=True, text=True, timeout=1800, check=False)
    except subprocess.TimeoutExpired:
        return {"error": "the ExecuTorch child timed out after 1800 s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        return {"error": f"the ExecuTorch child exited {done.returncode}: {tail}"}
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", default="1,32,64,128,256")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens for decode")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="decode runs of each")
    parser.add_argument("--prefill-runs", type=int, default=10, help="prefill runs per length")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--executorch", action="store_true", help="time ExecuTorch too")
    parser.add_argument("--et-python", default=DEFAULT_ET_PYTHON,
                        help="python of a venv with executorch==1.5.1")
    args = parser.parse_args()
    buckets = sorted({int(b) for b in args.buckets.split(",")})
    if args.prompt < 1 or args.new_tokens < 2 or args.prompt + args.new_tokens > 256:
        parser.error("need --prompt >= 1, --new-tokens >= 2, prompt + new tokens <= 256")
    pin_threads(args.threads)

    import numpy as np
    import torch

    from runtime_py.program import Program
    from toolchain.export import export
    from toolchain.export.buckets import export_buckets, module_dim
    from toolchain.modules import load_file
    from toolchain.serialize.bundle import write_bundle

    torch.set_num_threads(args.threads)
    wall = time.perf_counter()
    mod = load_file(EXAMPLE)
    model = mod.Model()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama.nee"
        start = time.perf_counter()
        dim = module_dim(model, mod.dynamic_shapes())
        result = export_buckets(export, model, mod.example_inputs(), dim, buckets, name="llama")
        write_bundle(result, path)
        export_s = time.perf_counter() - start
        program = Program.load(path)
        print(f"examples/llama.py, {args.threads} thread(s), torch {torch.__version__}")
        print(f"export: {export_s:.1f} s for buckets {buckets} "
              f"({path.stat().st_size / 2**20:.1f} MiB bundle, "
              f"{program.state_bytes / 2**10:.0f} KiB state)")

        prompt = prompt_ids(args.prompt)
        decode, same = bench_decode(mod, model, program, prompt, args.new_tokens, args.repeats)
        step = program.bucket(np.zeros((1, 1), np.int64), np.zeros(1, np.int64)).dim.size
        print(f"\ndecode: prompt {args.prompt} tokens, {args.new_tokens} new tokens (greedy), "
              f"{args.repeats} paired runs; NEE decode steps run bucket seq={step}")
        print(f"  {'':24s} median (min-max)")
        print(f"  {'NEE tokens/s':24s} {spread(decode['tps']['nee'])}")
        print(f"  {'eager tokens/s':24s} {spread(decode['tps']['eager'])}")
        print(f"  {'NEE/eager tokens/s':24s} {spread(decode['ratios'])}   (> 1: NEE faster)")
        print(f"  {'NEE prefill ms':24s} {spread(decode['prefill_ms']['nee'])}")
        print(f"  {'eager prefill ms':24s} {spread(decode['prefill_ms']['eager'])}")
        if same:
            print(f"  token ids: NEE == eager == eager_generate in every run "
                  f"({len(set(decode['reference']))} distinct ids in {args.new_tokens})")
        else:
            failed = True
            print("  !!! TOKEN ID MISMATCH between NEE and torch eager !!!")
            print(f"  eager_generate: {decode['reference']}")
            for name, ids in decode["ids"].items():
                print(f"  {name:14s}: {ids}")

        rows = bench_prefill(mod, model, program, buckets, args.prefill_runs)
        print(f"\nprefill from a reset state at position 0, {args.prefill_runs} paired runs "
              f"per length (ms: median (min-max); ratio NEE/eager ms, < 1: NEE faster)")
        print(f"  {'tokens':>6s} {'bucket':>6s} {'NEE ms':>22s} {'eager ms':>22s} "
              f"{'NEE/eager':>18s} {'max|dlogits|':>12s}")
        for row in rows:
            print(f"  {row['length']:6d} {row['bucket']:6d} {spread(row['nee_ms']):>22s} "
                  f"{spread(row['eager_ms']):>22s} {spread(row['ratios']):>18s} "
                  f"{row['max_abs_diff']:12.2e}")
        program.close()

    if args.executorch:
        print("\nExecuTorch (XNNPACK), in a separate process (" + args.et_python + "): "
              "NOT measured side by side with NEE; compare through the ratios to eager")
        et = run_executorch(args.et_python, prompt, args.new_tokens, args.repeats, args.threads)
        if "error" in et:
            print(f"  not available: {et['error']}")
        else:
            print(f"  executorch {et['executorch_version']}, torch {et['torch_version']}; "
                  f"export + lower: {et['export_s']:.1f} s; methods: {', '.join(et['methods'])}")
            print(f"  ET: {et['prefill_note']}")
            outside = ", ".join(f"{k} x{v}" for k, v in sorted(et["delegation"][
                "ops_outside_delegate"].items()))
            print(f"  decode method: {et['delegation']['delegate_calls']} XNNPACK delegate "
                  f"calls; outside the delegate (portable kernels): {outside or 'none'}")
            print(f"  {'':24s} median (min-max)")
            print(f"  {'ET tokens/s':24s} {spread(et['et_tps'])}")
            print(f"  {'eager tokens/s (there)':24s} {spread(et['eager_tps'])}")
            print(f"  {'ET/eager tokens/s':24s} {spread(et['ratios'])}   (> 1: ET faster)")
            print(f"  {'ET prefill ms':24s} {spread(et['et_prefill_ms'])}")
            print(f"  {'eager prefill ms (there)':24s} {spread(et['eager_prefill_ms'])}")
            nee_ratio = statistics.median(decode["ratios"])
            print(f"  => NEE/ET tokens/s ~ {nee_ratio / statistics.median(et['ratios']):.2f} "
                  f"(median NEE/eager here / median ET/eager there: two processes)")
            if not et["mismatched_runs"] and et["ids"] == decode["reference"]:
                print("  token ids: ET == eager_generate in every run")
            else:
                failed = True
                print(f"  !!! TOKEN ID MISMATCH between ExecuTorch and torch eager (runs "
                      f"{et['mismatched_runs']}) !!!")
                print(f"  eager: {decode['reference']}\n  ET:    {et['ids']}")
    print(f"\ntotal time: {time.perf_counter() - wall:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
