"""Convolution, pooling, normalisation and embedding kernels vs. torch.

Convolution uses rtol 1e-4 / atol 1e-5 (like matmul): the C*KH*KW-term dot products are
summed in a different order than torch's (mkldnn) kernels, so float32 rounding differs.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
from kernel_harness import (
    check_op,
    check_rules,
    coarse,
    peak_bytes,
    placeholder,
    planned_scratch,
    random,
    run_kernel,
    to_kernel_arg,
    with_layout,
)

from runtime_py import kernels
from runtime_py.kernels import KERNELS, nn
from runtime_py.kernels._common import _pairs, gather_copier
from runtime_py.kernels.nn import _conv_plan, _ConvPlan, conv_shape, stored_channels_last

aten = torch.ops.aten
CONV_TOL = {"rtol": 1e-4, "atol": 1e-5}

# (input shape, weight shape, stride, padding, dilation, groups)
CONV_CASES = {
    "3x3": ((2, 3, 9, 9), (8, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    "stride2-asym": ((1, 4, 10, 7), (6, 4, 3, 2), [2, 1], [1, 0], [1, 1], 1),
    "dilated": ((1, 3, 12, 12), (4, 3, 3, 3), [1, 1], [2, 2], [2, 2], 1),
    "7x7-stem": ((1, 3, 32, 32), (16, 3, 7, 7), [2, 2], [3, 3], [1, 1], 1),
    "1x1": ((2, 16, 5, 5), (24, 16, 1, 1), [1, 1], [0, 0], [1, 1], 1),
    "1x1-narrowing": ((1, 24, 5, 5), (16, 24, 1, 1), [1, 1], [0, 0], [1, 1], 1),
    "1x1-stride2": ((1, 16, 8, 8), (8, 16, 1, 1), [2, 2], [0, 0], [1, 1], 1),
    # one position per image (a squeeze-excite gate): matrix-vector products (VECTOR_POSITIONS)
    "1x1-vector": ((2, 16, 1, 1), (24, 16, 1, 1), [1, 1], [0, 0], [1, 1], 1),
    "grouped": ((1, 8, 7, 7), (12, 2, 3, 3), [1, 1], [1, 1], [1, 1], 4),
    # stride 1, as wide as the input: columns from a flat copy (FLAT_COLUMNS)
    "5x3-rows-unpadded": ((2, 3, 6, 8), (4, 3, 3, 5), [1, 1], [0, 2], [1, 1], 1),
    "kernel-wider-than-input": ((1, 2, 3, 2), (3, 2, 3, 5), [1, 1], [1, 2], [1, 1], 1),
    "depthwise": ((2, 6, 9, 9), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1], 6),
    "depthwise-s2-5x5": ((1, 8, 11, 11), (8, 1, 5, 5), [2, 2], [2, 2], [1, 1], 8),
    "depthwise-large-5x5": ((1, 8, 20, 20), (8, 1, 5, 5), [2, 2], [2, 2], [1, 1], 8),
    "depthwise-dilated": ((1, 4, 10, 10), (4, 1, 3, 3), [1, 1], [2, 2], [2, 2], 4),
    "depth-multiplier": ((1, 4, 6, 6), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], 4),
    # positions <= EINSUM_POSITIONS * channels * taps: one einsum over a channels-last copy
    "depthwise-small-image": ((2, 40, 5, 5), (40, 1, 3, 3), [1, 1], [1, 1], [1, 1], 40),
    "depthwise-small-s2-7x7": ((1, 64, 7, 6), (64, 1, 7, 7), [2, 2], [3, 3], [1, 1], 64),
    "depthwise-small-dilated": ((1, 32, 5, 5), (32, 1, 3, 3), [1, 1], [2, 2], [2, 2], 32),
    "depthwise-small-unpadded": ((1, 48, 4, 4), (48, 1, 3, 3), [1, 1], [0, 0], [1, 1], 48),
    "depthwise-windowed-s2-dilated": ((2, 24, 9, 9), (24, 1, 5, 5), [2, 2], [4, 4], [2, 2], 24),
    "depthwise-windowed-tiled": ((1, 128, 7, 7), (128, 1, 5, 5), [1, 1], [2, 2], [1, 1], 128),
    # at most DENSE_POSITIONS x taps input positions: one einsum over a dense weight matrix
    "depthwise-dense": ((2, 24, 3, 3), (24, 1, 5, 5), [1, 1], [2, 2], [1, 1], 24),
    "depthwise-dense-s2-dilated": ((1, 16, 3, 3), (16, 1, 3, 3), [2, 2], [2, 2], [2, 2], 16),
    "conv1d-depthwise-dense": ((1, 8, 5), (8, 1, 5), [1], [2], [1], 8),
    # stride 1, as wide as the input, many positions: one einsum over column-shifted copies
    "depthwise-shifted-rect": ((2, 8, 14, 20), (8, 1, 3, 5), [1, 1], [1, 2], [1, 1], 8),
    "depthwise-shifted-rows-unpadded": ((1, 8, 12, 12), (8, 1, 3, 3), [1, 1], [0, 1], [1, 1], 8),
    "depthwise-shifted-kernel-wider": ((1, 2, 12, 3), (2, 1, 3, 7), [1, 1], [1, 3], [1, 1], 2),
    # more copies or planes than DEPTHWISE_BLOCK_BYTES: channel blocks without a board budget
    "depthwise-blocked": ((1, 40, 50, 50), (40, 1, 3, 3), [1, 1], [1, 1], [1, 1], 40),
    "depthwise-blocked-s2": ((1, 64, 50, 50), (64, 1, 3, 3), [2, 2], [1, 1], [1, 1], 64),
    # stride 1, narrower than the input: multiply and add per tap over phase planes
    "depthwise-unpadded": ((1, 8, 20, 20), (8, 1, 3, 3), [1, 1], [0, 0], [1, 1], 8),
    "conv1d": ((2, 4, 20), (6, 4, 5), [1], [2], [1], 1),
    "conv1d-strided-dilated": ((1, 3, 17), (5, 3, 3), [2], [1], [3], 1),
    "conv1d-depthwise": ((1, 6, 16), (6, 1, 3), [1], [1], [1], 6),
    "conv1d-depthwise-windowed": ((1, 16, 30), (16, 1, 25), [1], [12], [1], 16),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_convolution(case: str, layout: str, bias: bool) -> None:
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    check_op(aten.convolution.default, input=with_layout(random(x_shape), layout),
             weight=random(w_shape), bias=random((w_shape[0],)) if bias else None,
             stride=stride, padding=padding, dilation=dilation, transposed=False,
             output_padding=[0] * len(stride), groups=groups, **CONV_TOL)


@pytest.mark.parametrize("budget", [1, 20_000, 150_000])
@pytest.mark.parametrize("case", ["3x3", "stride2-asym", "dilated", "7x7-stem", "grouped",
                                  "1x1", "conv1d", "5x3-rows-unpadded", "depthwise",
                                  "depthwise-s2-5x5", "conv1d-depthwise", "depthwise-small-image",
                                  "depthwise-windowed-tiled", "depthwise-dense"])
def test_convolution_under_a_scratch_budget(case: str, budget: int) -> None:
    """A budgeted scratch (as add_scratch plans for boards with ``scratch_limit``) makes im2col
    work in row tiles and depthwise in channel blocks (the depthwise einsum falls back to
    them); results are unchanged and the scratch is smaller than the full
    one."""
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    torch_args = {"input": random(x_shape), "weight": random(w_shape),
                  "bias": random((w_shape[0],)), "stride": stride, "padding": padding,
                  "dilation": dilation, "transposed": False,
                  "output_padding": [0] * len(stride), "groups": groups}
    want = aten.convolution.default(**torch_args).numpy()
    args = {k: to_kernel_arg(v) for k, v in torch_args.items()}
    kernel = KERNELS["aten::convolution.out"]
    shapes = {k: placeholder(v) for k, v in args.items()}
    full, small = kernel.scratch(**shapes), kernel.scratch(**shapes, budget=budget)
    one_row = len(w_shape) == 3 and groups == 1  # conv1d is one output row: nothing to tile
    assert small < full or budget >= full or (one_row and small == full)
    out = np.full(want.shape, np.nan, np.float32)
    kernel.fn(**args, out=out, scratch=np.full(small, 0xFF, np.uint8))
    np.testing.assert_allclose(out, want, **CONV_TOL)


@pytest.mark.parametrize(("case", "ones"), [("3x3", True), ("7x7-stem", True), ("1x1", True),
                                            ("1x1-stride2", True), ("conv1d", True),
                                            ("1x1-narrowing", False), ("grouped", False),
                                            ("1x1-vector", False)])
def test_bias_in_the_product(case: str, ones: bool) -> None:
    """An ungrouped convolution with a bias adds it in its product (a ones row under the
    columns), a 1x1 one only if it has no more input than output channels and more than one
    output position; none without a bias."""
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    key = (x_shape, w_shape, tuple(stride), tuple(padding), tuple(dilation), groups, None)
    assert _conv_plan(*key, True).ones is ones
    assert not _conv_plan(*key, False).ones


@pytest.mark.parametrize("vectors", [False, True])
def test_weights_prefetched_over_few_positions(vectors: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight is streamed into the caches (one dot with itself) before its product over
    2..BLOCKED_POSITIONS output positions, if it has at most PREFETCH_BYTES; before a
    matrix-vector product (one position) only with PREFETCH_VECTORS; never before a product
    over more positions."""
    monkeypatch.setattr(nn, "PREFETCH_VECTORS", vectors)
    w = np.ones((64, 16), np.float32)
    positions = (1, 2, 9, nn.BLOCKED_POSITIONS, nn.BLOCKED_POSITIONS + 1)
    assert [len(nn.prefetches(p, [w])) for p in positions] == [int(vectors), 1, 1, 1, 0]
    big = np.ones(nn.PREFETCH_BYTES // 4 + 1, np.float32)
    assert nn.prefetches(9, [big]) == []


FLAT = {"3x3", "grouped", "conv1d", "5x3-rows-unpadded", "kernel-wider-than-input"}


def _same_both_ways(case: str, setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The convolution of ``case`` (random input, weight and bias, NaN-garbage scratch) gives
    the same bits with ``nn.<setting>`` on and off."""
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    args = {"input": random(x_shape).numpy(), "weight": random(w_shape).numpy(),
            "bias": random((w_shape[0],)).numpy(), "stride": tuple(stride),
            "padding": tuple(padding), "dilation": tuple(dilation), "transposed": False,
            "output_padding": (0,) * len(stride), "groups": groups}
    kernel, outs = KERNELS["aten::convolution.out"], []
    for value in (True, False):
        monkeypatch.setattr(nn, setting, value)
        _conv_plan.cache_clear()
        scratch = np.full(kernel.scratch(**args), 0xFF, np.uint8)
        outs.append(np.full(conv_shape(**args), np.nan, np.float32))
        kernel.fn(**args, out=outs[-1], scratch=scratch)
    _conv_plan.cache_clear()
    np.testing.assert_array_equal(*outs)


def _plan(case: str) -> _ConvPlan:
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    return _conv_plan(x_shape, w_shape, tuple(stride), tuple(padding), tuple(dilation), groups)


@pytest.mark.parametrize("case", sorted(c for c in CONV_CASES if "depth" not in c))
def test_flat_columns(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stride-1 convolutions as wide as their input, and only those, copy their columns from a
    flat copy of the input; their output is bit for bit the one from the 2-D padded input."""
    assert _plan(case).flat is (case in FLAT)
    _same_both_ways(case, "FLAT_COLUMNS", monkeypatch)


@pytest.mark.parametrize("case", sorted(c for c in CONV_CASES
                                        if _plan(c).channels_last or _plan(c).dense))
def test_channels_last_bias(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The depthwise einsum and dense paths give the same bits whether they add the bias to
    their channels-last accumulator (CHANNELS_LAST_BIAS) or in the copy to out."""
    _same_both_ways(case, "CHANNELS_LAST_BIAS", monkeypatch)


@pytest.mark.parametrize("budget", [None, 1])
@pytest.mark.parametrize(("x_last", "out_last"), [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("case", sorted(c for c in CONV_CASES if len(CONV_CASES[c][0]) == 4))
def test_convolution_channels_last(case: str, x_last: bool, out_last: bool,
                                   budget: int | None) -> None:
    """Feature maps stored channels-last (as the channels_last pass lays them out) give
    torch's results, in and out, with the scratch the kernel asks for (filled with NaN bytes)
    or a budget below it (channel blocks and row tiles, which write the same out), at each
    run; the planned paths allocate nothing output-sized."""
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    x, weight, bias = random(x_shape), random(w_shape), random((w_shape[0],))
    want = aten.convolution.default(x, weight, bias, stride, padding, dilation, False,
                                    [0, 0], groups).numpy()
    args = {"input": x.numpy(), "weight": weight.numpy(), "bias": bias.numpy(),
            "stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
            "transposed": False, "output_padding": (0, 0), "groups": groups}
    if x_last:
        args["input"] = stored_channels_last(args["input"])
    out = np.full(want.shape, np.nan, np.float32)
    out = stored_channels_last(out) if out_last else out
    kernel = KERNELS["aten::convolution.out"]
    size = kernel.scratch(**{k: placeholder(v) for k, v in args.items()}, out=placeholder(out),
                          **({} if budget is None else {"budget": budget}))
    with mock.patch.object(kernels, "LONG_LOOP_BUFSIZE", 64):  # as kernel_harness.run_kernel
        call = kernel.bind({**args, "out": out, "scratch": np.full(size, 0xFF, np.uint8)})
    for _ in range(2):
        call()
        np.testing.assert_allclose(out, want, **CONV_TOL)
    with np.errstate():
        np.setbufsize(64)
        assert peak_bytes(call) < max(4096, out.nbytes // 4)


@pytest.mark.parametrize(("case", "depthwise_einsum", "out_last"), [
    ("depthwise", True, True), ("depthwise-blocked-s2", True, True),
    ("depthwise-dilated", False, False), ("1x1-narrowing", False, True), ("3x3", False, True),
    ("grouped", False, False)])
def test_channels_last_plans(case: str, depthwise_einsum: bool, out_last: bool) -> None:
    """With its input and out stored channels-last, an undilated depthwise convolution of any
    size is the channels-last einsum, accumulating in out itself (no accumulator); the
    products of an ungrouped one write out as (positions, channels)."""
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    plan = _conv_plan(x_shape, w_shape, tuple(stride), tuple(padding), tuple(dilation), groups,
                      None, True, (True, True))
    assert plan.channels_last is depthwise_einsum
    assert plan.out_last is out_last
    assert (plan.work is None) is (depthwise_einsum or (plan.direct and not plan.ones))


def test_channels_last_einsum_bands() -> None:
    """Over channels-last maps the depthwise einsum works in bands of output rows whose
    buffer fits DEPTHWISE_BLOCK_BYTES (under a budget, what it leaves), one band where all fit;
    test_convolution_channels_last checks the results of both."""
    def plan(case: str, budget: int | None = None) -> _ConvPlan:
        x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
        return _conv_plan(x_shape, w_shape, tuple(stride), tuple(padding), tuple(dilation),
                          groups, budget, True, (True, True))

    banded, whole = plan("depthwise-blocked-s2"), plan("depthwise")
    assert 1 < banded.tile < banded.out_shape[2] and banded.nbytes <= nn.DEPTHWISE_BLOCK_BYTES
    assert whole.tile == whole.out_shape[2]
    budgeted = plan("depthwise-blocked-s2", 100_000)
    assert budgeted.channels_last and budgeted.tile < banded.tile and budgeted.nbytes <= 100_000


@pytest.mark.parametrize("hw, stride, margins", [((50, 50), 2, True), ((24, 24), 1, True),
                                                 ((3, 3), 1, False), ((3, 4), 2, False)])
def test_band_margins_are_the_padding(hw: tuple[int, int], stride: int, margins: bool) -> None:
    """The parts of a channels-last einsum band zeroed at each run (``_band_margins``) and the
    input's copies cover the band, so a NaN-filled band holds no NaN after both; over a large
    map the margins alone are zeroed, over a small one (mostly padding) the whole band."""
    x = np.ones((1, 4, *hw), np.float32)
    win = nn._Window((3, 3), (stride, stride), (1, 1), (1, 1),
                     tuple((size - 1) // stride + 1 for size in hw))
    band = np.full(nn._column_phases(1, 4, win), np.nan, np.float32)
    views = nn._band_margins(hw, band, (-1, -1))
    for view in views:
        view.fill(0)
    for q in range(stride):
        dst, src = nn._phase_fill(x, band[:, :, q].transpose(0, 3, 1, 2), (-1, q - 1),
                                  (1, stride))
        np.copyto(dst, src)
    assert not np.isnan(band).any()
    assert (sum(v.size for v in views) < band.size) is margins
    assert band.sum() == x.sum()  # each input value copied once, the rest zeros


_GATHERS = {  # name -> (view of a (2, 3, 40) array, whether it copies as pairs)
    "even-columns": (lambda a: a[..., ::2], True),
    "rows-odd-columns": (lambda a: a[:, :2, 1::2], True),
    "neighbour-past-the-end": (lambda a: a[..., 1::2], False),  # a[1, 2, 39] is the last
    "short-runs": (lambda a: a[..., :24:2], False),
    "stride-3": (lambda a: a[..., ::3], False),
    "contiguous": (lambda a: a[..., 1:30], False),
    "as-strided": (lambda a: np.lib.stride_tricks.as_strided(a, (2, 2, 16), (480, 164, 8)), True),
}


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("readonly", [False, True])
@pytest.mark.parametrize("name", sorted(_GATHERS))
def test_gather_copier(name: str, readonly: bool, dtype: type) -> None:
    """A stride-2 source copies as a cast of 8-byte pairs where every element's neighbour is
    in its array's memory, else as a plain copy; both give the source's bits (NaN payloads
    included)."""
    view, as_pairs = _GATHERS[name]
    values = np.arange(240, dtype=np.int32).astype(dtype)
    if dtype is np.float32:
        values.view(np.uint32)[::7] = 0x7FA00001  # signalling NaNs with a payload
    a = (np.frombuffer(values.tobytes(), dtype) if readonly else values).reshape(2, 3, 40)
    src = view(a)
    assert (_pairs(src) is not None) is as_pairs
    out = np.zeros(src.shape, dtype)
    gather_copier(out, src)()
    np.testing.assert_array_equal(out.view(np.uint32), np.ascontiguousarray(src).view(np.uint32))


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_convolution_reads_its_input_at_each_run(case: str, layout: str) -> None:
    """A call prepared once reads the input's current values at every run, whatever the
    input's layout (a permuted or sliced view included: a reshape that copies at prepare
    would keep the first values)."""
    x_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[case]
    x = to_kernel_arg(with_layout(random(x_shape), layout))
    args = {"input": x, "weight": random(w_shape).numpy(), "bias": random((w_shape[0],)).numpy(),
            "stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
            "transposed": False, "output_padding": (0,) * len(stride), "groups": groups}
    kernel = KERNELS["aten::convolution.out"]
    out = np.empty(conv_shape(**args), np.float32)
    call = kernel.bind({**args, "out": out, **planned_scratch(kernel, args)})
    call()
    x[...] = random(x_shape).numpy()  # new values, in place
    call()
    want = np.empty_like(out)
    kernel.fn(**args, out=want)
    np.testing.assert_array_equal(out, want)


def test_transposed_convolution_not_implemented() -> None:
    with pytest.raises(NotImplementedError):
        check_op(aten.convolution.default, input=random((1, 2, 4, 4)),
                 weight=random((2, 2, 3, 3)), bias=None, stride=[1, 1], padding=[0, 0],
                 dilation=[1, 1], transposed=True, output_padding=[0, 0], groups=1)


# (input shape, kernel, stride, padding, dilation, ceil_mode)
MAX_POOL_CASES = {
    "2x2": ((1, 3, 8, 8), [2, 2], [2, 2], [0, 0], [1, 1], False),
    "resnet-stem": ((2, 4, 11, 11), [3, 3], [2, 2], [1, 1], [1, 1], False),
    "ceil": ((1, 2, 7, 9), [3, 2], [2, 2], [0, 1], [1, 1], True),
    "dilated": ((1, 2, 10, 10), [3, 3], [1, 1], [1, 1], [2, 2], False),
    "default-stride": ((1, 2, 6, 6), [3, 3], [], [0, 0], [1, 1], False),
    "unbatched": ((3, 6, 6), [2, 2], [1, 1], [1, 1], [1, 1], True),
    # separable (stride 1, or unpadded windows the size of the stride)
    "2x2-odd": ((2, 2, 9, 7), [2, 2], [2, 2], [0, 0], [1, 1], False),
    "s1-5x3-dilated": ((1, 2, 10, 9), [5, 3], [1, 1], [2, 1], [1, 2], False),
    "s1-ceil": ((1, 3, 7, 8), [3, 2], [1, 1], [1, 1], [1, 1], True),
}


@pytest.mark.parametrize("values", ["random", "ties"])
@pytest.mark.parametrize("case", sorted(MAX_POOL_CASES))
def test_max_pool2d_with_indices(case: str, values: str) -> None:
    """Values and int64 flat indices; ties pick the first max in window order, as torch."""
    shape, kernel, stride, padding, dilation, ceil_mode = MAX_POOL_CASES[case]
    x = random(shape) if values == "random" else coarse(shape)
    check_op(aten.max_pool2d_with_indices.default, self=with_layout(x, "transposed"),
             kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
             ceil_mode=ceil_mode)


@pytest.mark.parametrize("scratch", [False, True])
@pytest.mark.parametrize("case", sorted(MAX_POOL_CASES))
def test_max_pool2d_without_indices(case: str, scratch: bool) -> None:
    """``nee::max_pool2d.out`` (what export uses when indices are unread) equals torch."""
    shape, kernel, stride, padding, dilation, ceil_mode = MAX_POOL_CASES[case]
    x = random(shape)
    x.view(-1)[3] = float("nan")
    x.view(-1)[-5:] = float("-inf")
    want = torch.nn.functional.max_pool2d(x, kernel, stride or None, padding, dilation,
                                          ceil_mode=ceil_mode).numpy()
    args = {"self": with_layout(x, "transposed").numpy(), "kernel_size": tuple(kernel),
            "stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
            "ceil_mode": ceil_mode}
    out = np.full(want.shape, 7.0, np.float32)
    run_kernel(KERNELS["nee::max_pool2d.out"], args, {"out": out}, scratch)
    np.testing.assert_array_equal(out, want)
    check_rules("nee::max_pool2d.out", args, {"out": out})


def test_max_pool2d_nan_and_neg_inf() -> None:
    x = random((1, 1, 4, 4))
    x[0, 0, 0, 1] = float("nan")
    x[0, 0, 2:, 2:] = float("-inf")
    check_op(aten.max_pool2d_with_indices.default, self=x, kernel_size=[2, 2], stride=[2, 2],
             padding=[1, 1])


# (input shape, kernel, stride, padding, ceil_mode)
AVG_POOL_CASES = {
    "2x2": ((1, 3, 8, 8), [2, 2], [2, 2], [0, 0], False),
    "3x3-pad": ((2, 2, 7, 7), [3, 3], [2, 2], [1, 1], False),
    "ceil": ((1, 2, 7, 8), [3, 3], [2, 2], [1, 0], True),
    "default-stride": ((1, 2, 6, 6), [3, 2], [], [0, 0], False),
    "unbatched": ((2, 5, 5), [2, 2], [2, 2], [1, 1], True),
    # separable (stride 1, or unpadded windows the size of the stride)
    "2x2-odd": ((2, 3, 9, 7), [2, 2], [2, 2], [0, 0], False),
    "s1-pad": ((1, 2, 7, 6), [3, 3], [1, 1], [1, 1], False),
    "s1-ceil": ((1, 2, 6, 5), [3, 2], [1, 1], [1, 0], True),
}


@pytest.mark.parametrize("divisor_override", [None, 3])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("case", sorted(AVG_POOL_CASES))
def test_avg_pool2d(case: str, count_include_pad: bool, divisor_override: int | None) -> None:
    shape, kernel, stride, padding, ceil_mode = AVG_POOL_CASES[case]
    check_op(aten.avg_pool2d.default, self=with_layout(random(shape), "strided"),
             kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode,
             count_include_pad=count_include_pad, divisor_override=divisor_override)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 4)])
def test_batch_norm_no_training(shape: tuple[int, ...], affine: bool) -> None:
    """out0 normalised; out1/out2 are the (0,)-shaped saved stats torch returns in eval."""
    c = shape[1]
    check_op(aten._native_batch_norm_legit_no_training.default,
             input=with_layout(random(shape), "transposed"),
             weight=random((c,)) if affine else None, bias=random((c,)) if affine else None,
             running_mean=random((c,)), running_var=random((c,)).abs() + 0.5,
             momentum=0.1, eps=1e-5)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize(("shape", "normalized"), [((2, 5, 16), [16]), ((32, 128), [128]),
                                                   ((2, 3, 4, 5), [4, 5])])
def test_native_layer_norm(shape: tuple[int, ...], normalized: list[int], affine: bool) -> None:
    """out0 normalised, out1 the mean and out2 the rstd (keepdims-shaped)."""
    x = with_layout(random(shape, scale=3) + 1, "strided")
    check_op(aten.native_layer_norm.default, input=x, normalized_shape=normalized,
             weight=random(normalized) if affine else None,
             bias=random(normalized) if affine else None, eps=1e-5)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
@pytest.mark.parametrize(("shape", "normalized"), [((2, 5, 16), [16]), ((2, 3, 4, 5), [4, 5])])
def test_native_layer_norm_reads_its_inputs_at_each_run(shape: tuple[int, ...],
                                                        normalized: list[int],
                                                        layout: str) -> None:
    """A call prepared once reads the current values of its input and of a weight and bias
    that are activations, whatever their layout (a reshape of a permuted weight copies)."""
    args = {"input": to_kernel_arg(with_layout(random(shape), layout)),
            "normalized_shape": tuple(normalized),
            "weight": to_kernel_arg(with_layout(random(normalized), layout)),
            "bias": to_kernel_arg(with_layout(random(normalized), layout)), "eps": 1e-5}
    kernel = KERNELS["aten::native_layer_norm.out"]
    stats = (*shape[:-len(normalized)], *(1,) * len(normalized))
    outs = {"out0": np.empty(shape, np.float32), "out1": np.empty(stats, np.float32),
            "out2": np.empty(stats, np.float32)}
    call = kernel.bind({**args, **outs, **planned_scratch(kernel, args)})
    call()
    for name in ("input", "weight", "bias"):  # new values, in place
        args[name][...] = random(args[name].shape).numpy()
    call()
    want = {name: np.empty_like(out) for name, out in outs.items()}
    kernel.fn(**args, **want)
    for name, out in outs.items():
        np.testing.assert_array_equal(out, want[name], err_msg=name)


@pytest.mark.parametrize("indices_shape", [(5,), (2, 7), ()])
def test_embedding(indices_shape: tuple[int, ...]) -> None:
    indices = torch.randint(0, 10, indices_shape)
    check_op(aten.embedding.default, weight=random((10, 4)), indices=indices)


def test_embedding_out_of_range() -> None:
    with pytest.raises(IndexError):
        check_op(aten.embedding.default, weight=random((3, 2)), indices=torch.tensor([0, 3]))


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize(("shape", "group"), [((2, 6, 5, 5), 3), ((1, 32, 8, 8), 8),
                                              ((2, 4, 7), 2), ((3, 8), 4), ((2, 6, 3, 3), 1),
                                              ((1, 4, 2, 2), 4)])
def test_native_group_norm(shape: tuple[int, ...], group: int, affine: bool) -> None:
    """out0 normalised per (sample, channel group), out1 the mean and out2 the rstd (N, group).
    (torch's kernel takes contiguous inputs only: 4-D ones are given channels-last.)"""
    n, c = shape[:2]
    x = random(shape, scale=3) + 1
    if x.ndim == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    check_op(aten.native_group_norm.default, input=x, weight=random((c,)) if affine else None,
             bias=random((c,)) if affine else None, N=n, C=c,
             HxW=x.numel() // (n * c), group=group, eps=1e-5)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize(("shape", "output_size"), [((2, 3, 8, 8), [1, 1]), ((1, 4, 7, 7), [7, 7]),
                                                    ((1, 2, 10, 9), [3, 4]), ((2, 6, 12), [4, 5]),
                                                    ((3, 5, 5), [2, 3]), ((1, 2, 5, 7), [6, 9]),
                                                    ((1, 64, 14, 14), [2, 2])])
def test_adaptive_avg_pool2d(shape: tuple[int, ...], output_size: list[int], layout: str) -> None:
    """torch's windows [floor(i*H/oh), ceil((i+1)*H/oh)): uneven, overlapping, or larger outputs."""
    check_op(aten._adaptive_avg_pool2d.default, self=with_layout(random(shape), layout),
             output_size=output_size)


def test_depthwise_einsum_on_few_positions_per_channel_and_tap_else_channel_blocks() -> None:
    """Einsum up to EINSUM_POSITIONS * channels * taps output positions (all images) and
    within the budget; otherwise channel blocks."""
    def plan(x_shape: tuple[int, ...], k: int = 3, budget: int | None = None) -> _ConvPlan:
        c = x_shape[1]
        return _conv_plan(x_shape, (c, 1, k, k), (1, 1), (k // 2,) * 2, (1, 1), c, budget)

    assert plan((1, 64, 16, 16)).channels_last  # 256 <= 0.5 * 64 * 9 positions
    assert not plan((1, 64, 17, 17)).channels_last
    assert plan((2, 64, 12, 12)).channels_last  # 288: two images
    assert not plan((2, 64, 13, 13)).channels_last
    assert plan((1, 64, 17, 17), k=7).channels_last
    large, over_budget = plan((1, 64, 50, 50)), plan((1, 64, 12, 12), budget=50_000)
    assert not large.channels_last and large.tile < 64
    assert not over_budget.channels_last and over_budget.nbytes <= 50_000


def test_depthwise_shifted_copies_at_stride_1_as_wide_as_the_input(monkeypatch) -> None:
    """Past the einsum's positions, a stride-1 depthwise convolution as wide as its input sums
    over column-shifted copies in channel blocks within DEPTHWISE_BLOCK_BYTES or the budget,
    whether or not im2col columns come from flat copies (FLAT_COLUMNS); at stride 2, dilated
    or narrower it works per tap."""
    def plan(x_shape: tuple[int, ...], stride: int = 1, pad: int = 1,
             budget: int | None = None) -> _ConvPlan:
        c = x_shape[1]
        return _conv_plan(x_shape, (c, 1, 3, 3), (stride,) * 2, (pad,) * 2, (1, 1), c, budget)

    assert plan((1, 32, 48, 48)).shifted
    assert plan((1, 64, 16, 16)).channels_last
    assert not plan((1, 32, 48, 48), stride=2).shifted
    assert not plan((1, 32, 48, 48), pad=0).shifted
    assert not _conv_plan((1, 32, 48, 48), (32, 1, 3, 3), (1, 1), (2, 2), (2, 2), 32).shifted
    blocks, budgeted = plan((1, 64, 50, 50)), plan((1, 64, 50, 50), budget=50_000)
    assert blocks.shifted and blocks.tile < 64 and blocks.nbytes <= nn.DEPTHWISE_BLOCK_BYTES
    assert budgeted.shifted and budgeted.nbytes <= 50_000
    monkeypatch.setattr(nn, "FLAT_COLUMNS", False)
    _conv_plan.cache_clear()
    assert plan((1, 32, 48, 48)).shifted
    _conv_plan.cache_clear()


def test_depthwise_shifted_copies_into_a_transposed_out() -> None:
    """An out whose rows are not one run (a transposed view) still gets the right values: the
    einsum then writes it row by row."""
    torch_args = {"input": random((1, 8, 12, 12)), "weight": random((8, 1, 3, 3)),
                  "bias": random((8,)), "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1],
                  "transposed": False, "output_padding": [0, 0], "groups": 8}
    want = aten.convolution.default(**torch_args).numpy()
    args = {k: to_kernel_arg(v) for k, v in torch_args.items()}
    kernel = KERNELS["aten::convolution.out"]
    assert _conv_plan((1, 8, 12, 12), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), 8).shifted
    out = np.full((1, 8, 12, 12), np.nan, np.float32).transpose(0, 1, 3, 2)
    scratch = np.full(kernel.scratch(**{k: placeholder(v) for k, v in args.items()}), 0xFF,
                      np.uint8)
    kernel.fn(**args, out=out, scratch=scratch)
    np.testing.assert_allclose(out, want, **CONV_TOL)


def test_depthwise_dense_on_small_inputs() -> None:
    """A depthwise convolution with at most DENSE_POSITIONS x taps input positions and a dense
    weight matrix of at most DENSE_BYTES is one einsum over that matrix, within the budget."""
    def plan(x_shape: tuple[int, ...], k: int, budget: int | None = None) -> _ConvPlan:
        c = x_shape[1]
        return _conv_plan(x_shape, (c, 1, k, k), (1, 1), (k // 2,) * 2, (1, 1), c, budget)

    assert plan((1, 64, 5, 5), 5).dense  # 25 input positions, 25 taps
    assert not plan((1, 64, 6, 6), 5).dense and plan((1, 64, 6, 6), 5).channels_last
    assert plan((2, 576, 3, 3), 5).dense  # 9 x 9 x 576 floats: 182 KiB
    assert not plan((1, 1700, 3, 3), 5).dense  # 538 KiB > DENSE_BYTES
    assert not plan((1, 64, 5, 5), 5, budget=10_000).dense


