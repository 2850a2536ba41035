"""Planner instances with a known optimum, for tests and ``bench/planner_bench.py``.

``perfect_packing`` cuts a full (time x bytes) rectangle into buffers, so the buffers tile it
without a gap: every step has exactly ``capacity`` bytes live, the lower bound is ``capacity``
and a plan reaching it exists (the cutting). Finding it again is the hard part: in such
zero-waste instances greedy placement lands far above the bound.
"""

from __future__ import annotations

import random

from .types import BufferRequest


def perfect_packing(n: int, seed: int, steps: int = 400, capacity: int = 1 << 20,
                    min_steps: int = 2, min_bytes: int = 64) -> list[BufferRequest]:
    """About ``n`` alignment-1 requests tiling ``steps`` x ``capacity`` exactly (ids ``b0``...):
    the largest rectangle is split in two at a random point, across time or across bytes (the
    longer side in proportion), until there are ``n`` or nothing is left to split. No buffer
    gets fewer than ``min_steps`` steps or ``min_bytes`` bytes unless the whole one has."""
    rng = random.Random(seed)
    boxes = [(0, steps, 0, capacity)]  # (start, end, offset, size)
    while len(boxes) < n:
        boxes.sort(key=lambda b: (b[1] - b[0]) * b[3] / capacity)
        start, end, offset, size = box = boxes.pop()
        by_time = rng.random() < (end - start) / (end - start + steps * size / capacity)
        if by_time and end - start >= 2 * min_steps:
            cut = rng.randint(start + min_steps, end - min_steps)
            boxes += [(start, cut, offset, size), (cut, end, offset, size)]
        elif size >= 2 * min_bytes:
            cut = rng.randint(min_bytes, size - min_bytes)
            boxes += [(start, end, offset, cut), (start, end, offset + cut, size - cut)]
        else:
            boxes.append(box)
            break
    return [BufferRequest(f"b{k}", size, start, end, 1)
            for k, (start, end, _, size) in enumerate(sorted(boxes))]
