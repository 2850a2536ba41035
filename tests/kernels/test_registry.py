"""Registry-level checks: kernel signatures follow the schemas, the model zoo is covered, every
kernel states its shape and dtype rule and the harness checked each one."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from kernel_harness import EXERCISED
from model_ops import EXAMPLE_NAMES

from runtime_py.kernels import KERNELS, Kernel
from runtime_py.kernels._common import ALL, INT8
from toolchain.export.out_variant import out_arg_names
from toolchain.ir import Graph, Node, Tensor
from toolchain.passes.to_out_variant import NEE_OUT_VARIANTS, overload, to_out_variant


def _normalized(value: object) -> object:
    return tuple(value) if isinstance(value, list | tuple) else value


@pytest.mark.parametrize("name", sorted(k for k in KERNELS if k.startswith("aten::")))
def test_signature_matches_schema(name: str) -> None:
    """Every schema arg is a kernel param; schema defaults are kernel defaults; outs required.

    (A kernel may default a required arg, so that one function serves several overloads.)
    """
    schema = overload(name)._schema
    outs = set(out_arg_names(schema))
    assert outs, f"{name} is not an out variant"
    _check_signature(name, schema.arguments, outs)


@pytest.mark.parametrize(("functional", "name"), sorted(NEE_OUT_VARIANTS.items()))
def test_nee_out_variants_take_the_functional_ops_arguments(functional: str, name: str) -> None:
    """A ``nee::`` out op standing in for an ATen op without an out overload takes its args."""
    _check_signature(name, overload(functional)._schema.arguments, {"out"})


def _check_signature(name: str, arguments: list, outs: set[str]) -> None:
    kernel = KERNELS[name]
    assert isinstance(kernel, Kernel) and kernel.dtypes and kernel.dtypes <= ALL | INT8
    params = inspect.signature(kernel.fn).parameters
    for arg in arguments:
        assert arg.name in params, f"{name}: missing param {arg.name}"
        default = params[arg.name].default
        if arg.name in outs:
            assert default is inspect.Parameter.empty, f"{name}: out {arg.name} has a default"
        elif arg.has_default_value():
            assert _normalized(default) == _normalized(arg.default_value), f"{name}: {arg.name}"
    for out in outs:
        assert params[out].kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: {out}"
    schema_names = {a.name for a in arguments} | outs
    for extra in params.keys() - schema_names:
        assert params[extra].default is not inspect.Parameter.empty, f"{name}: {extra}"


def test_factory_kernels_get_no_tensor_options() -> None:
    """to_out_variant drops the dtype/layout/device/pin_memory args the out array implies."""
    args = {"size": [3], "fill_value": 2.0, "dtype": "float32", "layout": None, "device": None,
            "pin_memory": False}
    graph = Graph(tensors={"y": Tensor("y", (3,), "float32", "activation")},
                  nodes=[Node("aten::full.default", args, ["y"])], inputs=[], outputs=["y"])
    node = to_out_variant(graph).nodes[0]
    assert node.args.keys() == {"size", "fill_value", "out"}
    out = np.zeros(3, dtype="float32")
    KERNELS[node.op].fn(**{k: v for k, v in node.args.items() if k != "out"}, out=out)
    assert out.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("model", EXAMPLE_NAMES)
def test_example_ops_have_kernels(model: str,
                                  exported_kernel_names: Callable[[str], frozenset[str]]) -> None:
    missing = exported_kernel_names(model) - KERNELS.keys()
    assert not missing, f"{model} needs kernels for {sorted(missing)}"


def test_every_kernel_states_its_rule() -> None:
    """``Kernel.check``: the shape and dtype rule ``Kernel.bind`` checks at load."""
    assert not sorted(name for name, kernel in KERNELS.items() if kernel.check is None)


KERNEL_TESTS = {p.name for p in Path(__file__).parent.glob("test_*.py")}


def test_every_rule_is_exercised(request: pytest.FixtureRequest) -> None:
    """Every kernel went through ``kernel_harness.check_rules`` in this session (its rule
    refusing wrong outs and, for calls of several tensors, judging relabelled inputs as torch
    does). Runs last (conftest), and only when every kernel test was selected."""
    option = request.config.option
    ran = {Path(str(item.fspath)).name for item in request.session.items}
    if (option.keyword or option.markexpr or getattr(option, "deselect", None)
            or getattr(option, "lf", False) or not ran >= KERNEL_TESTS):
        pytest.skip("only when every kernel test runs")
    assert not sorted(KERNELS.keys() - EXERCISED)
