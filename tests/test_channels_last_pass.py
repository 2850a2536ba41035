"""The channels_last pass: which activations it stores (N, H, W, C), end to end against torch."""

from __future__ import annotations

import pytest
import torch
from roundtrip import run_both
from torch import nn

from toolchain.boards import load_board
from toolchain.export import export
from toolchain.passes.channels_last import CHANNELS_LAST, channels_first
from toolchain.serialize.tflite_program import to_tflite

CL_OPS = set(CHANNELS_LAST.values())


class Inverted(nn.Module):
    """An inverted residual block: 1x1 expand, depthwise 3x3, 1x1 project (BN, ReLU6), with a
    residual add; ``gate`` reads the depthwise output with a mean as well (squeeze-excite)."""

    def __init__(self, channels: int = 8, hidden: int = 32, stride: int = 1,
                 gate: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1), nn.BatchNorm2d(hidden),
                                    nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden),
                                       nn.BatchNorm2d(hidden), nn.ReLU6())
        self.project = nn.Conv2d(hidden, channels, 1)
        self.stride, self.gate = stride, gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.depthwise(self.expand(x))
        if self.gate:
            h = h * torch.sigmoid(h.mean((2, 3), keepdim=True))
        y = self.project(h)
        return y + x if self.stride == 1 else y


def _layouts(result) -> dict[str, tuple[bool, bool]]:
    """(input, out) channels-last flags of each rewritten call, by its output's name."""
    return {n.outputs[0]: (n.args["input_channels_last"], n.args["out_channels_last"])
            for n in result.graph.nodes if n.op in CL_OPS}


@pytest.mark.parametrize("stride", [1, 2])
def test_inverted_residual_runs_channels_last(tmp_path, stride: int) -> None:
    """Expanded and depthwise maps stored (N, H, W, C): the 1x1 expand writes them, the
    depthwise convolution reads and writes them, the 1x1 project reads them; torch's values."""
    result = run_both(Inverted(stride=stride), torch.randn(1, 8, 12, 12), tmp_path=tmp_path,
                      rtol=1e-4, atol=1e-5)
    assert sorted(_layouts(result).values()) == [(False, True), (True, False), (True, True)]
    stored = {n.outputs[0]: result.graph.tensors[n.outputs[0]].shape
              for n in result.graph.nodes if n.op in CL_OPS and n.args["out_channels_last"]}
    side = 12 // stride
    assert sorted(stored.values()) == [(1, side, side, 32), (1, 12, 12, 32)]


class Depthwise1d(nn.Module):
    """1x1 and depthwise 1-D convolutions (3-D maps)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Conv1d(8, 16, 1), nn.Conv1d(16, 16, 3, 1, 1, groups=16), \
            nn.Conv1d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.b(self.a(x)))


@pytest.mark.parametrize(("model", "options"), [
    (Inverted(gate=True), {}),  # the depthwise output is read by a mean too
    (Depthwise1d(), {}),  # 1-D convolutions
    (Inverted(), {"board": load_board("rpi5")}),  # an XNNPACK delegate takes channels first
    (Inverted(), {"board": load_board("corstone-300-ethos-u55")}),  # scratch budget, NPU
])
def test_left_channels_first(tmp_path, model: nn.Module, options: dict) -> None:
    """No rewrite where a depthwise map has another reader, for 1-D convolutions, or for a
    board with delegates or a scratch budget."""
    x = torch.randn(1, 8, 12) if isinstance(model, Depthwise1d) else torch.randn(1, 8, 12, 12)
    result = export(model.eval(), (x,), **options)
    assert not _layouts(result)


def test_wide_depthwise_layers_stay_channels_first() -> None:
    """A depthwise layer whose channels-last phases would exceed its channels-first scratch
    and DEPTHWISE_BLOCK_BYTES (mobilenet_v2's 96 x 48 x 48 at stride 2) is not rewritten."""
    result = export(Inverted(16, 96, 2).eval(), (torch.randn(1, 16, 48, 48),))
    assert not _layouts(result)


def test_tflite_writer_converts_the_channels_first_program() -> None:
    """``to_tflite`` writes the program with the rewrite undone (``channels_first``), leaving
    the exported graph as it was."""
    result = export(Inverted().eval(), (torch.randn(1, 8, 12, 12),))
    before = _layouts(result)
    plain = channels_first(result.graph)
    assert before and not any(n.op in CL_OPS for n in plain.nodes)
    assert to_tflite(result.graph) == to_tflite(plain)
    assert _layouts(result) == before and plain.tensors is not result.graph.tensors
