"""Hypothesis strategies and brute-force oracles shared by the memory-plan tests."""

from __future__ import annotations

from hypothesis import strategies as st

from toolchain.memory_plan import BufferRequest
from toolchain.memory_plan.instances import perfect_packing


@st.composite
def requests(draw, max_buffers: int = 14) -> list[BufferRequest]:
    """Random buffers: sizes 0..300, lifetimes inside steps 0..26 (possibly empty), one
    alignment for all (1 or 64) or mixed ones."""
    alignments = draw(st.sampled_from([(1,), (64,), (1, 4, 16, 64)]))
    n = draw(st.integers(0, max_buffers))
    out = []
    for k in range(n):
        start = draw(st.integers(0, 20))
        out.append(
            BufferRequest(
                id=f"b{k}",
                size=draw(st.integers(0, 300)),
                start=start,
                end=start + draw(st.integers(0, 6)),
                alignment=draw(st.sampled_from(alignments)),
            )
        )
    return out


def perfect_packings(max_buffers: int = 8) -> st.SearchStrategy[list[BufferRequest]]:
    """Buffers tiling a steps x bytes rectangle (``perfect_packing``): zero waste, so the lower
    bound (the rectangle's height) is achievable."""
    return st.builds(perfect_packing, st.integers(1, max_buffers), st.integers(0, 2**16),
                     st.integers(2, 12), st.integers(2, 64), st.just(1), st.just(1))


def brute_lower_bound(reqs: list[BufferRequest]) -> int:
    """Max over every step of the live footprints, by enumeration."""
    steps = {r.start for r in reqs}
    return max((sum(r.footprint for r in reqs if r.start <= t < r.end) for t in steps), default=0)


def brute_overlap(reqs: list[BufferRequest], offsets: dict[str, int]) -> bool:
    """True if two buffers live at a common step share bytes (pairwise check)."""
    real = [r for r in reqs if r.start < r.end and r.footprint]
    return any(
        a.start < b.end
        and b.start < a.end
        and offsets[a.id] < offsets[b.id] + b.footprint
        and offsets[b.id] < offsets[a.id] + a.footprint
        for i, a in enumerate(real)
        for b in real[i + 1 :]
    )
