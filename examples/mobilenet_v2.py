"""MobileNetV2 (Sandler et al. 2018), standard layout, 96x96 input by default."""

from __future__ import annotations

import torch
from torch import nn

# (expansion t, output channels c, repeats n, first stride s) per stage.
_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _make_divisible(v: float, divisor: int = 8) -> int:
    """Round channels to a multiple of ``divisor``, never dropping more than 10%."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1,
             act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (3x3) -> linear project (1x1), residual when shapes match."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        layers = [_conv_bn(c_in, hidden, 1)] if expand != 1 else []
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   _conv_bn(hidden, c_out, 1, act=False)]
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.use_res else y


class Model(nn.Module):
    """MobileNetV2 classifier."""

    def __init__(self, width_mult: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        c_in = _make_divisible(32 * width_mult)
        last = _make_divisible(1280 * max(1.0, width_mult))
        layers: list[nn.Module] = [_conv_bn(3, c_in, 3, stride=2)]
        for t, c, n, s in _STAGES:
            c_out = _make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(c_in, c_out, s if i == 0 else 1, t))
                c_in = c_out
        layers.append(_conv_bn(c_in, last, 1))
        self.features = nn.Sequential(*layers)
        for m in self.modules():  # He (fan-in) init keeps activations O(1) through the depth
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
