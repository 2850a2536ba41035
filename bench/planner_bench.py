"""Planner benchmark: greedy, the exact search, every portfolio engine alone and the portfolio,
on the standard benchmark files, on generated zero-waste instances and on the example models'
real graphs.

Prints one table measured in a single run: each cell is the peak's gap to the best known peak
in % (or ``-`` when the engine found nothing better than greedy) and the seconds it took. Best
known peaks come from the benchmark directory's README.md table; for generated instances and
models it is the lower bound, which a plan reaches there. The targets: the portfolio at the best
known peak on every file within 30 s, and no model graph worse than the search alone.
Usage: ``python bench/planner_bench.py [DIR] [--time-limit S] [--engine-limit S] [--no-models]
[--generated N]``.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from pathlib import Path

from toolchain.memory_plan import (
    BufferRequest,
    Plan,
    lower_bound,
    plan_greedy,
    plan_search,
    read_benchmark_csv,
    verify_plan,
)
from toolchain.memory_plan.core import plan_peak
from toolchain.memory_plan.instances import perfect_packing
from toolchain.memory_plan.portfolio import engines, plan_portfolio

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT.parent / "shared" / "planner-benchmarks"


def best_known(readme: Path) -> dict[str, int]:
    """File name -> best known peak, from the README's markdown table (last column)."""
    rows = re.findall(r"^\|\s*(\S+\.csv)\s*\|.*\|\s*(\d+)\s*\|\s*$", readme.read_text(), re.M)
    return {name: int(peak) for name, peak in rows}


def _cell(requests: list[BufferRequest], best: int, planner: Callable[[], Plan]) -> str:
    """``gap%/seconds`` of one verified plan."""
    start = time.monotonic()
    plan = planner()
    elapsed = time.monotonic() - start
    verify_plan(requests, plan)
    return f"{100 * (plan_peak(plan) - best) / best:.2f}/{elapsed:.1f}"


def row(name: str, requests: list[BufferRequest], best: int, args: argparse.Namespace) -> list[str]:
    """The table row of one instance: greedy, search, each engine alone (in this process),
    then the portfolio on every CPU."""
    def alone(engine: str) -> Callable[[], Plan]:
        return lambda: plan_portfolio(requests, args.engine_limit, workers=1, names=[engine])

    cells = [_cell(requests, best, lambda: plan_greedy(requests)),
             _cell(requests, best, lambda: plan_search(requests, args.engine_limit))]
    cells += [_cell(requests, best, alone(e)) for e in engines()]
    cells.append(_cell(requests, best, lambda: plan_portfolio(requests, args.time_limit)))
    return [name, str(len(requests)), str(lower_bound(requests)), str(best), *cells]


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


def instances(args: argparse.Namespace) -> list[tuple[str, list[BufferRequest], int]]:
    """(name, requests, best known peak) of every instance benchmarked."""
    known = best_known(args.dir / "README.md")
    found = [(p.name, reqs, known.get(p.name, lower_bound(reqs)))
             for p in sorted(args.dir.glob("*.csv")) for reqs in [read_benchmark_csv(p)]]
    for n in (100, 150, 200, 300)[: args.generated]:
        for seed in range(3):
            reqs = perfect_packing(n, seed)
            found.append((f"perfect-{n}-{seed}", reqs, lower_bound(reqs)))
    if not args.no_models:
        found += [(name, reqs, lower_bound(reqs)) for name, reqs in model_requests().items()]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--time-limit", type=float, default=30.0, help="the portfolio's budget")
    parser.add_argument("--engine-limit", type=float, default=10.0,
                        help="the budget of the search and of each engine alone")
    parser.add_argument("--generated", type=int, default=4,
                        help="sizes of generated instances (100, 150, 200, 300 buffers; 3 each)")
    parser.add_argument("--no-models", action="store_true", help="skip the example models")
    args = parser.parse_args()
    header = ["instance", "buffers", "lower", "best", "greedy", "search",
              *engines(), "portfolio"]
    print("cells: gap to the best known peak in % / seconds")
    print(f"{header[0]:<26}" + "".join(f"{h:>13}" for h in header[1:]))
    for name, requests, best in instances(args):
        first, *cells = row(name, requests, best, args)
        print(f"{first:<26}" + "".join(f"{c:>13}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
