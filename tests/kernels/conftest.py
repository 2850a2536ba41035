"""Fixtures for the kernel tests: deterministic inputs, per-session example exports."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
import torch
from model_ops import example_kernel_names

from runtime_py.kernels import numpy_mode


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_registry's check that every kernel's rule was exercised runs after all others."""
    last = [item for item in items if item.name == "test_every_rule_is_exercised"]
    items[:] = [item for item in items if item not in last] + last


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _numpy_mode() -> Iterator[None]:
    """Kernels are called in the numpy mode the runtime runs them in."""
    with numpy_mode():
        yield


@pytest.fixture(scope="session")
def exported_kernel_names() -> Callable[[str], frozenset[str]]:
    """``name -> out-variant kernel names`` of an example model, each exported once per session."""
    return functools.cache(example_kernel_names)
