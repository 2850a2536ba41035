"""A fuzzer for the loader: mutated bundles must be refused with a NeeError or run unchanged.

Usage: python tests/bundle_fuzz.py BUNDLE [--cases N] [--kind bytes|fields] [--seed S]

Each case mutates BUNDLE and loads and runs the result on seeded random inputs. Outcomes:
  refused    a NeeError at load or run (what the runtime promises)
  same       it ran and every output equals the original's (the mutation hit unused bytes)
  changed    it ran with different outputs: a silent acceptance (a failure)
  crash      any other exception (a failure), counted by type and where it was raised
``bytes`` mutates the file (bit flips, overwrites, truncation, inserted and deleted bytes);
``fields`` rewrites one field of the decoded tables (a shape, stride, index, size, offset,
step, dtype, kind, argument value; nodes swapped or dropped) and re-packs it as a valid bundle,
checksums recomputed, so only semantic validation stands in the way.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime_py.errors import NeeError  # noqa: E402
from runtime_py.fbs.Bundle import Bundle, BundleT  # noqa: E402
from runtime_py.format import SIZE_PREFIX_BYTES, segment_base  # noqa: E402
from runtime_py.program import Program  # noqa: E402
from toolchain.serialize.bundle import write_to  # noqa: E402

Outcome = str


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """One byte-level mutation of ``data``."""
    out = bytearray(data)
    kind = rng.randrange(5)
    at = rng.randrange(len(out))
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        out[at:at + 4] = bytes(rng.randrange(256) for _ in range(4))
    elif kind == 2:
        del out[at:]
    elif kind == 3:
        out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    else:
        del out[at:at + rng.randint(1, 8)]
    return bytes(out)


_BIG = (0, 1, -1, 2, 3, 7, 64, 255, 1 << 16, 1 << 31, 1 << 35, (1 << 63) - 1)


def _any_int(rng: random.Random, old: int) -> int:
    return rng.choice([old + 1, old - 1, old * 2, *_BIG])


def _ints(rng: random.Random, values: list[int]) -> list[int]:
    values = list(values)
    if values and rng.random() < 0.8:
        i = rng.randrange(len(values))
        values[i] = _any_int(rng, int(values[i]))
    elif values:
        values.pop(rng.randrange(len(values)))
    else:
        values.append(_any_int(rng, 0))
    return values


def _tensor(b: Any, rng: random.Random) -> None:
    t = rng.choice(b.tensors)
    field = rng.choice(["shape", "strides", "storage", "byteOffset", "dtype", "storageKind",
                        "aliasOf"])
    value = getattr(t, field)
    if field in ("shape", "strides"):
        setattr(t, field, _ints(rng, [int(v) for v in value]))
    else:
        setattr(t, field, abs(_any_int(rng, int(value))) % (1 << 31) if field != "aliasOf"
                else _any_int(rng, int(value)) % (1 << 31))


def _node(b: Any, rng: random.Random) -> None:
    nodes = b.nodes
    choice = rng.randrange(4)
    if choice == 0 and len(nodes) > 1:
        i, j = rng.sample(range(len(nodes)), 2)
        nodes[i], nodes[j] = nodes[j], nodes[i]
    elif choice == 1 and len(nodes) > 1:
        nodes.pop(rng.randrange(len(nodes)))
    else:
        node = rng.choice(nodes)
        arg = rng.choice(node.args)
        if arg.tensors is not None and len(arg.tensors) and rng.random() < 0.5:
            arg.tensors = _ints(rng, [int(v) for v in arg.tensors])
        elif arg.ints is not None and len(arg.ints):
            arg.ints = _ints(rng, [int(v) for v in arg.ints])
        elif arg.floats is not None and len(arg.floats):
            arg.floats = [rng.choice([0.0, -1.0, 1e30, float("nan"), float("inf")])]
        else:
            arg.kind = rng.randrange(12)


def _plan(b: Any, rng: random.Random) -> None:
    if rng.random() < 0.3:
        arena = rng.choice(b.plan.arenas)
        arena.size = abs(_any_int(rng, int(arena.size)))
        return
    buf = rng.choice(b.plan.buffers)
    field = rng.choice(["tier", "offset", "size", "firstStep", "endStep"])
    setattr(buf, field, abs(_any_int(rng, int(getattr(buf, field)))) % (1 << 31))


def _io(b: Any, rng: random.Random) -> None:
    field = rng.choice(["inputs", "outputs"])
    setattr(b, field, _ints(rng, [int(v) for v in getattr(b, field)]))


def _segment(b: Any, rng: random.Random) -> None:
    """An offset or size moved a little (the packer writes each blob at its offset, so a far
    one would only make a huge file), or set to another segment's."""
    seg, other = rng.choice(b.segments), rng.choice(b.segments)
    field = rng.choice(["offset", "size"])
    old = int(getattr(seg, field))
    setattr(seg, field, max(0, rng.choice([old + 64, old - 64, old + 1, old - 1, 0,
                                           int(getattr(other, field))])))


