"""``nee-plan``: plan a benchmark CSV and report how close the plan is to the lower bound."""

from __future__ import annotations

import time
from pathlib import Path

import click

from runtime_py.cli import version_option

from .benchmark_io import read_benchmark_csv, write_solution_csv
from .core import PlanError, peak_live_set, plan_peak
from .plan import PLANNERS, plan_memory


@click.command()
@version_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--capacity", type=int, help="Bytes available; fail if the plan needs more.")
@click.option("--time-limit", default=5.0, show_default=True, help="Search budget in seconds.")
@click.option("--planner", type=click.Choice(sorted(PLANNERS)), default="auto", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the solution as id,offset CSV.",
)
def main(
    file: Path, capacity: int | None, time_limit: float, planner: str, output: Path | None
) -> None:
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
        plan = plan_memory(requests, planner=planner, time_limit=time_limit)
    except PlanError as e:
        raise click.ClickException(str(e)) from e
    elapsed = time.monotonic() - start
    peak = plan_peak(plan)
    gap = 100.0 * (peak - lb) / lb if lb else 0.0
    click.echo(f"buffers      {len(requests)}")
    click.echo(f"lower bound  {lb}")
    click.echo(f"peak         {peak}  ({plan.planner})")
    click.echo(f"gap          {gap:.2f} %")
    click.echo(f"time         {elapsed:.2f} s")
    if capacity is not None and peak > capacity:
        raise click.ClickException(
            f"plan needs {peak} bytes but only {capacity} are available "
            f"({peak - capacity} over; lower bound {lb})"
        )
    if output is not None:
        write_solution_csv(output, plan)
        click.echo(f"wrote {output}")
