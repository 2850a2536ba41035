"""Building blocks shared by the example CNNs (``from _blocks import ...``).

Not an example itself: files whose name starts with "_" are skipped when examples are listed.
Everything here draws random numbers in construction order, as the examples did when they
carried their own copies, so the seeded models are unchanged bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import nn

TensorFn = Callable[[torch.Tensor], torch.Tensor]


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round channels to a multiple of ``divisor``, never dropping more than 10%."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def conv_bn(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1,
            act: Callable[[], nn.Module] | None = None) -> nn.Sequential:
    """k x k conv ("same" padding, no bias) -> BatchNorm, then ``act()`` unless it is None."""
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def he_init(model: nn.Module) -> None:
    """He (fan-in) normal weights for every conv and linear layer; biases are left as they are."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight)


def init_weights(model: nn.Module, image_size: int) -> None:
    """He (fan-in) weights, non-trivial BN affine terms, BN running statistics measured on noise.

    One train-mode pass over random ``image_size`` x ``image_size`` images sets each BatchNorm's
    running mean/var to the batch statistics (momentum None = cumulative average), so they are
    non-trivial yet keep the activations O(1) through the whole depth, which fixed random
    statistics do not.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        he_init(model)
        for bn in bns:
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.bias, -0.2, 0.2)
            bn.momentum = None
        model.train()(torch.randn(4, 3, image_size, image_size))
    for bn in bns:
        bn.momentum = 0.1


class SqueezeExcite(nn.Module):
    """Global average pool -> 1x1 reduce -> ``act`` -> 1x1 expand -> ``gate``, times the input."""

    def __init__(self, channels: int, squeezed: int, act: TensorFn, gate: TensorFn) -> None:
        super().__init__()
        self.act, self.gate = act, gate
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=(2, 3), keepdim=True)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvertedResidual(nn.Module):
    """Expand (1x1, skipped when ``hidden == c_in``) -> depthwise (k x k) -> optional SE ->
    linear project (1x1), with a residual add when the shapes match.

    ``act`` builds the activation after the expand and depthwise convs; ``se(hidden)`` builds
    the squeeze-excite module, if any. The layer stack is the submodule named ``body``.
    """

    def __init__(self, c_in: int, hidden: int, c_out: int, k: int, stride: int,
                 act: Callable[[], nn.Module], se: Callable[[int], nn.Module] | None = None,
                 body: str = "block") -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(c_in, hidden, 1, act=act)] if hidden != c_in else []
        layers.append(conv_bn(hidden, hidden, k, stride, groups=hidden, act=act))
        if se is not None:
            layers.append(se(hidden))
        layers.append(conv_bn(hidden, c_out, 1))
        self.body = body
        self.add_module(body, nn.Sequential(*layers))
        self.use_res = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = getattr(self, self.body)(x)
        return x + y if self.use_res else y


def mbconv_stages(c_in: int, stages: Sequence[tuple[int, int, int, int, int, bool]],
                  act: Callable[[], nn.Module], se_act: TensorFn) -> list[nn.Module]:
    """The MBConv blocks of EfficientNet and MnasNet, one stage per row of ``stages``
    (expansion, kernel, first stride, output channels, repeats, squeeze-excite): ``act`` after
    the expand and depthwise convs; the SE squeezes to a quarter of the block's input channels,
    with ``se_act`` and a sigmoid gate."""
    layers: list[nn.Module] = []
    for expand, k, stride, c_out, repeats, se in stages:
        for i in range(repeats):
            squeeze = partial(SqueezeExcite, squeezed=max(1, c_in // 4), act=se_act,
                              gate=torch.sigmoid)
            layers.append(InvertedResidual(c_in, c_in * expand, c_out, k,
                                           stride if i == 0 else 1, act, squeeze if se else None))
            c_in = c_out
    return layers


# MobileNetV3 (Howard et al. 2019), Large and Small: they differ only in their tables and widths.
_V3_ACTS: dict[str, Callable[[], nn.Module]] = {"RE": nn.ReLU, "HS": nn.Hardswish}


def _v3_squeeze_excite(channels: int) -> SqueezeExcite:
    """ReLU reduce to a quarter (rounded to 8), hardsigmoid gate."""
    return SqueezeExcite(channels, make_divisible(channels // 4), torch.relu,
                         nn.functional.hardsigmoid)


def mobilenet_v3_features(blocks: Sequence[tuple[int, int, int, bool, str, int]],
                          last: int) -> nn.Sequential:
    """Hardswish 3x3 stride-2 stem to 16 channels, one inverted residual per row of ``blocks``
    (kernel, expanded channels, out channels, squeeze-excite, "RE"/"HS" activation, stride),
    then a hardswish 1x1 conv to ``last`` channels."""
    layers: list[nn.Module] = [conv_bn(3, 16, 3, 2, act=nn.Hardswish)]
    c_in = 16
    for k, hidden, c_out, se, act, stride in blocks:
        layers.append(InvertedResidual(c_in, hidden, c_out, k, stride, _V3_ACTS[act],
                                       _v3_squeeze_excite if se else None))
        c_in = c_out
    layers.append(conv_bn(c_in, last, 1, act=nn.Hardswish))
    return nn.Sequential(*layers)


def mobilenet_v3_classifier(c_in: int, hidden: int, num_classes: int) -> nn.Sequential:
    """Linear -> hardswish -> dropout -> linear, on the pooled features."""
    return nn.Sequential(
        nn.Linear(c_in, hidden), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(hidden, num_classes)
    )


def random_samples(*shapes: tuple[int, ...], count: int = 16) -> list[tuple[torch.Tensor, ...]]:
    """``count`` seeded normal input tuples of these shapes: calibration data for --quantize
    (nee-export holds every fourth one out for the accuracy report)."""
    generator = torch.Generator().manual_seed(2)
    return [tuple(torch.randn(shape, generator=generator) for shape in shapes)
            for _ in range(count)]
