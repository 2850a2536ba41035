"""ConvNeXt-T-style network (Liu et al. 2022) at a 96x96 input.

Widths 96/192/384/768 as in ConvNeXt-T, but stage depths are reduced from (3, 3, 9, 3) to
(1, 1, 3, 1) to keep export and CI fast. Stem: 4x4 stride-4 conv + channels-first LayerNorm.
Block: 7x7 depthwise conv -> channels-last -> LayerNorm -> Linear 4C -> GELU -> Linear C ->
layer scale -> channels-first -> residual. Downsampling: LayerNorm2d + 2x2 stride-2 conv.
"""

from __future__ import annotations

import torch
from torch import nn

_WIDTHS = (96, 192, 384, 768)
_DEPTHS = (1, 1, 3, 1)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channel dim of an NCHW tensor, done by permuting to channels-last."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7 -> LN -> inverted-bottleneck MLP with GELU -> layer scale, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.empty(dim).uniform_(0.1, 1.0))  # learned layer scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.fc2(nn.functional.gelu(self.fc1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class Model(nn.Module):
    """ConvNeXt-T-style classifier with reduced depths."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers: list[nn.Module] = [nn.Conv2d(3, _WIDTHS[0], 4, 4), LayerNorm2d(_WIDTHS[0])]
        for i, (dim, depth) in enumerate(zip(_WIDTHS, _DEPTHS, strict=True)):
            if i > 0:
                layers += [LayerNorm2d(_WIDTHS[i - 1]), nn.Conv2d(_WIDTHS[i - 1], dim, 2, 2)]
            layers += [ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(_WIDTHS[-1])
        self.head = nn.Linear(_WIDTHS[-1], num_classes)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):  # He (fan-in) init
                    nn.init.kaiming_normal_(m.weight)
                    nn.init.uniform_(m.bias, -0.1, 0.1)
                elif isinstance(m, nn.LayerNorm):  # non-trivial affine terms
                    nn.init.uniform_(m.weight, 0.5, 1.5)
                    nn.init.uniform_(m.bias, -0.2, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).mean(dim=(2, 3))
        return self.head(self.norm(x))


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
