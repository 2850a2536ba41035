"""The verifier: hand-made broken plans, and agreement with a brute-force pairwise check."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memplan_helpers import brute_overlap, requests

from toolchain.memory_plan import Arena, BufferRequest, Placement, Plan, PlanError, verify_plan

A = BufferRequest("a", 64, 0, 4)
B = BufferRequest("b", 64, 2, 6)
C = BufferRequest("c", 64, 4, 8)  # starts when a ends: may share a's bytes


def plan_of(offsets: dict[str, int], size: int = 1024, tier: str = "default") -> Plan:
    placements = tuple(Placement(i, o, tier) for i, o in offsets.items())
    return Plan(placements, (Arena(tier, size, 0),), "hand-made")


def test_valid_hand_made_plan_passes():
    verify_plan([A, B, C], plan_of({"a": 0, "b": 64, "c": 0}))


def test_overlap_names_both_buffers_with_offsets_and_lifetimes():
    with pytest.raises(PlanError) as err:
        verify_plan([A, B], plan_of({"a": 0, "b": 0}))
    message = str(err.value)
    assert "'a' (offset 0, size 64, steps [0, 4))" in message
    assert "'b' (offset 0, size 64, steps [2, 6))" in message


def test_overlap_inside_alignment_padding_is_caught():
    small = BufferRequest("s", 10, 0, 4, alignment=64)
    with pytest.raises(PlanError, match="overlap"):
        verify_plan([small, B], plan_of({"s": 0, "b": 0}))


@pytest.mark.parametrize(
    ("offsets", "size", "match"),
    [
        ({"a": 1024 - 32}, 1024, "'a' .* outside arena 'default' of 1024 bytes"),
        ({"a": -64}, 1024, "outside arena"),
        ({"a": 32}, 1024, "not aligned to 64"),
    ],
)
def test_out_of_arena_and_misaligned_are_caught(offsets, size, match):
    with pytest.raises(PlanError, match=match):
        verify_plan([A], plan_of(offsets, size))


def test_every_request_needs_exactly_one_placement():
    with pytest.raises(PlanError, match=r"without a placement: \['b'\]"):
        verify_plan([A, B], plan_of({"a": 0}))
    with pytest.raises(PlanError, match="unknown buffers"):
        verify_plan([A], plan_of({"a": 0, "zz": 64}))
    twice = Plan((Placement("a", 0), Placement("a", 64)), (Arena("default", 1024, 0),), "x")
    with pytest.raises(PlanError, match="placed twice"):
        verify_plan([A], twice)
    with pytest.raises(PlanError, match="no arena"):
        verify_plan([A], Plan((Placement("a", 0, "sram"),), (), "x"))


@settings(max_examples=150, deadline=None)
@given(requests(), st.data())
def test_verifier_agrees_with_brute_force(reqs, data):
    offsets = {r.id: r.alignment * data.draw(st.integers(0, 6)) for r in reqs}
    plan = plan_of(offsets, size=max([offsets[r.id] + r.footprint for r in reqs], default=0))
    if brute_overlap(reqs, offsets):
        with pytest.raises(PlanError, match="overlap"):
            verify_plan(reqs, plan)
    else:
        verify_plan(reqs, plan)
