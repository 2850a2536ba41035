"""ShuffleNetV2 1.0x (Ma et al. 2018): channel split, depthwise branch, shuffle; 96x96 input.

Stage widths 116/232/464 with 4/8/4 units and a 1024-channel final 1x1 conv, as published.
"""

from __future__ import annotations

import torch
from _blocks import conv_bn, init_weights
from torch import nn

_STAGE_REPEATS = (4, 8, 4)
_STAGE_WIDTHS = (24, 116, 232, 464, 1024)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave channels across ``groups`` (view -> transpose -> contiguous -> view)."""
    b, c, h, w = x.shape
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, c, h, w)


class ShuffleUnit(nn.Module):
    """Stride 1: split channels, transform one half. Stride 2: both branches downsample."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = c_out // 2
        self.branch1: nn.Module = nn.Identity()
        if stride == 2:
            self.branch1 = nn.Sequential(
                conv_bn(c_in, c_in, 3, stride, groups=c_in), conv_bn(c_in, half, 1, act=nn.ReLU)
            )
        b2_in = c_in if stride == 2 else half
        self.branch2 = nn.Sequential(
            conv_bn(b2_in, half, 1, act=nn.ReLU),
            conv_bn(half, half, 3, stride, groups=half),
            conv_bn(half, half, 1, act=nn.ReLU),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class Model(nn.Module):
    """ShuffleNetV2 1.0x classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        c_in = _STAGE_WIDTHS[0]
        self.stem = nn.Sequential(conv_bn(3, c_in, 3, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1))
        units: list[nn.Module] = []
        for repeats, c_out in zip(_STAGE_REPEATS, _STAGE_WIDTHS[1:4], strict=True):
            for i in range(repeats):
                units.append(ShuffleUnit(c_in, c_out, 2 if i == 0 else 1))
                c_in = c_out
        self.stages = nn.Sequential(*units)
        self.conv5 = conv_bn(c_in, _STAGE_WIDTHS[-1], 1, act=nn.ReLU)
        self.fc = nn.Linear(_STAGE_WIDTHS[-1], num_classes)
        init_weights(self, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5(self.stages(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
