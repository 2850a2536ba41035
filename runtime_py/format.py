"""Constants of the .nee file format shared by the writer (toolchain) and the reader (runtime)."""

from __future__ import annotations

from collections.abc import Sequence

SCHEMA_VERSION = 2
FILE_IDENTIFIER = b"NEE1"
FOOTER_MAGIC = b"NEEC"  # the footer: these 4 bytes, then the flatbuffer's uint32 CRC-32
FOOTER_BYTES = 8
SEGMENT_ALIGNMENT = 64
SIZE_PREFIX_BYTES = 4
# The node calling a delegated partition (Bundle.delegates[args.delegate]); not a kernel.
DELEGATE_CALL = "nee::delegate_call"

SCRATCH_ARG = "scratch"  # a kernel's planned workspace argument (the add_scratch pass adds it)
FAST_SCRATCH_ARG = "fast_scratch"  # a delegate call's second workspace, in fast memory
SCRATCH_ARGS = (SCRATCH_ARG, FAST_SCRATCH_ARG)  # workspaces: live during their node only

# DType enum value <-> numpy dtype name, in schemas/nee.fbs order.
DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")
DTYPE_CODES = {name: code for code, name in enumerate(DTYPES)}


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides for ``shape``."""
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def dense_strides(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` lay ``shape`` out row-major in some order of its dims (size-1 dims
    aside): every element once, no gaps (a channels-last feature map's, or row-major's)."""
    dims = sorted(((st, size) for size, st in zip(shape, strides, strict=True) if size != 1),
                  reverse=True)
    return tuple(st for st, _ in dims) == contiguous_strides([size for _, size in dims])


def align(n: int, alignment: int = SEGMENT_ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    return -(-n // alignment) * alignment


def segment_base(flatbuffer_size: int) -> int:
    """File offset where constant segments start, after the size-prefixed flatbuffer."""
    return align(SIZE_PREFIX_BYTES + flatbuffer_size)
