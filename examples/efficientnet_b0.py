"""EfficientNet-B0 (Tan & Le 2019): MBConv k3/k5 with squeeze-excite, SiLU; 96x96 input.

Full B0 table (16 MBConv blocks, 1280-channel head). Stochastic depth is the identity in eval
mode and is left out.
"""

from __future__ import annotations

import torch
from _blocks import conv_bn, init_weights, mbconv_stages
from torch import nn

# (expansion, kernel, first stride, output channels, repeats, squeeze-excite) per stage.
_STAGES = ((1, 3, 1, 16, 1, True), (6, 3, 2, 24, 2, True), (6, 5, 2, 40, 2, True),
           (6, 3, 2, 80, 3, True), (6, 5, 1, 112, 3, True), (6, 5, 2, 192, 4, True),
           (6, 3, 1, 320, 1, True))


class Model(nn.Module):
    """EfficientNet-B0 classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(
            conv_bn(3, 32, 3, 2, act=nn.SiLU),
            *mbconv_stages(32, _STAGES, nn.SiLU, nn.functional.silu),
            conv_bn(320, 1280, 1, act=nn.SiLU),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))
        init_weights(self, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).mean(dim=(2, 3))
        return self.classifier(x)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
