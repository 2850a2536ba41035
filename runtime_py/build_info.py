"""What this runtime holds: everything (the full runtime, this file as shipped), or the kernels
and backends ``nee-build`` selected for a board (it writes this file into a pruned runtime).

``KERNELS``: op -> the output dtypes kept (None: every kernel). ``KERNEL_MODULES``: the kernel
modules the pruned package ships (None: all). ``BACKENDS``: the delegate backends kept besides
the CPU (None: all). ``BUILD`` names the build in errors (a bundle needing a dropped kernel).
"""

from __future__ import annotations

KERNELS: dict[str, frozenset[str]] | None = None
KERNEL_MODULES: tuple[str, ...] | None = None
BACKENDS: tuple[str, ...] | None = None
BUILD = "the full NEE runtime"
