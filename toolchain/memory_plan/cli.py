"""``nee-plan``: plan a benchmark CSV and report how close the plan is to the lower bound.

Long searches print their progress to stderr (best peak so far, gap to the bound); Ctrl-C stops
the search and keeps the best plan found so far.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from runtime_py.cli import version_option

from .benchmark_io import read_benchmark_csv, write_solution_csv
from .core import PlanError, peak_live_set, plan_peak
from .plan import PLANNERS, plan_memory
from .portfolio import Progress, plan_portfolio
from .types import BufferRequest, Plan
from .verify import verify_plan


def _gap(peak: int, bound: int) -> float:
    return 100.0 * (peak - bound) / bound if bound else 0.0


def _show(p: Progress) -> None:
    """One progress line on stderr."""
    answer = {"found": "plan found", "infeasible": "proven too small",
              "unknown": "out of time"}[p.outcome]
    by = f" ({p.engine})" if p.engine else ""
    click.echo(f"{p.elapsed:7.1f} s  {p.tried} bytes: {answer}{by}; best {p.best}, "
               f"bound {p.bound}, gap {_gap(p.best, p.bound):.2f} %", err=True)


def _plan(requests: list[BufferRequest], planner: str, time_limit: float,
          workers: int | None) -> Plan:
    """``auto`` and ``portfolio`` report progress and stop on Ctrl-C with their best plan."""
    if planner not in ("auto", "portfolio"):
        return plan_memory(requests, planner=planner, time_limit=time_limit)
    plan = plan_portfolio(requests, time_limit, workers=workers, progress=_show,
                          stop_on_interrupt=True)
    verify_plan(requests, plan)
    return plan


@click.command()
@version_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--capacity", type=int, help="Bytes available; fail if the plan needs more.")
@click.option("--time-limit", default=30.0, show_default=True,
              help="Search budget in seconds (the search stops early at the lower bound).")
@click.option("--planner", type=click.Choice(sorted(PLANNERS)), default="auto", show_default=True)
@click.option("--workers", type=click.IntRange(1), default=None,
              help="Processes for the portfolio [default: the CPUs available].")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the solution as id,offset CSV.",
)
def main(file: Path, capacity: int | None, time_limit: float, planner: str,
         workers: int | None, output: Path | None) -> None:
    """Plan FILE (id,lower,upper,size rows; half-open lifetimes) into one arena."""
    start = time.monotonic()
    try:
        requests = read_benchmark_csv(file)
        lb, step, live = peak_live_set(requests)
        if capacity is not None and lb > capacity:
            raise PlanError(
                f"no plan can fit {capacity} bytes: {lb} bytes are live at "
                f"once at step {step} ({len(live)} buffers: {', '.join(live[:8])}"
                f"{', ...' if len(live) > 8 else ''})")
        plan = _plan(requests, planner, time_limit, workers)
    except PlanError as e:
        raise click.ClickException(str(e)) from e
    elapsed = time.monotonic() - start
    peak, bound = plan_peak(plan), plan.arenas[0].lower_bound
    click.echo(f"buffers      {len(requests)}")
    click.echo(f"lower bound  {bound}" + (f"  (max live {lb}, raised by proofs)"
                                          if bound > lb else ""))
    click.echo(f"peak         {peak}  ({plan.planner})")
    click.echo(f"gap          {_gap(peak, bound):.2f} %")
    click.echo("status       " + ("optimal" if peak == bound else "best found, not proven optimal"))
    click.echo(f"time         {elapsed:.2f} s")
    if capacity is not None and peak > capacity:
        raise click.ClickException(
            f"plan needs {peak} bytes but only {capacity} are available "
            f"({peak - capacity} over; lower bound {bound})"
        )
    if output is not None:
        write_solution_csv(output, plan)
        click.echo(f"wrote {output}")
