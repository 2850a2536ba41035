"""Tier filling: fast tier first, documented eviction order, pins, and the failure report."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from memplan_helpers import requests

from toolchain.memory_plan import BufferRequest, PlanError, Tier, lower_bound, plan_tiers

# Three buffers live together at step 2; "wide" has the largest size x lifetime.
WIDE = BufferRequest("wide", 128, 0, 10)
TALL = BufferRequest("tall", 192, 2, 3)
SMALL = BufferRequest("small", 64, 1, 4)
REQS = [WIDE, TALL, SMALL]


def tiers_of(plan) -> dict[str, str]:
    return {p.id: p.tier for p in plan.placements}


def test_everything_fits_in_the_fast_tier():
    plan = plan_tiers(REQS, [Tier("sram", 384), Tier("dram", 10_000)])
    assert set(tiers_of(plan).values()) == {"sram"}
    assert [(a.tier, a.size) for a in plan.arenas] == [("sram", 384), ("dram", 0)]


def test_spill_moves_the_largest_size_times_lifetime_first():
    plan = plan_tiers(REQS, [Tier("sram", 300), Tier("dram", 10_000)])
    assert tiers_of(plan) == {"wide": "dram", "tall": "sram", "small": "sram"}
    sram, dram = plan.arenas
    assert sram.size <= 300 and sram.lower_bound == 256
    assert dram.size == dram.lower_bound == 128


def test_pinned_requests_stay_in_their_tier():
    pinned = [BufferRequest("w", 128, 0, 10, tier="dram"), TALL, SMALL]
    plan = plan_tiers(pinned, [Tier("sram", 1000), Tier("dram", 1000)])
    assert tiers_of(plan) == {"w": "dram", "tall": "sram", "small": "sram"}
    with pytest.raises(PlanError, match=r"unknown tiers \['flash'\]"):
        plan_tiers([BufferRequest("x", 1, 0, 1, tier="flash")], [Tier("sram", 10)])


def test_failure_reports_each_tier_and_the_largest_live_set():
    with pytest.raises(PlanError) as err:
        plan_tiers(REQS, [Tier("sram", 100), Tier("dram", 150)])
    e = err.value
    assert isinstance(e, ValueError)
    assert "tier 'sram' needs" in str(e) and "100 available" in str(e)
    assert "tier 'dram' needs" in str(e) and "150 available" in str(e)
    assert e.peak_step == 2
    assert set(e.live_ids) == {"wide", "tall", "small"}
    assert f"{lower_bound(REQS)} bytes at step 2" in str(e)


def test_pinned_buffers_that_cannot_fit_fail_even_with_a_slow_tier_left():
    pinned = [BufferRequest("big", 500, 0, 2, tier="sram")]
    with pytest.raises(PlanError, match=r"tier 'sram' needs 512 bytes, 256 available"):
        plan_tiers(pinned, [Tier("sram", 256), Tier("dram", 10_000)])


@settings(max_examples=40, deadline=None)
@given(requests())
def test_tiers_respect_capacities_or_raise(reqs):
    tiers = [Tier("sram", 512), Tier("dram", 1024)]
    try:
        plan = plan_tiers(reqs, tiers, time_limit=0.2)
    except PlanError as e:
        live = [r for r in reqs if r.id in e.live_ids]
        assert sum(r.footprint for r in live) == lower_bound(reqs)
        assert all(r.start <= e.peak_step < r.end for r in live)
        return
    for tier, arena in zip(tiers, plan.arenas, strict=True):
        assert arena.tier == tier.name and arena.size <= tier.capacity
