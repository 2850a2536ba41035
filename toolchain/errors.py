"""Errors raised by the toolchain (same message shape as the runtime's: what, expected, found,
hint)."""

from __future__ import annotations

from runtime_py.errors import NeeError


class ExportError(NeeError):
    """A model or option the toolchain cannot turn into a bundle."""


class UnsupportedModelError(ExportError):
    """The model uses what NEE cannot export: an op, a dtype, dynamic shapes or control flow,
    in-place state (``nee-export`` exits 3)."""


class OverBudgetError(ExportError):
    """The program does not fit the board (memory tiers, flash, NPU SRAM) or a CI gate
    (``nee-export`` exits 4)."""
