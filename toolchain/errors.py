"""Errors raised by the toolchain (same message shape as the runtime's: what, expected, found,
hint)."""

from __future__ import annotations

from runtime_py.errors import NeeError


class ExportError(NeeError):
    """A model or option the toolchain cannot turn into a bundle."""
