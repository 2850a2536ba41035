"""Swin-T-style transformer (Liu et al. 2021), 96x96 input: embed dim 96, heads (3, 6, 12, 24),
window 6, depths reduced from (2, 2, 6, 2) to (2, 2, 2, 2). Token grids are 24/12/6/3 per side; as
in Swin the window is clipped to the grid (no shift) when the grid fits in one window, and other
grids are zero-padded to a multiple of the window (never needed at 96x96).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

_DIM, _WINDOW, _DEPTHS, _HEADS = 96, 6, (2, 2, 2, 2), (3, 6, 12, 24)


def window_partition(x: torch.Tensor, ws: int) -> torch.Tensor:
    """(B, H, W, C) -> (B * windows, ws * ws, C)."""
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, ws * ws, c)


def window_reverse(windows: torch.Tensor, ws: int, h: int, w: int) -> torch.Tensor:
    """(B * windows, ws * ws, C) -> (B, H, W, C)."""
    x = windows.view(-1, h // ws, w // ws, ws, ws, windows.shape[-1]).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, windows.shape[-1])


class WindowAttention(nn.Module):
    """Multi-head self-attention inside a window, plus relative-position bias and optional mask."""

    def __init__(self, dim: int, heads: int, ws: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias_table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.5)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
        coords = coords.flatten(1)  # (2, ws*ws) row/column of each token in the window
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
        self.register_buffer("rel_index", rel[..., 0] * (2 * ws - 1) + rel[..., 1])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        bias = self.bias_table[self.rel_index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        attn = q @ k.transpose(-2, -1) * self.scale + bias.unsqueeze(0)
        if mask is not None:  # mask: (windows, n, n), broadcast over batch and heads
            nw = mask.shape[0]
            attn = attn.view(b // nw, nw, self.heads, n, n) + mask[None, :, None]
            attn = attn.view(b, self.heads, n, n)
        y = torch.softmax(attn, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class SwinBlock(nn.Module):
    """LN -> (shifted) window attention -> residual -> LN -> GELU MLP -> residual, on (B,H,W,C)."""

    def __init__(self, dim: int, heads: int, grid: int, ws: int, shift: int) -> None:
        super().__init__()
        if grid <= ws:  # the whole grid is one window: clip it and do not shift
            ws, shift = grid, 0
        self.ws, self.shift = ws, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, ws)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def _shift_mask(self, h: int, w: int, x: torch.Tensor) -> torch.Tensor:
        """-100 between tokens that came from different regions before the cyclic shift."""
        ws, s = self.ws, self.shift
        img = torch.zeros(1, h, w, 1, dtype=x.dtype, device=x.device)
        regions = (slice(0, -ws), slice(-ws, -s), slice(-s, None))
        for i, hs in enumerate(regions):
            for j, wsl in enumerate(regions):
                img[:, hs, wsl, :] = i * 3 + j
        win = window_partition(img, ws).squeeze(-1)  # (windows, ws*ws)
        diff = win.unsqueeze(1) - win.unsqueeze(2)
        return diff.masked_fill(diff != 0, -100.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h, w, _ = x.shape
        ws, s = self.ws, self.shift
        y = self.norm1(x)
        pad_b, pad_r = (ws - h % ws) % ws, (ws - w % ws) % ws
        if pad_b or pad_r:
            y = F.pad(y, (0, 0, 0, pad_r, 0, pad_b))
        hp, wp = h + pad_b, w + pad_r
        mask = None
        if s:
            y = torch.roll(y, (-s, -s), (1, 2))
            mask = self._shift_mask(hp, wp, y)
        y = window_reverse(self.attn(window_partition(y, ws), mask), ws, hp, wp)
        if s:
            y = torch.roll(y, (s, s), (1, 2))
        x = x + (y[:, :h, :w] if pad_b or pad_r else y)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """Concatenate each 2x2 neighbourhood (4C), LayerNorm, project to 2C."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat((x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]), -1)
        return self.reduction(self.norm(x))


class Model(nn.Module):
    """Swin-T-style classifier with reduced depths."""

    def __init__(self, num_classes: int = 1000, image: int = 96) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patch_embed = nn.Conv2d(3, _DIM, 4, 4)
        self.embed_norm = nn.LayerNorm(_DIM)
        layers: list[nn.Module] = []
        dim, grid = _DIM, image // 4
        for i, (depth, heads) in enumerate(zip(_DEPTHS, _HEADS, strict=True)):
            if i > 0:
                layers.append(PatchMerging(dim))
                dim, grid = dim * 2, grid // 2
            layers += [SwinBlock(dim, heads, grid, _WINDOW, (j % 2) * (_WINDOW // 2))
                       for j in range(depth)]
        self.layers = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):  # He (fan-in) init
                    nn.init.kaiming_normal_(m.weight)
                elif isinstance(m, nn.LayerNorm):  # non-trivial affine terms
                    nn.init.uniform_(m.weight, 0.5, 1.5)
                    nn.init.uniform_(m.bias, -0.2, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(self.patch_embed(x).permute(0, 2, 3, 1))
        x = self.norm(self.layers(x)).mean(dim=(1, 2))
        return self.head(x)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One 3x96x96 image."""
    torch.manual_seed(1)
    return (torch.randn(1, 3, 96, 96),)
