"""A fuzzer for the loader: mutated bundles must be refused with a NeeError or run unchanged.

Usage: python tests/bundle_fuzz.py BUNDLE [--cases N] [--kind bytes|fields|payload] [--seed S]

Each case mutates BUNDLE and loads and runs the result on seeded random inputs. Outcomes:
  refused    a NeeError at load or run (what the runtime promises)
  same       it ran and every output equals the original's (the mutation hit unused bytes)
  changed    it ran with different outputs, counted by the field rewritten: a failure for a
             byte-level mutation; for a re-packed rewrite, a different program that may be
             well formed (outputs wired to another tensor, a view re-shaped inside its base)
  unwritten  it ran, and its outputs depend on what the arena held before the run: it reads
             memory nothing wrote (a failure)
  crash      any other exception (a failure), counted by type and where it was raised
  hang       a case still running after HANG_SECONDS (a failure)
``bytes`` mutates the file (bit flips, overwrites, truncation, inserted and deleted bytes);
``fields`` rewrites one field of the decoded tables (a shape, stride, index, size, offset,
step, dtype, kind, argument value; nodes swapped or dropped; in any method; state buffers,
buckets and size expressions) and re-packs it as a valid bundle, checksums recomputed, so only
semantic validation stands in the way. ``payload`` flips bits in or overwrites bytes of one
delegate payload (an XNNPACK partition's .tflite model, an NPU command stream) and re-packs it
likewise: what reaches the delegate's own loader (LiteRT verifies its flatbuffer); "changed"
is then a forged model that loads. Every method runs on each case, from a reset state (a
symbolic method at its max and at its min).
"""

from __future__ import annotations

import argparse
import collections
import random
import signal
import sys
import tempfile
import traceback
import zlib
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


def mutate_bytes(data: bytes, rng: random.Random, kinds: int = 5) -> tuple[bytes, str]:
    """One byte-level mutation of ``data``, and what it was; ``kinds=2``: only those keeping
    its length (bit flips, an overwrite)."""
    out = bytearray(data)
    kind = rng.randrange(kinds)
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
    return bytes(out), f"{['bit flips', 'overwrite', 'truncation', 'insert', 'delete'][kind]}"\
        f" at {at}"


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


def _tensor(b: Any, rng: random.Random) -> str:
    i = rng.randrange(len(b.tensors))
    t = b.tensors[i]
    field = rng.choice(["shape", "strides", "storage", "byteOffset", "dtype", "storageKind",
                        "aliasOf"])
    value = getattr(t, field)
    if field in ("shape", "strides"):
        new: Any = _ints(rng, [int(v) for v in value])
    else:
        new = (abs(_any_int(rng, int(value))) % (1 << 31) if field != "aliasOf"
               else _any_int(rng, int(value)) % (1 << 31))
    setattr(t, field, new)
    return f"tensor {i} {field}: {_show(value)} -> {_show(new)}"


def _show(value: Any) -> str:
    return str([v.item() if hasattr(v, "item") else v for v in value]
               if value is not None and not np.isscalar(value) else value)


def _node(b: Any, rng: random.Random) -> str:
    """A node of the program, or of a delegate's reference program, swapped, dropped or with
    one argument rewritten."""
    owners = [("node", b.nodes)] + [(f"delegate {i} node", d.nodes)
                                    for i, d in enumerate(b.delegates or [])]
    where, nodes = rng.choice(owners)
    choice = rng.randrange(4)
    if choice == 0 and len(nodes) > 1:
        i, j = rng.sample(range(len(nodes)), 2)
        nodes[i], nodes[j] = nodes[j], nodes[i]
        return f"{where}s {i} and {j} swapped"
    if choice == 1 and len(nodes) > 1:
        i = rng.randrange(len(nodes))
        nodes.pop(i)
        return f"{where} {i} dropped"
    i = rng.randrange(len(nodes))
    arg = rng.choice(nodes[i].args)
    where = f"{where} {i} {nodes[i].op.decode()} arg {arg.name.decode()}"
    for field in ("tensors", "ints", "floats"):
        old = getattr(arg, field)
        if old is None or not len(old) or (field == "tensors" and rng.random() >= 0.5):
            continue
        new = (_ints(rng, [int(v) for v in old]) if field != "floats"
               else [rng.choice([0.0, -1.0, 1e30, float("nan"), float("inf")])])
        setattr(arg, field, new)
        return f"{where} {field}: {list(old)} -> {new}"
    old, arg.kind = arg.kind, rng.randrange(12)
    return f"{where} kind: {old} -> {arg.kind}"


