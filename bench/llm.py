"""Decode tokens/s and prefill latency of examples/llama.py: NEE's bucketed bundle, NEE's
symbolic bundle and torch eager.

Usage: python bench/llm.py [--buckets 1,32,64,128,256] [--no-symbolic]
                           [--sizes 1,17,32,33,64,65,100,128,129,200,256]
                           [--prompt 16] [--new-tokens 64] [--repeats 5] [--prefill-runs 10]
                           [--threads 1] [--executorch [--et-python /tmp/et-venv/bin/python]]

Exports the example twice (to a temp dir; each export time is printed): with the given buckets
(``export_buckets``: a static program per bucket size, a call padded up to the smallest bucket
that fits it) and, unless ``--no-symbolic``, as one symbolic program (``export_symbolic``: one
program for every seq length in [1, 256], planned at 256, run at the call's exact length; the
runtime prepares a length's calls on its first run and keeps them). Then in this one process,
with BLAS/OpenMP and torch at ``--threads`` threads (1 by default; set before numpy and torch
are imported, so OpenBLAS threads do not spin):

* symbolic preparation: right after loading, before any run, the one-time cost of preparing
  the symbolic program at each of ``--sizes`` (``Program.prepare(size)``, what its first run at
  that size pays on top of the run), measured once per size: one sample each, so noisy. At 256
  (its own size) there is nothing to prepare.
* decode: ``runtime_py.generate.generate`` on each bundle vs torch eager running the same model
  with its own KV cache (prefill the prompt once, then one L = 1 call per token, as
  ``eager_generate``), all greedy from the same seeded prompt, ``--repeats`` rounds after one
  warm-up each; in each round every runner runs once, the order rotating by one from round to
  round (so each runner takes each place in turn). Prints tokens/s of each (median, min-max),
  the per-round ratios of tokens/s (bucketed/eager, symbolic/eager, symbolic/bucketed; > 1: the
  first faster), the prefill ms inside ``generate`` and whether every run produced the same
  token ids as ``eager_generate`` (a mismatch is printed loudly and makes the exit code 1).
* prefill: for each of ``--sizes`` (by default the buckets and the lengths just above a bucket,
  the bucketed program's worst case: bucket 64 serves 33 padded to 64), a prompt of that many
  tokens from a reset state at position 0: NEE bucketed ``Program.run``, NEE symbolic
  ``Program.run`` and the eager forward of the same length, one warm-up each (which also
  prepares the symbolic program's size, if the preparation step has not) then
  ``--prefill-runs`` rounds, the order rotating as for decode; the state reset is outside the
  timing. Prints the bucket that served each length, the ms of each (median, min-max), the
  per-round ratios of ms (symbolic/bucketed, symbolic/eager, bucketed/eager; < 1: the first
  faster) and the largest logits difference of each NEE program vs eager and of symbolic vs
  bucketed (from the warm-up).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama.py"
ET_SCRIPT = Path(__file__).resolve().parent / "_llm_executorch.py"
DEFAULT_ET_PYTHON = "/tmp/et-venv/bin/python"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
MAX_SEQ = 256  # examples/llama.py's context, the dynamic seq dim's max
DEFAULT_SIZES = "1,17,32,33,64,65,100,128,129,200,256"
LABELS = {"bucketed": "NEE bucketed", "symbolic": "NEE symbolic", "eager": "eager"}
SHORT = {"bucketed": "bkt", "symbolic": "sym", "eager": "eager"}
DECODE_RATIOS = (("bucketed", "eager"), ("symbolic", "eager"), ("symbolic", "bucketed"))
PREFILL_RATIOS = (("symbolic", "bucketed"), ("symbolic", "eager"), ("bucketed", "eager"))
T = TypeVar("T")


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


def paired(runners: dict[str, Callable[[], T]], rounds: int) -> dict[str, list[T]]:
    """``rounds`` rounds of every runner, the order rotating by one each round (with two
    runners: alternating), so each takes each place in turn."""
    names = list(runners)
    runs: dict[str, list[T]] = {name: [] for name in names}
    for i in range(rounds):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            runs[name].append(runners[name]())
    return runs


def ratios(values: dict[str, list[float]],
           pairs: tuple[tuple[str, str], ...]) -> dict[str, list[float]]:
    """Per-round ratios "a/b" of the pairs whose runners both ran."""
    return {f"{a}/{b}": [x / y for x, y in zip(values[a], values[b], strict=True)]
            for a, b in pairs if a in values and b in values}


def export_bundles(mod, model, buckets: list[int], tmp: Path,
                   symbolic: bool) -> dict[str, tuple[Path, float]]:
    """The bucketed (and symbolic) bundle written under ``tmp``: name -> (path, export s)."""
    from toolchain.export import export
    from toolchain.export.buckets import export_buckets, module_dim
    from toolchain.export.symbolic import export_symbolic
    from toolchain.serialize.bundle import write_bundle

    exporters = {"bucketed": lambda dim: export_buckets(export, model, mod.example_inputs(),
                                                        dim, buckets, name="llama")}
    if symbolic:
        exporters["symbolic"] = lambda dim: export_symbolic(export, model, mod.example_inputs(),
                                                            dim, name="llama")
    bundles = {}
    for name, exporter in exporters.items():
        path = tmp / f"llama-{name}.nee"
        start = time.perf_counter()
        write_bundle(exporter(module_dim(model, mod.dynamic_shapes())), path)
        bundles[name] = (path, time.perf_counter() - start)
    return bundles


def prepare_ms(program, sizes: list[int]) -> dict[int, float | None]:
    """Milliseconds to prepare the symbolic ``program`` at each size, once each, in order
    (None at its own size, the max: nothing to prepare)."""
    costs: dict[int, float | None] = {}
    for size in sizes:
        if size == program.dim.size:
            costs[size] = None
            continue
        start = time.perf_counter()
        program.prepare(size)
        costs[size] = (time.perf_counter() - start) * 1e3
    return costs


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


def bench_decode(mod, model, programs: dict[str, Any], prompt: list[int], new_tokens: int,
                 repeats: int) -> tuple[dict, bool]:
    runners: dict[str, Callable[[], tuple[list[int], float, float]]] = {
        name: (lambda p=p: nee_decode(p, prompt, new_tokens)) for name, p in programs.items()}
    runners["eager"] = lambda: eager_decode(mod, model, prompt, new_tokens)
    for run in runners.values():  # warm-up, not counted
        run()
    runs = paired(runners, repeats)
    reference = mod.eager_generate(model, prompt, new_tokens)
    same = all(ids == reference for name in runs for ids, _, _ in runs[name])
    tps = {name: [r[2] for r in runs[name]] for name in runs}
    prefill_ms = {name: [r[1] * 1e3 for r in runs[name]] for name in runs}
    mismatched = {name: sum(ids != reference for ids, _, _ in runs[name]) for name in runs}
    result = {"tps": tps, "prefill_ms": prefill_ms, "ratios": ratios(tps, DECODE_RATIOS),
              "reference": reference, "mismatched": mismatched,
              "ids": {name: runs[name][-1][0] for name in runs}}
    return result, same


def prefill_runners(mod, model, programs: dict[str, Any],
                    ids: list[int]) -> dict[str, Callable[[], tuple[Any, float]]]:
    """name -> a prefill of ``ids`` from a reset state: (logits, seconds of the call alone)."""
    import numpy as np
    import torch

    tokens_np, start_np = np.asarray([ids], np.int64), np.zeros(1, np.int64)
    tokens_t, start_t = torch.tensor([ids]), torch.tensor([0])

    def nee(program) -> Callable[[], tuple[Any, float]]:
        def run() -> tuple[Any, float]:
            program.reset()
            t0 = time.perf_counter()
            logits = program.run(tokens_np, start_np)[0]
            return logits, time.perf_counter() - t0
        return run

    def eager() -> tuple[Any, float]:
        mod.reset(model)
        with torch.no_grad():
            t0 = time.perf_counter()
            logits = model(tokens_t, start_t)
            seconds = time.perf_counter() - t0
        return logits.numpy(), seconds

    return {**{name: nee(p) for name, p in programs.items()}, "eager": eager}


def bench_prefill(mod, model, programs: dict[str, Any], sizes: list[int],
                  runs: int) -> list[dict]:
    import numpy as np

    rows = []
    for size in sizes:
        ids = prompt_ids(size, seed=2)
        runners = prefill_runners(mod, model, programs, ids)
        logits = {name: run()[0].copy() for name, run in runners.items()}  # the warm-up
        served = programs["bucketed"].bucket(np.asarray([ids], np.int64),
                                             np.zeros(1, np.int64)).dim.size
        ms = paired({name: (lambda r=run: r()[1] * 1e3) for name, run in runners.items()}, runs)
        rows.append({"length": size, "bucket": served, "ms": ms,
                     "ratios": ratios(ms, PREFILL_RATIOS), "max_abs_diff": logit_diffs(logits)})
    return rows


def logit_diffs(logits: dict[str, Any]) -> dict[str, float]:
    """The largest |difference| of each NEE program's logits vs eager's, and symbolic's vs
    bucketed's (0 if they are the same bits), keyed "a-b"."""
    import numpy as np

    pairs = [(name, "eager") for name in logits if name != "eager"]
    pairs += [("symbolic", "bucketed")] if "symbolic" in logits else []
    return {f"{a}-{b}": float(np.abs(logits[a] - logits[b]).max()) for a, b in pairs}


