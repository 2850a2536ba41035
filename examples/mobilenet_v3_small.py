"""MobileNetV3-Small (Howard et al. 2019): hardswish, hardsigmoid squeeze-excite; 96x96 input."""

from __future__ import annotations

import torch
from _blocks import he_init, mobilenet_v3_classifier, mobilenet_v3_features
from torch import nn

# (kernel, expanded channels, out channels, squeeze-excite, activation, stride) per block.
_BLOCKS = (
    (3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1),
)


class Model(nn.Module):
    """MobileNetV3-Small classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = mobilenet_v3_features(_BLOCKS, 576)
        he_init(self.features)  # He (fan-in) init keeps activations O(1) through the depth
        self.classifier = mobilenet_v3_classifier(576, 1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
