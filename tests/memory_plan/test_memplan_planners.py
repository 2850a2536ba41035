"""Planner invariants on random requests, and the search on packable / benchmark inputs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from memplan_helpers import brute_lower_bound, perfect_packings, requests

from toolchain.memory_plan import (
    PLANNERS,
    BufferRequest,
    PlanError,
    lower_bound,
    plan_greedy,
    plan_memory,
    plan_naive,
    plan_search,
    read_benchmark_csv,
    verify_plan,
)
from toolchain.memory_plan.core import peak_live_set

BENCHMARKS = Path(__file__).resolve().parents[3] / "shared" / "planner-benchmarks"
FAST = settings(max_examples=60, deadline=None)


def peak(plan) -> int:
    return plan.arenas[0].size


@FAST
@given(requests())
def test_lower_bound_matches_brute_force(reqs):
    assert lower_bound(reqs) == brute_lower_bound(reqs)
    lb, step, ids = peak_live_set(reqs)
    live = [r for r in reqs if r.id in ids]
    assert lb == lower_bound(reqs) == sum(r.footprint for r in live)
    assert all(r.start <= step < r.end for r in live)


@FAST
@given(requests())
def test_every_planner_is_valid_and_ordered(reqs):
    naive, greedy = plan_naive(reqs), plan_greedy(reqs)
    search = plan_search(reqs, time_limit=0.2)
    lb = lower_bound(reqs)
    for plan in (naive, greedy, search):
        verify_plan(reqs, plan)
        assert plan.arenas[0].lower_bound == lb
        assert peak(plan) >= lb
    assert peak(search) <= peak(greedy)
    if len({r.alignment for r in reqs}) <= 1:  # mixed alignments pad differently by order
        assert peak(greedy) <= peak(naive)


@FAST
@given(requests(max_buffers=8))
def test_plan_memory_runs_every_planner(reqs):
    for name in PLANNERS:
        plan = plan_memory(reqs, planner=name, time_limit=0.1)
        assert [p.id for p in plan.placements] == [r.id for r in reqs]
        assert [a.tier for a in plan.arenas] == ["default"]
    with pytest.raises(PlanError, match="unknown planner"):
        plan_memory(reqs, planner="magic")


def test_empty_request_list_gives_an_empty_arena():
    for name in PLANNERS:
        assert plan_memory([], planner=name).arenas[0].size == 0


@settings(max_examples=40, deadline=None)
@given(perfect_packings())
def test_search_reaches_the_lower_bound_on_perfect_packings(reqs):
    plan = plan_search(reqs, time_limit=5.0)
    verify_plan(reqs, plan)
    assert peak(plan) == lower_bound(reqs)


def test_search_keeps_alignment_and_padding():
    reqs = [BufferRequest(f"a{k}", 100 + k, k, k + 3, alignment=64) for k in range(8)]
    plan = plan_search(reqs, time_limit=1.0)
    verify_plan(reqs, plan)
    assert all(p.offset % 64 == 0 for p in plan.placements)
    assert peak(plan) == lower_bound(reqs) == 3 * 128


def test_invalid_requests_are_rejected():
    with pytest.raises(PlanError, match="duplicate"):
        plan_greedy([BufferRequest("x", 1, 0, 1), BufferRequest("x", 1, 0, 1)])
    with pytest.raises(PlanError, match="invalid request 'y'"):
        plan_naive([BufferRequest("y", 4, 3, 1)])


@pytest.mark.parametrize("name", ["input.12.csv", "tvm_usmp_deep_speech.csv"])
def test_small_benchmarks_reach_the_lower_bound_quickly(name):
    path = BENCHMARKS / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    reqs = read_benchmark_csv(path)
    start = time.monotonic()
    plan = plan_memory(reqs, planner="auto", time_limit=10.0)
    assert time.monotonic() - start < 5.0
    assert peak(plan) == lower_bound(reqs)
