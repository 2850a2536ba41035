"""The Arm Ethos-U backend: a partition compiled by Vela (command stream + encoded weights).

On a host without the NPU (the default, ``EthosU()``) it runs the partition's reference program
on the int8 CPU kernels, bit-exact with what the bundle's toolchain verified, and the
partition's ``estimate`` gives Vela's time at the board's clock. On a device, a driver hands the
command stream to the NPU: ``EthosU(driver=...)`` takes a function that receives the
``Partition`` (payload, scratch, I/O views and their offsets inside the scratch) at load and
returns the closure that runs it. ``EthosU(require_device=True)`` refuses to emulate: loading
fails unless a driver was given. NEE ships no driver (none is faked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from runtime_py.errors import BundleError
from runtime_py.kernels import Bound

if TYPE_CHECKING:
    from runtime_py.backends import Partition

Driver = Callable[["Partition"], Bound]


class EthosU:
    """Runs Ethos-U partitions on a driver, or emulates them on the host (see module doc)."""

    def __init__(self, driver: Driver | None = None, *, require_device: bool = False) -> None:
        self.driver = driver
        self.require_device = require_device
        self.label = ("Ethos-U driver" if driver else
                      "host emulation on the int8 reference kernels")

    def prepare(self, partition: Partition) -> Bound:
        """The driver's closure, or the reference program's on the host."""
        if self.driver is not None:
            return self.driver(partition)
        if self.require_device:
            raise BundleError(f"partition {partition.index} for {partition.target}",
                              "an Ethos-U driver (EthosU(driver=...))", "none given",
                              "on a host, load without require_device=True to emulate the "
                              "NPU with the int8 reference kernels")
        from runtime_py.kernels import run_all

        return run_all(*partition.reference())