def short(pair: str) -> str:
    """"symbolic/bucketed" -> "sym/bkt"."""
    for name, abbrev in SHORT.items():
        pair = pair.replace(name, abbrev)
    return pair


def print_decode(decode: dict, same: bool, args: argparse.Namespace, step: int) -> bool:
    """Print the decode results; whether they failed (a token id mismatch)."""
    symbolic = ", NEE symbolic its program at seq=1" if "symbolic" in decode["tps"] else ""
    print(f"\ndecode: prompt {args.prompt} tokens, {args.new_tokens} new tokens (greedy), "
          f"{args.repeats} rounds (order rotating); NEE bucketed decode steps run bucket "
          f"seq={step}{symbolic}")
    print(f"  {'':30s} median (min-max)")
    for name, tps in decode["tps"].items():
        print(f"  {LABELS[name] + ' tokens/s':30s} {spread(tps)}")
    for pair, values in decode["ratios"].items():
        print(f"  {pair + ' tokens/s':30s} {spread(values)}   (> 1: the first faster)")
    for name, ms in decode["prefill_ms"].items():
        print(f"  {LABELS[name] + ' prefill ms':30s} {spread(ms)}")
    names = " == ".join(LABELS[name] for name in decode["tps"])
    if same:
        print(f"  token ids: {names} == eager_generate in every run "
              f"({len(set(decode['reference']))} distinct ids in {args.new_tokens})")
        return False
    print(f"  !!! TOKEN ID MISMATCH vs torch eager_generate (runs mismatched: "
          f"{decode['mismatched']}) !!!")
    print(f"  eager_generate: {decode['reference']}")
    for name, ids in decode["ids"].items():
        print(f"  {name:14s}: {ids}")
    return True


