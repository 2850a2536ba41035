"""MobileNetV3-Small (Howard et al. 2019): hardswish, hardsigmoid squeeze-excite; 96x96 input."""

from __future__ import annotations

import torch
from torch import nn

# (kernel, expanded channels, out channels, squeeze-excite, activation, stride) per block.
_BLOCKS = (
    (3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1),
)


def _make_divisible(v: float, divisor: int = 8) -> int:
    """Round channels to a multiple of ``divisor``, never dropping more than 10%."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _act(kind: str) -> nn.Module:
    return nn.Hardswish() if kind == "HS" else nn.ReLU()


def _conv_bn_act(c_in: int, c_out: int, k: int, stride: int, groups: int,
                 act: str | None) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if act is not None:
        layers.append(_act(act))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Global pool -> 1x1 reduce -> ReLU -> 1x1 expand -> hardsigmoid gate."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = _make_divisible(channels // 4)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        s = nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))
        return x * s


class InvertedResidual(nn.Module):
    """Expand -> depthwise -> optional SE -> project, residual when shapes match."""

    def __init__(self, c_in: int, k: int, hidden: int, c_out: int, se: bool, act: str,
                 stride: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if hidden != c_in:
            layers.append(_conv_bn_act(c_in, hidden, 1, 1, 1, act))
        layers.append(_conv_bn_act(hidden, hidden, k, stride, hidden, act))
        if se:
            layers.append(SqueezeExcite(hidden))
        layers.append(_conv_bn_act(hidden, c_out, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class Model(nn.Module):
    """MobileNetV3-Small classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers: list[nn.Module] = [_conv_bn_act(3, 16, 3, 2, 1, "HS")]
        c_in = 16
        for k, hidden, c_out, se, act, stride in _BLOCKS:
            layers.append(InvertedResidual(c_in, k, hidden, c_out, se, act, stride))
            c_in = c_out
        layers.append(_conv_bn_act(c_in, 576, 1, 1, 1, "HS"))
        self.features = nn.Sequential(*layers)
        for m in self.modules():  # He (fan-in) init keeps activations O(1) through the depth
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
        self.classifier = nn.Sequential(
            nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
