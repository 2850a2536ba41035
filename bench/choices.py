"""What one kernel choice buys in a whole model: the model run with it on and off.

Usage: python bench/choices.py [--choice einsum|columns|conv-rows|flat-columns|pair-casts|
       leading-tiles|prefetch|vector-prefetch|vector-bias|dense-depthwise|shifted-depthwise|
       channels-last-bias|zero-margins|small-kernel|channels-last|channels-last-binding|
       channels-last-groups]
       [--models convnext,cnn,...]
       [--runs 60] [--rounds 4] [--int8]

Kernels choose their algorithm when a program is loaded (``Kernel.prepared``), and the scratch it
needs and a linear layer's weight layout at export, so each model is exported twice and loaded with
its setting: as is, and with the choice switched off. The choices, off: ``einsum``: depthwise
convolutions per tap over phase planes only, never one ``einsum``; ``columns``: convolution
products never in column blocks; ``conv-rows``: convolution weights over few positions never in row
blocks; ``flat-columns``: stride-1 convolutions' columns (float and int8) always from the input
padded in 2-D; ``pair-casts``: stride-2 gathers (phase planes, im2col columns) always as strided
copies; ``leading-tiles``: a per-channel operand of an elementwise op over a channels-last map
broadcast by numpy, never tiled first; ``prefetch``: no convolution's weight streamed into the
caches before its product; ``vector-prefetch``: no convolution over one output position (a
matrix-vector product) has its weight prefetched (on: every such one has, whatever the BLAS);
``vector-bias``: those convolutions add their bias by a ones row, as over more positions;
``dense-depthwise``: no depthwise convolution as one ``einsum`` over a dense matrix of its weights;
``shifted-depthwise``: stride-1 depthwise convolutions over many positions per tap as a multiply
and an add per tap over phase planes, never one ``einsum`` per channel block over column-shifted
copies; ``channels-last-bias``: the channels-last and dense depthwise paths add their bias while
copying to out, not to their channels-last accumulator; ``zero-margins``: the channels-last
depthwise einsum zeroes its whole band buffer at each run, not only its padding;
``small-kernel``: every block rule of OpenBLAS's small-matrix kernel, linear row blocks
included, as on a BLAS with that kernel (on) and without (off); ``channels-last``: no feature
map stored channels-last at export (the ``channels_last`` pass); ``channels-last-binding``: the
maps stored so bound row-major at load (as where the BLAS has OpenBLAS's small-matrix kernel);
``channels-last-groups``: only maps between convolutions channels-last, none joined to them by
elementwise ops.
``columns`` and ``conv-rows`` are timed as if the BLAS had that kernel on both sides (the
runtime makes no blocks where it lacks it). ``--int8`` quantizes the models (calibrated on
their example inputs). Both programs run alternately in this process, which of them goes first
swapping every pair, on the same inputs. The program loaded second ran 0.5-3.5% faster than
the first in A/A runs (the same bundle twice, mobilenet_v2 and mobilenet_v3_small), so each
round loads both afresh, in turns on first and off first. Prints the geometric mean of the rounds'
median per-pair ratios on / off (< 1: the choice pays), each round's median, and the largest
output difference relative to the largest output (summation order differs between the two).
Models: the zoo's and the real-model tier's names (tests/models/tier.py).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime_py import program as program_module  # noqa: E402
from runtime_py.kernels import _common, elementwise, linalg, nn, quantized  # noqa: E402
from runtime_py.program import Program  # noqa: E402
from toolchain.passes import channels_last as layout_pass  # noqa: E402

# choice -> the settings that switch it off: (module, constant, value)
SWITCHES = {"einsum": [(nn, "EINSUM_POSITIONS", 0)],
            "columns": [(linalg, "SMALL_PRODUCT", 1 << 62)],
            "conv-rows": [(nn, "BLOCKED_POSITIONS", 0)],
            "flat-columns": [(nn, "FLAT_COLUMNS", False)],
            "pair-casts": [(_common, "PAIR_CASTS", False)],
            "leading-tiles": [(elementwise, "LEADING_TILES", False)],
            "prefetch": [(nn, "PREFETCH_BYTES", 0)],
            "vector-bias": [(nn, "VECTOR_POSITIONS", 0)],
            "vector-prefetch": [(nn, "PREFETCH_VECTORS", False)],
            "dense-depthwise": [(nn, "DENSE_DEPTHWISE", False)],
            "shifted-depthwise": [(nn, "SHIFTED_DEPTHWISE", False)],
            "channels-last-bias": [(nn, "CHANNELS_LAST_BIAS", False)],
            "zero-margins": [(nn, "ZERO_MARGINS", False)],
            "small-kernel": [(linalg, "SMALL_KERNEL", False)],
            "channels-last": [(layout_pass, "MIN_POSITIONS", 1 << 62)],
            "channels-last-binding": [(program_module, "CHANNELS_LAST", False)],
            "channels-last-groups": [(layout_pass, "ELEMENTWISE", frozenset())]}
# choice -> the settings of both sides: the block rules act only with the small kernel
BOTH = {**{choice: [(linalg, "SMALL_KERNEL", True)] for choice in ("columns", "conv-rows",
                                                                     "small-kernel")},
        "vector-prefetch": [(nn, "PREFETCH_VECTORS", True)]}


@contextlib.contextmanager
def switched(settings: list[tuple[object, str, object]]) -> Iterator[None]:
    """The module constants ``settings`` set for the block (restored afterwards)."""
    saved = [(module, name, getattr(module, name)) for module, name, _ in settings]
    for module, name, value in settings:
        setattr(module, name, value)
    nn._conv_plan.cache_clear()
    quantized._conv_plan.cache_clear()
    try:
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)
        nn._conv_plan.cache_clear()
        quantized._conv_plan.cache_clear()


def exported(model: object, inputs: tuple, name: str, path: Path,
             settings: list[tuple[object, str, object]], int8: bool = False) -> Path:
    """``model`` exported to ``path`` with ``settings`` (a choice can change the scratch its
    calls ask for at export), quantized to int8 (calibrated on ``inputs``) if ``int8``."""
    from toolchain.export import export
    from toolchain.quantize.options import Int8Options
    from toolchain.serialize.bundle import write_bundle

    quantize = Int8Options([inputs]) if int8 else None
    with switched(settings):
        write_bundle(export(model, inputs, name=name, quantize=quantize), path)
    return path


def loaded(path: Path, settings: list[tuple[object, str, object]]) -> Program:
    """The bundle at ``path`` loaded with ``settings`` (kernels choose their path at load)."""
    with switched(settings):
        return Program.load(path)


def paired_ratios(on: Program, off: Program, arrays: list[np.ndarray], runs: int) -> list[float]:
    """Sorted per-pair ratios time(on) / time(off), the first of each pair alternating."""
    on.run(*arrays), off.run(*arrays)  # warm-up
    ratios = []
    for i in range(runs):
        pair = (on, off) if i % 2 else (off, on)
        times = []
        for program in pair:
            start = time.perf_counter()
            program.run(*arrays)
            times.append(time.perf_counter() - start)
        t_on, t_off = times if i % 2 else times[::-1]
        ratios.append(t_on / t_off)
    return sorted(ratios)


def by_load_order(sides: dict[str, tuple[Path, list]], arrays: list[np.ndarray], runs: int,
                  rounds: int) -> list[float]:
    """The median per-pair ratio on / off of each round, the bundles loaded afresh each round,
    on first in even rounds and off first in odd ones."""
    medians = []
    for i in range(rounds):
        order = ("on", "off") if i % 2 == 0 else ("off", "on")
        programs = {side: loaded(*sides[side]) for side in order}
        medians.append(statistics.median(paired_ratios(programs["on"], programs["off"],
                                                       arrays, runs)))
        for program in programs.values():
            program.close()
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--choice", choices=sorted(SWITCHES), default="einsum")
    parser.add_argument("--models", default="convnext,mobilenet_v2,mobilenet_v3_small,cnn")
    parser.add_argument("--runs", type=int, default=60, help="pairs per round")
    parser.add_argument("--rounds", type=int, default=4, help="load orders alternate")
    parser.add_argument("--int8", action="store_true", help="the models quantized to int8")
    args = parser.parse_args()

    from toolchain.modules import load_file

    tier = load_file(ROOT / "tests" / "models" / "tier.py")
    print(f"{'model':20s} {args.choice} on/off: geometric mean (per round, on loaded first in "
          "the 1st, 3rd, ...)   max difference / max output")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model, inputs = tier.build(name)
            arrays = [t.numpy() for t in inputs]
            both = BOTH.get(args.choice, [])
            sides = {side: (exported(model, inputs, name, Path(tmp) / f"{name}-{side}.nee",
                                     settings, args.int8), settings)
                     for side, settings in (("on", both), ("off", both + SWITCHES[args.choice]))}
            on, off = (loaded(*sides[side]) for side in ("on", "off"))
            diff = max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)) for a, b in
                       zip(on.run(*arrays), off.run(*arrays), strict=True))
            on.close()
            off.close()
            medians = by_load_order(sides, arrays, args.runs, args.rounds)
            mean = statistics.geometric_mean(medians)
            print(f"{name:20s} {mean:.3f} ({' '.join(f'{m:.3f}' for m in medians)})      "
                  f"{diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
