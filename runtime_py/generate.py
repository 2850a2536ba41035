"""Greedy token generation from a decoder bundle with a KV cache in its state.

The bundle's program takes token ids ``int64[1, L]`` and the position of the first of them
``int64[1]``, returns logits ``float[1, L, vocab]``, and keeps the keys and values of every
position it has seen in its state (e.g. examples/llama.py exported with buckets of ``L`` or as
one symbolic program). The prompt is prefilled in runs of at most the dim's max, then each new
token is one run at L = 1 (the smallest bucket, or the symbolic program at 1).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_py.errors import InputError
from runtime_py.program import Program


@dataclass
class GenerationStats:
    """Timings of one ``generate`` call, filled in as it goes."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0  # the runs after the prefill (new_tokens - 1 of them)

    @property
    def prefill_ms(self) -> float:
        return self.prefill_seconds * 1e3

    @property
    def decode_tokens_per_s(self) -> float:
        steps = self.new_tokens - 1
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds else 0.0

    def __str__(self) -> str:
        return (f"prefill {self.prompt_tokens} tokens: {self.prefill_ms:.1f} ms; decode "
                f"{self.new_tokens} tokens: {self.decode_tokens_per_s:.1f} tokens/s")


def generate(program: Program, prompt_ids: Sequence[int], max_new_tokens: int,
             stats: GenerationStats | None = None) -> Iterator[int]:
    """Yield up to ``max_new_tokens`` greedy next-token ids after ``prompt_ids``, starting
    from a reset state; ``stats`` (if given) receives the timings."""
    _check_decoder(program, prompt_ids, max_new_tokens)
    stats = stats if stats is not None else GenerationStats()
    stats.prompt_tokens = len(prompt_ids)
    program.reset()
    chunk = program.dim.max if program.dim is not None else program.inputs[0].shape[1]
    prompt = np.asarray(prompt_ids, np.int64)[None, :]
    start = time.perf_counter()
    for first in range(0, prompt.shape[1], chunk):
        logits = program.run(prompt[:, first:first + chunk], np.array([first], np.int64))[0]
    token = int(np.argmax(logits[0, -1]))
    stats.prefill_seconds, stats.new_tokens = time.perf_counter() - start, 1
    yield token
    step = np.zeros((1, 1), np.int64)
    position = np.zeros(1, np.int64)
    start = time.perf_counter()
    for k in range(1, max_new_tokens):
        step[0, 0], position[0] = token, prompt.shape[1] + k - 1
        token = int(np.argmax(program.run(step, position)[0][0, -1]))
        stats.decode_seconds, stats.new_tokens = time.perf_counter() - start, k + 1
        yield token


def _check_decoder(program: Program, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    specs = program.inputs
    if (len(specs) != 2 or [s.dtype for s in specs] != ["int64", "int64"]
            or len(specs[0].shape) != 2 or specs[1].shape != (1,)
            or len(program.outputs) != 1 or len(program.outputs[0].shape) != 3):
        raise InputError(f"program {program.path}", "a decoder: tokens int64[1, L] and "
                         "start_pos int64[1] in, logits [1, L, vocab] out",
                         f"inputs {[str(s) for s in specs]}, outputs "
                         f"{[str(s) for s in program.outputs]}",
                         "export a decoder like examples/llama.py")
    if not prompt_ids or max_new_tokens < 1:
        raise InputError("generate", "a non-empty prompt and max_new_tokens >= 1",
                         f"{len(prompt_ids)} prompt ids, max_new_tokens {max_new_tokens}",
                         "give at least one prompt id and one new token")
