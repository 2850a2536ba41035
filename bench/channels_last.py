"""What channels-last maps would buy an inverted-residual block, before any layout pass exists.

Usage: python bench/channels_last.py [--runs 400]

One mobilenet_v2 block (1x1 expand, relu6, 3x3 depthwise, relu6, 1x1 project) per shape, written
in numpy by hand over NHWC maps, against NEE's NCHW program of the same block exported from torch,
run alternately (1 thread, ``latency._paired_ms``). By hand: the 1x1 convolutions are
(positions, C) @ (C, C') products, their bias added over rows of W x C values as a row tiled
once; the depthwise convolution runs per tap over a padded buffer split into column phases (each
tap a view of rows of W x C values), times the tap's weights tiled W times (the kernels'
``nn.tap_mac``). Checks the hand-written block against torch first. Prints per shape the median
per-pair ratio by hand / NEE (< 1: channels-last faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from latency import _paired_ms  # noqa: E402

from runtime_py.kernels.nn import tap_mac  # noqa: E402
from runtime_py.program import Program  # noqa: E402
from toolchain.export import export  # noqa: E402
from toolchain.serialize.bundle import write_bundle  # noqa: E402

# (in, expanded, out channels, input height = width, depthwise stride): mobilenet_v2's at 96 x 96
SHAPES = [(16, 96, 24, 48, 2), (24, 144, 24, 24, 1), (24, 144, 32, 24, 2), (32, 192, 32, 12, 1),
          (64, 384, 64, 6, 1)]
LOW, HIGH = np.float32(0), np.float32(6)


class Block(nn.Module):
    def __init__(self, cin: int, ce: int, cout: int, stride: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.e, self.p = nn.Conv2d(cin, ce, 1), nn.Conv2d(ce, cout, 1)
        self.d = nn.Conv2d(ce, ce, 3, stride, 1, groups=ce)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p(torch.clamp(self.d(torch.clamp(self.e(x), 0, 6)), 0, 6))


def by_hand(block: Block, x: np.ndarray, stride: int) -> Callable[[], np.ndarray]:
    """The block over x's NHWC copy: a call returning the (positions, out channels) result."""
    _, cin, hw, _ = x.shape
    ce, ho = block.e.out_channels, (hw - 1) // stride + 1
    w = {k: v.detach().numpy() for k, v in block.state_dict().items()}
    we, wp = w["e.weight"][:, :, 0, 0].T.copy(), w["p.weight"][:, :, 0, 0].T.copy()
    xin = np.ascontiguousarray(x[0].transpose(1, 2, 0)).reshape(hw * hw, cin)
    expanded = np.empty((hw, hw, ce), np.float32)
    cols = ho + (2 + stride) // stride - 1
    buf = np.zeros(((ho - 1) * stride + 3, stride, cols, ce), np.float32)
    acc, prod = np.empty((2, ho, ho * ce), np.float32)
    out = np.empty((ho * ho, block.p.out_channels), np.float32)
    taps = [(buf[i:i + (ho - 1) * stride + 1:stride, j % stride, j // stride:j // stride + ho]
             .reshape(ho, ho * ce), np.tile(w["d.weight"][:, 0, i, j], ho))
            for i in range(3) for j in range(3)]
    fills = []
    for q in range(stride):  # phase q holds padded columns b * stride + q (input column - 1)
        source = np.arange(cols) * stride + q - 1
        b0, b1 = np.flatnonzero((source >= 0) & (source < hw))[[0, -1]]
        fills.append((buf[1:1 + hw, q, b0:b1 + 1], expanded[:, source[b0]:source[b1] + 1:stride]))
    rows_e, rows_o = expanded.reshape(hw, hw * ce), out.reshape(ho, -1)
    bias_e, bias_d = np.tile(w["e.bias"], hw), np.tile(w["d.bias"], ho)
    bias_p = np.tile(w["p.bias"], ho)

    def fill() -> None:
        for dst, src in fills:
            dst[...] = src

    depthwise = tap_mac(fill, [t for t, _ in taps], [wt for _, wt in taps], acc, prod)

    def run() -> np.ndarray:
        np.matmul(xin, we, expanded.reshape(hw * hw, ce))
        np.add(rows_e, bias_e, rows_e)
        np.clip(rows_e, LOW, HIGH, rows_e)
        depthwise()
        np.add(acc, bias_d, acc)
        np.clip(acc, LOW, HIGH, acc)
        np.matmul(acc.reshape(ho * ho, ce), wp, out)
        np.add(rows_o, bias_p, rows_o)
        return out

    return run


def compare(shape: tuple[int, ...], runs: int, folder: Path) -> str:
    cin, ce, cout, hw, stride = shape
    block = Block(cin, ce, cout, stride).eval()
    x = torch.randn(1, cin, hw, hw)
    write_bundle(export(block, (x,)), folder / "block.nee")
    program, arrays = Program.load(folder / "block.nee", threads=1), x.numpy()
    hand = by_hand(block, arrays, stride)
    with torch.no_grad():
        want = block(x).numpy()[0]
    ho = want.shape[-1]
    np.testing.assert_allclose(hand().reshape(ho, ho, cout).transpose(2, 0, 1), want,
                               rtol=1e-4, atol=1e-4)
    nee_ms, hand_ms, ratios = _paired_ms(lambda: program.run(arrays), hand, runs)
    return (f"{cin:3d} -> {ce:3d} -> {cout:3d} over {hw:2d} x {hw:2d}, stride {stride}: "
            f"by hand / NEE {statistics.median(ratios):.3f} (NEE {nee_ms * 1e3:.0f} us, "
            f"by hand {hand_ms * 1e3:.0f} us)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    np.setbufsize(512)
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            print(compare(shape, args.runs, Path(tmp)))


if __name__ == "__main__":
    main()
