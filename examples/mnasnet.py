"""MnasNet-A1 (Tan et al. 2019): separable stem, MBConv k3/k5 with optional SE, ReLU; 96x96 input.

Full A1 table (16 MBConv blocks after the separable conv) and a 1280-channel 1x1 head before
pooling. Setting every SE flag to False gives the B1-style variant.
"""

from __future__ import annotations

import torch
from _blocks import conv_bn, init_weights, mbconv_stages
from torch import nn

# (expansion, kernel, first stride, output channels, repeats, squeeze-excite) per stage.
_STAGES = ((6, 3, 2, 24, 2, False), (3, 5, 2, 40, 3, True), (6, 3, 2, 80, 4, False),
           (6, 3, 1, 112, 2, True), (6, 5, 2, 160, 3, True), (6, 3, 1, 320, 1, False))


class Model(nn.Module):
    """MnasNet-A1 classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(
            # stem conv, then depthwise-separable conv to 16 channels
            conv_bn(3, 32, 3, 2, act=nn.ReLU), conv_bn(32, 32, 3, groups=32, act=nn.ReLU),
            conv_bn(32, 16, 1),
            *mbconv_stages(16, _STAGES, nn.ReLU, torch.relu),
            conv_bn(320, 1280, 1, act=nn.ReLU),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))
        init_weights(self, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean(dim=(2, 3)))


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
