"""Registry-level checks: kernel signatures follow the schemas, the model zoo is covered."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import pytest
import torch
from model_ops import EXAMPLE_NAMES

from runtime_py.kernels import KERNELS, Kernel
from toolchain.export.out_variant import out_arg_names

_DTYPES = frozenset({"float32", "int64", "bool"})
# Implied by the out array; factory/conversion kernels may accept and ignore them.
_TENSOR_OPTIONS = frozenset({"dtype", "layout", "device", "pin_memory"})


def _schema(name: str) -> torch._C.FunctionSchema:
    qualified, overload = name.split(".", 1)
    namespace, op = qualified.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)._schema


def _normalized(value: object) -> object:
    return tuple(value) if isinstance(value, list | tuple) else value


@pytest.mark.parametrize("name", sorted(k for k in KERNELS if k.startswith("aten::")))
def test_signature_matches_schema(name: str) -> None:
    """Every schema arg is a kernel param; schema defaults are kernel defaults; outs required.

    (A kernel may default a required arg, so that one function serves several overloads.)
    """
    kernel = KERNELS[name]
    assert isinstance(kernel, Kernel) and kernel.dtypes and kernel.dtypes <= _DTYPES
    params = inspect.signature(kernel.fn).parameters
    schema = _schema(name)
    outs = set(out_arg_names(schema))
    assert outs, f"{name} is not an out variant"
    for arg in schema.arguments:
        assert arg.name in params, f"{name}: missing param {arg.name}"
        default = params[arg.name].default
        if arg.name in outs:
            assert default is inspect.Parameter.empty, f"{name}: out {arg.name} has a default"
        elif arg.has_default_value():
            assert _normalized(default) == _normalized(arg.default_value), f"{name}: {arg.name}"
    schema_names = {a.name for a in schema.arguments}
    for extra in params.keys() - schema_names:
        assert params[extra].default is not inspect.Parameter.empty, f"{name}: {extra}"


def test_factory_kernels_ignore_tensor_options() -> None:
    out = np.zeros(3, dtype="float32")
    KERNELS["aten::full.out"].fn(size=(3,), fill_value=2.0, dtype="float32", layout=None,
                                 device=None, pin_memory=False, out=out)
    assert out.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("model", EXAMPLE_NAMES)
def test_example_ops_have_kernels(model: str,
                                  exported_kernel_names: Callable[[str], frozenset[str]]) -> None:
    missing = exported_kernel_names(model) - KERNELS.keys()
    assert not missing, f"{model} needs kernels for {sorted(missing)}"
