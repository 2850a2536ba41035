"""Planner benchmark: naive / greedy / search peaks on the standard benchmark files and on the
example models' real graphs.

Prints tables measured in a single run; best known peaks come from the README.md table of the
benchmark directory; for the models the target is the lower bound.
Usage: ``python bench/planner_bench.py [DIR] [--time-limit S] [--no-models]``.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from toolchain.memory_plan import (
    BufferRequest,
    lower_bound,
    plan_greedy,
    plan_naive,
    plan_search,
    read_benchmark_csv,
    verify_plan,
)
from toolchain.memory_plan.core import plan_peak

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT.parent / "shared" / "planner-benchmarks"
HEADER = "{:<26}{:>8}{:>11}{:>11}{:>11}{:>11}{:>11}{:>8}{:>8}"


def best_known(readme: Path) -> dict[str, int]:
    """File name -> best known peak, from the README's markdown table (last column)."""
    rows = re.findall(r"^\|\s*(\S+\.csv)\s*\|.*\|\s*(\d+)\s*\|\s*$", readme.read_text(), re.M)
    return {name: int(peak) for name, peak in rows}


def row(name: str, requests: list[BufferRequest], best: int | None, time_limit: float) -> str:
    """One table row: naive, greedy and search peaks (all verified) and the gap to ``best``."""
    naive, greedy = plan_naive(requests), plan_greedy(requests)
    start = time.monotonic()
    search = plan_search(requests, time_limit=time_limit)
    elapsed = time.monotonic() - start
    for plan in (naive, greedy, search):
        verify_plan(requests, plan)
    peak = plan_peak(search)
    gap = f"{100 * (peak - best) / best:.2f}" if best else "-"
    return (f"{name:<26}{len(requests):>8}{search.arenas[0].lower_bound:>11}"
            f"{plan_peak(naive):>11}{plan_peak(greedy):>11}{peak:>11}{best or '-':>11}{gap:>8}"
            f"{elapsed:>8.2f}")


def model_requests() -> dict[str, list[BufferRequest]]:
    """Buffer requests of every example model's exported graph (after all passes)."""
    from toolchain.export.capture import export_program, to_graph
    from toolchain.memory_plan.lifetimes import buffer_requests
    from toolchain.modules import load_file, model_files
    from toolchain.pipeline import run_passes

    found = {}
    for path in model_files(ROOT / "examples"):
        module = load_file(path)
        graph = to_graph(export_program(module.Model(), module.example_inputs()))
        found[path.stem] = buffer_requests(run_passes(graph, verify_each=False))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--no-models", action="store_true", help="skip the example models")
    args = parser.parse_args()
    known = best_known(args.dir / "README.md")
    print(HEADER.format("file", "buffers", "lower", "naive", "greedy", "search", "best",
                        "gap %", "time s"))
    for path in sorted(args.dir.glob("*.csv")):
        print(row(path.name, read_benchmark_csv(path), known.get(path.name), args.time_limit))
    if not args.no_models:
        print("\n" + HEADER.format("model graph", "buffers", "lower", "naive", "greedy",
                                   "search", "lower", "gap %", "time s"))
        for name, requests in model_requests().items():
            print(row(name, requests, lower_bound(requests), args.time_limit))


if __name__ == "__main__":
    main()
