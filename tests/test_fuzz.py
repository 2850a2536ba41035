"""The loader under the fuzzer (tests/bundle_fuzz.py): byte-level damage is always refused;
rewritten fields never escape as anything but a NeeError."""

from __future__ import annotations

import pytest
from bundle_fuzz import fuzz


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_byte_level_mutations_are_refused_or_harmless(exported, name):
    counts = fuzz(exported(name).path, 1500, "bytes", seed=1)
    assert set(counts) <= {"refused", "same"}, counts
    assert counts["refused"] > 1400


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_field_rewrites_are_refused_or_run_without_crashing(exported, name):
    """Re-packed with valid checksums, a rewrite may be a different valid program ("changed"),
    but never an exception other than a NeeError, a hang or a read of unwritten memory."""
    counts = fuzz(exported(name).path, 1000, "fields", seed=11)
    assert {k.split(":")[0] for k in counts} <= {"refused", "same", "changed"}, counts