def print_prefill(rows: list[dict], prepared: dict[int, float | None], runs: int) -> None:
    names = list(rows[0]["ms"])
    print(f"\nprefill from a reset state at position 0, {runs} rounds per length (order "
          f"rotating); ms: median (min-max)")
    head = "".join(f" {LABELS[n] + ' ms':>22s}" for n in names)
    prep = f" {'sym prepare ms':>14s}" if prepared else ""
    print(f"  {'tokens':>6s} {'bucket':>6s}{head}{prep}")
    for row in rows:
        cost = prepared.get(row["length"]) if prepared else None
        prep = (f" {'-' if cost is None else f'{cost:.1f}':>14s}") if prepared else ""
        cells = "".join(f" {spread(row['ms'][n]):>22s}" for n in names)
        print(f"  {row['length']:6d} {row['bucket']:6d}{cells}{prep}")
    if prepared:
        print("  (sym prepare ms: the symbolic program's one-time preparation at that length, "
              "once, before any run; '-': its own size)")
    pairs = list(rows[0]["ratios"])
    print("\nprefill ratios of ms per round: median (min-max), < 1: the first faster; "
          "max|dlogits| between two (from the warm-up)")
    head = "".join(f" {short(p):>20s}" for p in pairs)
    diffs = "".join(f" {short(d):>12s}" for d in rows[0]["max_abs_diff"])
    print(f"  {'tokens':>6s} {'bucket':>6s}{head}{diffs}")
    for row in rows:
        cells = "".join(f" {spread(row['ratios'][p]):>20s}" for p in pairs)
        diffs = "".join(f" {d:12.2e}" for d in row["max_abs_diff"].values())
        print(f"  {row['length']:6d} {row['bucket']:6d}{cells}{diffs}")


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


