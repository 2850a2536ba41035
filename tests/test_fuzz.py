"""The loader under the fuzzer (tests/bundle_fuzz.py): byte-level damage is always refused."""

from __future__ import annotations

import pytest
from bundle_fuzz import fuzz


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_byte_level_mutations_are_refused_or_harmless(exported, name):
    counts = fuzz(exported(name).path, 1500, "bytes", seed=1)
    assert set(counts) <= {"refused", "same"}, counts
    assert counts["refused"] > 1400