FIELD_MUTATIONS: list[Callable[[Any, random.Random], None]] = [_tensor, _tensor, _node, _node,
                                                               _plan, _io, _segment]


def repacked(data: bytes, mutate: Callable[[Any], None]) -> bytes:
    """Bundle ``data`` with its decoded tables changed by ``mutate``, re-packed as a valid
    bundle: the segments' bytes kept, the checksums recomputed."""
    bundle = BundleT.InitFromObj(Bundle.GetRootAs(data, SIZE_PREFIX_BYTES))
    base = segment_base(int.from_bytes(data[:4], "little"))
    blobs = [data[base + s.offset:base + s.offset + s.size] for s in bundle.segments or []]
    mutate(bundle)
    with tempfile.TemporaryFile() as f:
        write_to(f, bundle, blobs)
        f.seek(0)
        return f.read()


def mutate_fields(data: bytes, rng: random.Random) -> bytes:
    """One field of the decoded tables rewritten, re-packed with its checksums recomputed."""
    return repacked(data, lambda bundle: rng.choice(FIELD_MUTATIONS)(bundle, rng))


MUTATORS = {"bytes": mutate_bytes, "fields": mutate_fields}


def run_case(data: bytes, folder: Path, inputs: list[np.ndarray],
             expected: list[np.ndarray]) -> tuple[Outcome, str]:
    """Load and run ``data``; the outcome and, for a crash, where it was raised."""
    path = folder / "case.nee"
    path.write_bytes(data)
    try:
        with Program.load(path, max_arena_bytes=1 << 30) as program:
            got = program.run(*inputs)
            same = len(got) == len(expected) and all(
                np.array_equal(a, b, equal_nan=True) for a, b in zip(got, expected, strict=True))
    except NeeError:
        return "refused", ""
    except Exception as e:  # everything else is what the fuzzer looks for
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return "crash", f"{type(e).__name__} at {Path(frame.filename).name}:{frame.lineno}"
    return ("same" if same else "changed"), ""


def fuzz(bundle: Path, cases: int, kind: str, seed: int) -> collections.Counter:
    """Counts of outcomes (and crash sites) over ``cases`` seeded mutations of ``bundle``."""
    data = bundle.read_bytes()
    with Program.load(bundle) as program:
        rng = np.random.default_rng(seed)
        inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in program.inputs]
        expected = [o.copy() for o in program.run(*inputs)]
    rng = random.Random(seed)
    counts: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(cases):
            try:
                mutated = MUTATORS[kind](data, rng)
            except (IndexError, ValueError, AttributeError, TypeError):
                continue  # a rewrite the packer cannot express: not a bundle to try
            outcome, where = run_case(mutated, Path(tmp), inputs, expected)
            counts[outcome] += 1
            if where:
                counts[f"crash: {where}"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--kind", choices=sorted(MUTATORS), default="bytes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for outcome, count in sorted(fuzz(args.bundle, args.cases, args.kind, args.seed).items()):
        print(f"{count:8d}  {outcome}")


if __name__ == "__main__":
    main()