def print_executorch(et: dict, decode: dict, args: argparse.Namespace) -> bool:
    """Print the ExecuTorch child's results; whether they failed (a token id mismatch)."""
    print("\nExecuTorch (XNNPACK), in a separate process (" + args.et_python + "): "
          "NOT measured side by side with NEE; compare through the ratios to eager")
    if "error" in et:
        print(f"  not available: {et['error']}")
        return False
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
    et_ratio = statistics.median(et["ratios"])
    for name in ("bucketed", "symbolic"):
        if f"{name}/eager" in decode["ratios"]:
            nee_ratio = statistics.median(decode["ratios"][f"{name}/eager"])
            print(f"  => {LABELS[name]}/ET tokens/s ~ {nee_ratio / et_ratio:.2f} (median "
                  f"{name}/eager here / median ET/eager there: two processes)")
    if not et["mismatched_runs"] and et["ids"] == decode["reference"]:
        print("  token ids: ET == eager_generate in every run")
        return False
    print(f"  !!! TOKEN ID MISMATCH between ExecuTorch and torch eager (runs "
          f"{et['mismatched_runs']}) !!!")
    print(f"  eager: {decode['reference']}\n  ET:    {et['ids']}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", default="1,32,64,128,256")
    parser.add_argument("--no-symbolic", action="store_true",
                        help="skip the symbolic program (bucketed vs eager only)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="prefill lengths")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens for decode")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="decode rounds")
    parser.add_argument("--prefill-runs", type=int, default=10, help="prefill rounds per length")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--executorch", action="store_true", help="time ExecuTorch too")
    parser.add_argument("--et-python", default=DEFAULT_ET_PYTHON,
                        help="python of a venv with executorch==1.5.1")
    args = parser.parse_args()
    buckets = sorted({int(b) for b in args.buckets.split(",")})
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.prompt < 1 or args.new_tokens < 2 or args.prompt + args.new_tokens > MAX_SEQ:
        parser.error(f"need --prompt >= 1, --new-tokens >= 2, prompt + new tokens <= {MAX_SEQ}")
    if not buckets or buckets[0] < 1 or buckets[-1] > MAX_SEQ:
        parser.error(f"need --buckets in [1, {MAX_SEQ}]")
    if not sizes or min(sizes) < 1 or max(sizes) > buckets[-1]:
        parser.error(f"need --sizes in [1, {buckets[-1]}] (the largest bucket)")
    pin_threads(args.threads)

    import numpy as np
    import torch

    from runtime_py.program import Program
    from toolchain.modules import load_file

    torch.set_num_threads(args.threads)
    wall = time.perf_counter()
    mod = load_file(EXAMPLE)
    model = mod.Model()
    failed = False
    print(f"examples/llama.py, {args.threads} thread(s), torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        bundles = export_bundles(mod, model, buckets, Path(tmp), not args.no_symbolic)
        programs = {name: Program.load(path, threads=args.threads)
                    for name, (path, _) in bundles.items()}
        for name, (path, seconds) in bundles.items():
            what = f"buckets {buckets}" if name == "bucketed" else f"seq in [1, {MAX_SEQ}]"
            print(f"export {name}: {seconds:.1f} s for {what} ({path.stat().st_size / 2**20:.1f}"
                  f" MiB bundle, {programs[name].arena_bytes / 2**10:.0f} KiB arenas, "
                  f"{programs[name].state_bytes / 2**10:.0f} KiB state)")
        prepared = prepare_ms(programs["symbolic"], sizes) if "symbolic" in programs else {}

        prompt = prompt_ids(args.prompt)
        decode, same = bench_decode(mod, model, programs, prompt, args.new_tokens, args.repeats)
        one = np.zeros((1, 1), np.int64), np.zeros(1, np.int64)
        step = programs["bucketed"].bucket(*one).dim.size
        failed |= print_decode(decode, same, args, step)
        rows = bench_prefill(mod, model, programs, sizes, args.prefill_runs)
        print_prefill(rows, prepared, args.prefill_runs)
        for program in programs.values():
            program.close()

    if args.executorch:
        et = run_executorch(args.et_python, prompt, args.new_tokens, args.repeats, args.threads)
        failed |= print_executorch(et, decode, args)
    print(f"\ntotal time: {time.perf_counter() - wall:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
