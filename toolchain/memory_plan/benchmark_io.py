"""The standard planner benchmark format (as in google/minimalloc): CSV in, CSV out."""

from __future__ import annotations

import csv
from pathlib import Path

from .core import PlanError
from .types import BufferRequest, Plan

COLUMNS = ("id", "lower", "upper", "size")


def read_benchmark_csv(path: str | Path) -> list[BufferRequest]:
    """Read ``id,lower,upper,size`` rows (half-open lifetimes) as alignment-1 requests."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if missing := [c for c in COLUMNS if c not in (reader.fieldnames or ())]:
            raise PlanError(f"{path}: missing columns {missing}; expected {','.join(COLUMNS)}")
        try:
            return [
                BufferRequest(row["id"], int(row["size"]), int(row["lower"]), int(row["upper"]), 1)
                for row in reader
            ]
        except (TypeError, ValueError) as e:
            raise PlanError(f"{path}, line {reader.line_num}: {e}") from e


def write_solution_csv(path: str | Path, plan: Plan) -> None:
    """Write ``id,offset`` rows, one per placement."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("id", "offset"))
        writer.writerows((p.id, p.offset) for p in plan.placements)
