"""``nee-plan`` through click's CliRunner, the benchmark CSV round trip, and the plan picture."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolchain.memory_plan import (
    Arena,
    Placement,
    Plan,
    Tier,
    lower_bound,
    plan_tiers,
    read_benchmark_csv,
    verify_plan,
)
from toolchain.memory_plan.cli import main
from toolchain.memory_plan.draw import draw_plan

INPUT_12 = Path(__file__).resolve().parents[3] / "shared" / "planner-benchmarks" / "input.12.csv"
TINY = "id,lower,upper,size\nx1,0,2,10\nx2,1,3,7\nx3,2,4,10\nx4,0,4,3\n"


@pytest.fixture
def tiny_csv(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(TINY)
    return path


def read_solution(path: Path) -> Plan:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return Plan(tuple(Placement(r["id"], int(r["offset"])) for r in rows), (), "read back")


def test_cli_plans_a_tiny_csv_and_writes_a_valid_solution(tiny_csv: Path, tmp_path: Path):
    out = tmp_path / "solution.csv"
    result = CliRunner().invoke(main, [str(tiny_csv), "-o", str(out), "--time-limit", "1"])
    assert result.exit_code == 0, result.output
    reqs = read_benchmark_csv(tiny_csv)
    lb = lower_bound(reqs)
    assert f"lower bound  {lb}" in result.output and "gap" in result.output
    solution = read_solution(out)
    peak = max(p.offset + r.size for p, r in zip(solution.placements, reqs, strict=True))
    verify_plan(reqs, Plan(solution.placements, (Arena("default", peak, lb),), "read back"))
    assert f"peak         {peak}" in result.output


def test_cli_on_input_12_reaches_the_lower_bound():
    if not INPUT_12.exists():
        pytest.skip(f"{INPUT_12} not available")
    result = CliRunner().invoke(main, [str(INPUT_12), "--capacity", "12"])
    assert result.exit_code == 0, result.output
    assert "peak         12" in result.output and "0.00 %" in result.output


def test_cli_fails_clearly_when_capacity_is_too_small(tiny_csv: Path, tmp_path: Path):
    lb = lower_bound(read_benchmark_csv(tiny_csv))
    out = tmp_path / "never.csv"
    result = CliRunner().invoke(main, [str(tiny_csv), "--capacity", str(lb - 1), "-o", str(out)])
    assert result.exit_code != 0 and not out.exists()
    assert f"no plan can fit {lb - 1} bytes: {lb} bytes are live at once" in result.output
    result = CliRunner().invoke(main, [str(tiny_csv), "--capacity", str(lb), "--planner",
                                       "naive", "-o", str(out)])
    assert result.exit_code != 0 and not out.exists()
    assert f"only {lb} are available" in result.output and "needs" in result.output


def test_cli_rejects_malformed_csv(tmp_path: Path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,start,size\nq,0,1\n")
    result = CliRunner().invoke(main, [str(bad)])
    assert result.exit_code != 0 and "missing columns" in result.output


def test_draw_plan_writes_a_png_per_tier(tiny_csv: Path, tmp_path: Path):
    reqs = read_benchmark_csv(tiny_csv)
    plan = plan_tiers(reqs, [Tier("sram", 20), Tier("dram", 100)])
    path = tmp_path / "plan.png"
    draw_plan(reqs, plan, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
