"""Small MLP: 16 -> 32 -> 10 with ReLU."""

from __future__ import annotations

import torch
from _blocks import random_samples
from torch import nn


class Model(nn.Module):
    """Two-layer perceptron with a ReLU hidden layer."""

    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def example_inputs() -> tuple[torch.Tensor, ...]:
    """A batch of 4 feature vectors."""
    torch.manual_seed(1)
    return (torch.randn(4, 16),)


def calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    """Seeded inputs like example_inputs(), for nee-export --quantize int8."""
    return random_samples((4, 16))
