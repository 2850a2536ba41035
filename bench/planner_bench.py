"""Planner benchmark: naive / greedy / search peaks on the standard benchmark files.

Prints one table measured in a single run; best known peaks come from the README.md table
of the benchmark directory. Usage: ``python bench/planner_bench.py [DIR] [--time-limit S]``.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from toolchain.memory_plan import (
    lower_bound,
    plan_greedy,
    plan_naive,
    plan_search,
    read_benchmark_csv,
    verify_plan,
)

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "planner-benchmarks"


def best_known(readme: Path) -> dict[str, int]:
    """File name -> best known peak, from the README's markdown table (last column)."""
    rows = re.findall(r"^\|\s*(\S+\.csv)\s*\|.*\|\s*(\d+)\s*\|\s*$", readme.read_text(), re.M)
    return {name: int(peak) for name, peak in rows}


def peak(plan) -> int:
    return max(a.size for a in plan.arenas)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--time-limit", type=float, default=30.0)
    args = parser.parse_args()
    known = best_known(args.dir / "README.md")
    header = ("file", "buffers", "lower", "naive", "greedy", "search", "best", "gap %", "time s")
    print("{:<26}{:>8}{:>11}{:>11}{:>11}{:>11}{:>11}{:>8}{:>8}".format(*header))
    for path in sorted(args.dir.glob("*.csv")):
        requests = read_benchmark_csv(path)
        naive, greedy = plan_naive(requests), plan_greedy(requests)
        start = time.monotonic()
        search = plan_search(requests, time_limit=args.time_limit)
        elapsed = time.monotonic() - start
        for plan in (naive, greedy, search):
            verify_plan(requests, plan)
        best = known.get(path.name)
        gap = f"{100 * (peak(search) - best) / best:.2f}" if best else "-"
        print(
            f"{path.name:<26}{len(requests):>8}{lower_bound(requests):>11}{peak(naive):>11}"
            f"{peak(greedy):>11}{peak(search):>11}{best or '-':>11}{gap:>8}{elapsed:>8.2f}"
        )


if __name__ == "__main__":
    main()
