"""Picture of a plan: time on x, address on y, one rectangle per buffer, one panel per arena."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .types import BufferRequest, Plan

_LABEL_LIMIT = 60  # label rectangles with their ids only when an arena has at most this many


def draw_plan(requests: Sequence[BufferRequest], plan: Plan, path: str | Path) -> None:
    """Write a PNG of ``plan`` to ``path`` (matplotlib with the Agg canvas, imported here)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    placed = plan.by_id()
    fig = Figure(figsize=(10, 3.5 * max(len(plan.arenas), 1)), layout="constrained")
    FigureCanvasAgg(fig)
    for k, arena in enumerate(plan.arenas):
        ax = fig.add_subplot(len(plan.arenas), 1, k + 1)
        mine = [r for r in requests if placed[r.id].tier == arena.tier]
        for n, r in enumerate(mine):
            y = placed[r.id].offset
            ax.add_patch(
                Rectangle(
                    (r.start, y),
                    max(r.end - r.start, 0.2),
                    r.footprint,
                    facecolor=f"C{n % 10}",
                    edgecolor="black",
                    linewidth=0.4,
                    alpha=0.85,
                )
            )
            if len(mine) <= _LABEL_LIMIT:
                ax.text(
                    r.start + (r.end - r.start) / 2,
                    y + r.footprint / 2,
                    r.id,
                    ha="center",
                    va="center",
                    fontsize=7,
                    clip_on=True,
                )
        ax.axhline(arena.size, color="red", linewidth=1, label=f"arena {arena.size} B")
        ax.axhline(
            arena.lower_bound,
            color="green",
            linestyle="--",
            linewidth=1,
            label=f"lower bound {arena.lower_bound} B",
        )
        ax.set_xlim(min((r.start for r in mine), default=0), max((r.end for r in mine), default=1))
        ax.set_ylim(0, max(arena.size, 1) * 1.05)
        ax.set_title(f"tier {arena.tier!r}: {len(mine)} buffers ({plan.planner})")
        ax.set_xlabel("step")
        ax.set_ylabel("address (bytes)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.savefig(path, dpi=110)
