"""MobileNetV2 (Sandler et al. 2018), standard layout, 96x96 input by default."""

from __future__ import annotations

import torch
from _blocks import InvertedResidual, conv_bn, he_init, make_divisible, random_samples
from torch import nn

# (expansion t, output channels c, repeats n, first stride s) per stage.
_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class Model(nn.Module):
    """MobileNetV2 classifier."""

    def __init__(self, width_mult: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        c_in = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        layers: list[nn.Module] = [conv_bn(3, c_in, 3, stride=2, act=nn.ReLU6)]
        for t, c, n, s in _STAGES:
            c_out = make_divisible(c * width_mult)
            for i in range(n):  # 3x3 depthwise, ReLU6, no SE; stack named "conv" as in torchvision
                layers.append(InvertedResidual(c_in, c_in * t, c_out, 3, s if i == 0 else 1,
                                               nn.ReLU6, body="conv"))
                c_in = c_out
        layers.append(conv_bn(c_in, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        he_init(self.features)  # He (fan-in) init keeps activations O(1) through the depth
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)


def calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    """Seeded inputs like example_inputs(), for nee-export --quantize int8."""
    return random_samples((1, 3, 96, 96))
