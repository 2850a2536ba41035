"""Small CNN: conv/BN/ReLU(6), a residual add, max and avg pooling, linear, softmax."""

from __future__ import annotations

import torch
from torch import nn


def _randomize_bn(module: nn.Module) -> None:
    """Give BatchNorm layers non-trivial running statistics and affine parameters."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)


class Model(nn.Module):
    """conv-bn-relu -> residual block -> maxpool -> conv-relu6 -> avgpool -> linear -> softmax."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6()
        )
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(32 * 4 * 4, num_classes)
        with torch.no_grad():
            _randomize_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.block(x)
        x = self.pool(x)
        x = torch.nn.functional.relu6(self.conv2(x))
        x = self.avg(x)
        return torch.softmax(self.fc(torch.flatten(x, 1)), dim=-1)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x32x32 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 32, 32),)


def calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    """16 seeded images like example_inputs(), for nee-export --quantize int8 (standalone: the
    README's main job runs this file alone)."""
    generator = torch.Generator().manual_seed(2)
    return [(torch.randn(1, 3, 32, 32, generator=generator),) for _ in range(16)]
