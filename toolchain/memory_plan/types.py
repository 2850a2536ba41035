"""Plain, frozen data types of the memory planner: requests in, plan out.

A planner is a pure function ``Sequence[BufferRequest] -> Plan``. Lifetimes are half-open step
intervals over the instruction order: a buffer written at step ``start`` and last read at step
``k`` has ``end = k + 1``. Two requests conflict iff ``a.start < b.end and b.start < a.end``.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime_py.format import align


@dataclass(frozen=True)
class BufferRequest:
    """One buffer to place: ``size`` bytes, live over steps ``[start, end)``."""

    id: str
    size: int
    start: int
    end: int
    alignment: int = 64
    tier: str | None = None  # pin to a tier by name; None lets the tier rule decide

    @property
    def footprint(self) -> int:
        """Bytes reserved for this buffer: ``size`` rounded up to ``alignment``."""
        return align(self.size, self.alignment)


@dataclass(frozen=True)
class Placement:
    """Where one request went: byte ``offset`` inside the arena of ``tier``."""

    id: str
    offset: int
    tier: str = "default"


@dataclass(frozen=True)
class Tier:
    """One memory tier of a board, fastest first in a board recipe (e.g. SRAM, then DRAM)."""

    name: str
    capacity: int  # bytes available for the activation arena in this tier


@dataclass(frozen=True)
class Arena:
    """One arena per tier: its planned size and the lower bound of what was placed in it."""

    tier: str
    size: int
    lower_bound: int


@dataclass(frozen=True)
class Plan:
    """The result of planning: one placement per request, one arena per used tier."""

    placements: tuple[Placement, ...]
    arenas: tuple[Arena, ...]
    planner: str  # name of the algorithm that produced this plan, e.g. "greedy-by-size"

    def by_id(self) -> dict[str, Placement]:
        """Placements keyed by request id."""
        return {p.id: p for p in self.placements}
