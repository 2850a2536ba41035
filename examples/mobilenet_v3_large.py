"""MobileNetV3-Large (Howard et al. 2019): hardswish, hardsigmoid squeeze-excite; 96x96 input."""

from __future__ import annotations

import torch
from _blocks import init_weights, mobilenet_v3_classifier, mobilenet_v3_features
from torch import nn

# (kernel, expanded channels, out channels, squeeze-excite, activation, stride) per block.
_BLOCKS = (
    (3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
    (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
    (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
    (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1),
)


class Model(nn.Module):
    """MobileNetV3-Large classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = mobilenet_v3_features(_BLOCKS, 960)
        self.classifier = mobilenet_v3_classifier(960, 1280, num_classes)
        init_weights(self, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
