"""Runtime errors: each names the thing at fault, what was expected, what was found, and a hint."""

from __future__ import annotations


class NeeError(Exception):
    """Base class: ``what``: expected ``expected``, found ``found``. Hint: ``hint``."""

    def __init__(self, what: str, expected: str, found: str, hint: str = "") -> None:
        message = f"{what}: expected {expected}, found {found}"
        super().__init__(f"{message}. Hint: {hint}" if hint else message)


class BundleError(NeeError):
    """The file is not a valid NEE bundle for this runtime."""


class MissingKernelsError(BundleError):
    """The bundle needs kernels this runtime does not have (all of them are listed)."""


class MissingBackendError(BundleError):
    """The bundle has partitions for backends this runtime lacks, without a CPU fallback."""


class ProgramBusyError(NeeError):
    """``Program.run`` was called while another run of the same program was in progress."""


class ProgramClosedError(NeeError):
    """``Program.run`` was called after ``Program.close``."""


class InputError(NeeError, ValueError):
    """Inputs passed to ``Program.run`` do not match the bundle's inputs."""