_ODD_FLOATS = (0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf"))


def _quantization(b: Any, rng: random.Random) -> str:
    """A quantized tensor's scale, zero point or axis rewritten."""
    quantized = [i for i, t in enumerate(b.tensors) if t.quantization is not None]
    if not quantized:
        return _tensor(b, rng)
    i = rng.choice(quantized)
    q = b.tensors[i].quantization
    field = rng.choice(["scale", "zeroPoint", "axis"])
    old = getattr(q, field)
    if field == "axis":
        new: Any = rng.choice([-2, -1, 0, 1, 2, 3, 7])
    elif field == "zeroPoint":
        new = _ints(rng, [int(v) for v in old])
    else:
        new = [float(v) for v in old]
        new[rng.randrange(len(new))] = rng.choice(_ODD_FLOATS)
    setattr(q, field, new)
    return f"tensor {i} quantization {field}: {_show(old)} -> {_show(new)}"


_DELEGATE_FIELDS = ("inputs", "outputs", "inputOffsets", "outputOffsets", "scratch",
                    "fastScratch", "workspace")


def _delegate(b: Any, rng: random.Random) -> str:
    """A delegate's I/O, offsets or workspace sizes rewritten."""
    if not b.delegates:
        return _node(b, rng)
    i = rng.randrange(len(b.delegates))
    field = rng.choice(_DELEGATE_FIELDS)
    old = getattr(b.delegates[i], field)
    new = (_ints(rng, [int(v) for v in old]) if field in _DELEGATE_FIELDS[:4]
           else abs(_any_int(rng, int(old))) % (1 << 40))
    setattr(b.delegates[i], field, new)
    return f"delegate {i} {field}: {_show(old)} -> {_show(new)}"


def _plan(b: Any, rng: random.Random) -> str:
    if rng.random() < 0.3:
        arena = rng.choice(b.plan.arenas)
        old, arena.size = arena.size, abs(_any_int(rng, int(arena.size)))
        return f"arena size: {old} -> {arena.size}"
    i = rng.randrange(len(b.plan.buffers))
    buf = b.plan.buffers[i]
    field = rng.choice(["tier", "offset", "size", "firstStep", "endStep"])
    old = getattr(buf, field)
    setattr(buf, field, abs(_any_int(rng, int(old))) % (1 << 31))
    return f"buffer {i} {field}: {old} -> {getattr(buf, field)}"


def _io(b: Any, rng: random.Random) -> str:
    field = rng.choice(["inputs", "outputs"])
    old = [int(v) for v in getattr(b, field)]
    setattr(b, field, _ints(rng, old))
    return f"{field}: {old} -> {getattr(b, field)}"


def _segment(b: Any, rng: random.Random) -> str:
    """An offset or size moved a little (the packer writes each blob at its offset, so a far
    one would only make a huge file), or set to another segment's."""
    seg, other = rng.choice(b.segments), rng.choice(b.segments)
    field = rng.choice(["offset", "size"])
    old = int(getattr(seg, field))
    setattr(seg, field, max(0, rng.choice([old + 64, old - 64, old + 1, old - 1, 0,
                                           int(getattr(other, field))])))
    return f"segment {field}: {old} -> {getattr(seg, field)}"


def _state(b: Any, rng: random.Random) -> str:
    """A state buffer's offset, size or initial segment rewritten, or a tensor moved into the
    state."""
    if not b.state or rng.random() < 0.3:
        program = _program(b, rng)
        i = rng.randrange(len(program.tensors))
        t = program.tensors[i]
        old, t.storageKind, t.storage = t.storageKind, 3, rng.randrange(max(len(b.state or []),
                                                                             1) + 1)
        return f"tensor {i} storageKind: {old} -> 3 (state {t.storage})"
    i = rng.randrange(len(b.state))
    field = rng.choice(["offset", "size", "initial"])
    old = int(getattr(b.state[i], field))
    new = (rng.choice([-2, -1, 0, 1, len(b.segments) - 1]) if field == "initial"
           else abs(_any_int(rng, old)) % (1 << 40))
    setattr(b.state[i], field, new)
    return f"state {i} {field}: {old} -> {new}"


_DIM_FIELDS = ("size", "min", "max", "inputAxes", "outputAxes")


def _bucket(b: Any, rng: random.Random) -> str:
    """A method's name or entry, or a field of its bucket's dim, rewritten."""
    programs = [b, *(b.methods or [])]
    k = rng.randrange(len(programs))
    program = programs[k]
    if not program.dims or rng.random() < 0.2:
        name = "methodName" if k == 0 else "name"
        field = rng.choice([name, "entry"])
        old = getattr(program, field)
        setattr(program, field, rng.choice([b"forward", b"", b"forward[seq=1]", None]))
        return f"method {k} {field}: {old} -> {getattr(program, field)}"
    d = program.dims[0]
    field = rng.choice(_DIM_FIELDS)
    old = getattr(d, field)
    new = (_ints(rng, [int(v) for v in old]) if field.endswith("Axes")
           else _any_int(rng, int(old)) % (1 << 40))
    setattr(d, field, new)
    return f"method {k} dim {field}: {_show(old)} -> {_show(new)}"


_EXPR_FIELDS = ("field", "index", "arg", "position", "coeffs")


def _size_expr(b: Any, rng: random.Random) -> str:
    """A field of a symbolic method's size expression rewritten, or its dim made a bucket's
    (a bucket's rewrite when no method is symbolic)."""
    programs = [b, *(b.methods or [])]
    symbolic = [k for k, p in enumerate(programs) if p.dims and p.dims[0].symbolic]
    if not symbolic:
        return _bucket(b, rng)
    k = rng.choice(symbolic)
    d = programs[k].dims[0]
    if not d.exprs or rng.random() < 0.05:
        d.symbolic = False
        return f"method {k} dim symbolic: True -> False"
    j = rng.randrange(len(d.exprs))
    field = rng.choice(_EXPR_FIELDS)
    old = getattr(d.exprs[j], field)
    new = (_ints(rng, [int(v) for v in old]) if field == "coeffs"
           else _any_int(rng, int(old)) % (1 << 31))
    setattr(d.exprs[j], field, new)
    return f"method {k} size expr {j} {field}: {_show(old)} -> {_show(new)}"


def _program(b: Any, rng: random.Random) -> Any:
    """The root program or one of the bundle's other methods (their tables share names)."""
    return rng.choice([b, *(b.methods or [])])


def _in_program(mutate: Callable[[Any, random.Random], str]
                ) -> Callable[[Any, random.Random], str]:
    """``mutate`` applied to a random method's program."""
    def run(b: Any, rng: random.Random) -> str:
        return mutate(_program(b, rng), rng)
    run.__name__ = mutate.__name__
    return run


FIELD_MUTATIONS: list[Callable[[Any, random.Random], str]] = [
    *(_in_program(m) for m in (_tensor, _tensor, _node, _node, _plan, _io, _quantization,
                               _delegate)), _segment, _state, _bucket, _size_expr]


def _decoded(data: bytes) -> tuple[Any, list[bytes]]:
    """Bundle ``data``'s tables (object API) and its segments' bytes."""
    bundle = BundleT.InitFromObj(Bundle.GetRootAs(data, SIZE_PREFIX_BYTES))
    base = segment_base(int.from_bytes(data[:4], "little"))
    return bundle, [data[base + s.offset:base + s.offset + s.size] for s in bundle.segments or []]


def _packed(bundle: Any, blobs: list[bytes]) -> bytes:
    """A valid bundle of these tables and segments, checksums computed."""
    with tempfile.TemporaryFile() as f:
        write_to(f, bundle, blobs)
        f.seek(0)
        return f.read()


def repacked(data: bytes, mutate: Callable[[Any], object]) -> bytes:
    """Bundle ``data`` with its decoded tables changed by ``mutate``, re-packed as a valid
    bundle: the segments' bytes kept, the checksums recomputed."""
    bundle, blobs = _decoded(data)
    mutate(bundle)
    return _packed(bundle, blobs)


def mutate_payload(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Bit flips or an overwrite in one delegate payload segment, re-packed with the checksums
    recomputed (IndexError for a bundle without payloads)."""
    bundle, blobs = _decoded(data)
    segments = sorted({p.segment for program in [bundle, *(bundle.methods or [])]
                       for d in program.delegates or [] for p in d.payload or []})
    k = rng.choice(segments)
    blobs[k], what = mutate_bytes(blobs[k], rng, kinds=2)
    bundle.segments[k].crc32 = zlib.crc32(blobs[k])
    return _packed(bundle, blobs), f"payload segment {k}: {what}"


def mutate_fields(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One field of the decoded tables rewritten, re-packed with its checksums recomputed; and
    what was rewritten."""
    what: list[str] = []
    mutated = repacked(data, lambda bundle: what.append(rng.choice(FIELD_MUTATIONS)(bundle, rng)))
    return mutated, what[0]


MUTATORS = {"bytes": mutate_bytes, "fields": mutate_fields, "payload": mutate_payload}


HANG_SECONDS = 10.0


class _Hang(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Hang


Runs = list[tuple[str, list[np.ndarray]]]  # (method, its inputs), run in order


def run_case(data: bytes, folder: Path, inputs: Runs,
             expected: list[np.ndarray]) -> tuple[Outcome, str]:
    """Load and run ``data``; the outcome and, for a crash, where it was raised."""
    path = folder / "case.nee"
    path.write_bytes(data)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        with Program.load(path, max_arena_bytes=1 << 30) as program:
            got = _outputs(program, inputs)
            if _same(got, expected):
                return "same", ""
            return ("unwritten" if not _same(_outputs(program, inputs, fill=0x7F), got)
                    else "changed"), ""
    except NeeError:
        return "refused", ""
    except _Hang:
        return "hang", ""
    except Exception as e:  # everything else is what the fuzzer looks for
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return "crash", f"{type(e).__name__} at {Path(frame.filename).name}:{frame.lineno}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _outputs(program: Program, inputs: Runs, fill: int = 0) -> list[np.ndarray]:
    """The outputs (copied) of the runs from a reset state, each method's arenas filled with
    byte ``fill`` first."""
    program.reset()
    outputs = []
    for name, arrays in inputs:
        method = program.method(name)
        for arena in method.arenas:
            arena.view(np.uint8).fill(fill)
        outputs += [o.copy() for o in method.run(*arrays)]
    return outputs


def method_inputs(program: Program, seed: int) -> Runs:
    """Seeded inputs per method (a symbolic method's at its max and min): normal floats,
    integers in {0, 1}."""
    rng = np.random.default_rng(seed)
    return [(name, [rng.standard_normal(shape).astype(s.dtype) if np.dtype(s.dtype).kind == "f"
                    else rng.integers(0, 2, shape).astype(s.dtype)
                    for s, shape in zip(program.method(name).inputs, shapes, strict=True)])
            for name in program.methods for shapes in _sizes(program.method(name))]


def _sizes(method: Program) -> list[list[tuple[int, ...]]]:
    """The input shapes a method runs with: its own, and a symbolic method's at its min."""
    shapes = [s.shape for s in method.inputs]
    d = method.dim
    if d is None or not d.symbolic:
        return [shapes]
    return [shapes, [tuple(d.min if i == axis else n for i, n in enumerate(shape))
                     for shape, axis in zip(shapes, d.input_axes, strict=True)]]


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(
        a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
        for a, b in zip(got, want, strict=True))


def fuzz(bundle: Path, cases: int, kind: str, seed: int,
         show: Callable[[Outcome, str], None] | None = None) -> collections.Counter:
    """Counts of outcomes (and crash sites) over ``cases`` seeded mutations of ``bundle``;
    ``show(outcome, mutation)`` is told each case's."""
    data = bundle.read_bytes()
    with Program.load(bundle) as program:
        inputs = method_inputs(program, seed)
        expected = _outputs(program, inputs)
    rng = random.Random(seed)
    counts: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(cases):
            try:
                mutated, mutation = MUTATORS[kind](data, rng)
            except (IndexError, ValueError, AttributeError, TypeError):
                continue  # a rewrite the packer cannot express: not a bundle to try
            outcome, where = run_case(mutated, Path(tmp), inputs, expected)
            if show:
                show(outcome, f"{mutation} ({where})" if where else mutation)
            counts[outcome] += 1
            if outcome == "changed":
                counts[f"changed: {_field(mutation)}"] += 1
            if where:
                counts[f"crash: {where}"] += 1
    return counts


def _field(mutation: str) -> str:
    """What a mutation rewrote, without indices and values: "tensor shape", "outputs"."""
    return " ".join(w for w in mutation.split(": ")[0].split() if not w.isdigit())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--kind", choices=sorted(MUTATORS), default="bytes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", action="append", default=[], metavar="OUTCOME",
                        help="print each case with this outcome and its mutation (repeatable)")
    args = parser.parse_args()

    def show(outcome: Outcome, mutation: str) -> None:
        if outcome in args.show:
            print(f"{outcome}: {mutation}", flush=True)

    counts = fuzz(args.bundle, args.cases, args.kind, args.seed, show)
    for outcome, count in sorted(counts.items()):
        print(f"{count:8d}  {outcome}")


if __name__ == "__main__":
    main()
