"""What checking integrity costs at load: Program.load with and without the segments' CRC-32s.

Usage: python bench/load.py [--models mlp,cnn,...] [--pairs N]

Per example model (float export): bundle size, then the median load time with every check
(the default) and with ``verify_segments=False`` (the flatbuffer's CRC-32 is checked either
way), loaded alternately in one process (N pairs), with the quartiles of the per-pair ratio
(with / without). A cold load from flash also pays for reading the weights once, which the
CRC-32 then shares; these are warm loads (the file in the page cache), the worst case for the
ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime_py.program import Program  # noqa: E402
from toolchain.export import export  # noqa: E402
from toolchain.modules import load_file  # noqa: E402
from toolchain.serialize.bundle import write_bundle  # noqa: E402

MODELS = ["mlp", "cnn", "mobilenet_v2", "resnet18"]


def _load_ms(path: Path, verify: bool) -> float:
    start = time.perf_counter()
    Program.load(path, verify_segments=verify).close()
    return (time.perf_counter() - start) * 1e3


def bench(name: str, folder: Path, pairs: int) -> str:
    module = load_file(ROOT / "examples" / f"{name}.py")
    path = folder / f"{name}.nee"
    size = write_bundle(export(module.Model().eval(), tuple(module.example_inputs())), path)
    _load_ms(path, True)  # warm the page cache and imports
    with_, without = [], []
    for _ in range(pairs):
        with_.append(_load_ms(path, True))
        without.append(_load_ms(path, False))
    ratios = sorted(a / b for a, b in zip(with_, without, strict=True))
    q1, q3 = ratios[len(ratios) // 4], ratios[3 * len(ratios) // 4]
    return (f"{name:14s} {size / 1e6:8.2f} MB {statistics.median(with_):9.2f} ms "
            f"{statistics.median(without):9.2f} ms {statistics.median(ratios):6.2f}x "
            f"[{q1:.2f}-{q3:.2f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--pairs", type=int, default=20)
    args = parser.parse_args()
    print(f"{'model':14s} {'bundle':>11s} {'checked':>12s} {'unchecked':>12s} {'ratio':>7s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            print(bench(name, Path(tmp), args.pairs), flush=True)


if __name__ == "__main__":
    main()
