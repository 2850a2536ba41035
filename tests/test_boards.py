"""Board recipes: every shipped recipe loads; tiers steer the plan; small boards fail clearly;
``nee-boards`` lists and shows them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from runtime_py import __version__
from runtime_py.program import Program
from toolchain.boards import Board, available_boards, load_board
from toolchain.cli import boards_main, export_main
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.memory_plan.types import Tier
from toolchain.serialize.bundle import write_bundle

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize("name", available_boards())
def test_every_shipped_recipe_loads(name):
    board = load_board(name)
    assert board.tiers and all(t.capacity > 0 for t in board.tiers)


def test_the_shipped_recipes_cover_the_common_targets():
    assert {"host", "rpi4", "rpi5", "esp32-s3", "cortex-m55-ethos-u55", "corstone-300-ethos-u55",
            "imx93-ethos-u65", "corstone-320-ethos-u85"} <= set(available_boards())


def test_unknown_board_lists_the_known_ones_and_the_closest():
    with pytest.raises(ExportError, match=r"one of \[.*'host'.*\].*did you mean 'rpi4'"):
        load_board("rpi-4")
    with pytest.raises(ExportError, match="no such file"):
        load_board("missing/recipe.toml")


def test_recipes_are_found_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_board("cortex-m55-ethos-u55").tiers[0].name == "sram"
    assert load_board(str(_recipe(tmp_path, 4096, 8192))).name == "tiny"


def test_malformed_recipe_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[[memory]\nname = 'sram'\n")
    with pytest.raises(ExportError, match=r"broken\.toml: expected TOML with \[\[memory\]\]"):
        load_board(str(path))


def _board(*capacities: int) -> Board:
    tiers = tuple(Tier(f"t{i}", c) for i, c in enumerate(capacities))
    return Board("tiny", "", tiers, None, ("float32",))


def test_small_fast_tier_spills_and_still_runs(exported, tmp_path):
    ex = exported("cnn")
    needed = ex.result.plan.arenas[0].size
    result = export(ex.model, ex.torch_inputs, board=_board(needed // 3, needed * 4))
    arenas = {a.tier: a for a in result.plan.arenas}
    assert 0 < arenas["t0"].size <= needed // 3 and arenas["t1"].size > 0
    write_bundle(result, tmp_path / "m.nee")
    (out,) = Program.load(tmp_path / "m.nee").run(*ex.inputs)
    np.testing.assert_allclose(out, ex.expected[0], rtol=1e-5, atol=1e-6)


def test_board_too_small_names_needed_available_and_peak_op(tmp_path):
    done = CliRunner().invoke(export_main, [f"{EXAMPLES}/cnn.py:Model", "-o",
                                            str(tmp_path / "m.nee"), "--board",
                                            str(_recipe(tmp_path, 4096, 8192))])
    assert done.exit_code == 4  # over budget
    assert "sram" in done.output and "dram" in done.output
    assert re.search(r"peaks at step \d+ \((aten|nee)::\S+ at \S+cnn\.py:\d+", done.output)


def _recipe(tmp_path, sram: int, dram: int):
    path = tmp_path / "tiny.toml"
    path.write_text(f'name = "tiny"\n[[memory]]\nname = "sram"\nsize = {sram}\n'
                    f'[[memory]]\nname = "dram"\nsize = {dram}\n')
    return path


def test_scratch_limit_shrinks_the_arena_and_keeps_results(exported, tmp_path):
    ex = exported("cnn")
    unlimited = ex.result.plan.arenas[0].size
    board = Board("lean", "", (Tier("sram", 1 << 30),), None, ("float32",), scratch_limit=32768)
    result = export(ex.model, ex.torch_inputs, board=board)
    def biggest_scratch(graph) -> int:
        return max(t.nbytes for t in graph.tensors.values() if t.kind == "scratch")

    assert biggest_scratch(result.graph) < biggest_scratch(ex.result.graph) / 4
    assert result.plan.arenas[0].size < unlimited / 2
    write_bundle(result, tmp_path / "lean.nee")
    (out,) = Program.load(tmp_path / "lean.nee").run(*ex.inputs)
    np.testing.assert_allclose(out, ex.expected[0], rtol=1e-5, atol=1e-6)


def _linear_32mib() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """32 MiB of float weights."""
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU()).eval()
    return model, (torch.randn(1, 2048),)


def test_weights_beyond_the_boards_dram_are_an_export_error(tmp_path):
    """On a board with 512 KiB SRAM and 8 MiB DRAM and no flash, the weights share the DRAM
    with the activations and do not fit."""
    with pytest.raises(ExportError) as e:
        export(*_linear_32mib(), board=load_board(str(_recipe(tmp_path, 1 << 19, 1 << 23))))
    text = str(e.value)
    assert "weights on board tiny" in text and "dram tier (8388608 B)" in text
    assert "33570816 B (32.0 MiB) of weights" in text and "--quantize int8" in text


def test_weights_beyond_a_shipped_boards_flash_are_an_export_error():
    with pytest.raises(ExportError) as e:
        export(*_linear_32mib(), board=load_board("cortex-m55-ethos-u55"))
    text = str(e.value)
    assert "weights on board cortex-m55-ethos-u55" in text
    assert "at most the 4194304 B flash, found 33570816 B (32.0 MiB) of weights" in text


@pytest.mark.parametrize(("flash", "fits"), [(1024, False), (1 << 20, True)])
def test_weights_are_held_against_the_boards_flash(exported, tmp_path, flash, fits):
    ex = exported("cnn")
    path = _recipe(tmp_path, 1 << 20, 1 << 20)
    path.write_text(path.read_text() + f"[flash]\nsize = {flash}\n")
    board = load_board(str(path))
    assert board.flash == flash
    if fits:
        export(ex.model, ex.torch_inputs, board=board)
        return
    with pytest.raises(ExportError, match=r"at most the 1024 B flash, found \d+ B"):
        export(ex.model, ex.torch_inputs, board=board)


def test_nee_boards_lists_every_shipped_recipe_one_line_each():
    done = CliRunner().invoke(boards_main, [])
    assert done.exit_code == 0, done.output
    header, *rows = done.output.splitlines()
    assert header.split()[:2] == ["board", "cpu"] and "flash" in header and "dtypes" in header
    assert [row.split()[0] for row in rows] == available_boards()
    lines = {row.split()[0]: row for row in rows}
    assert re.search(r"cortex-a76 4x2\.4 GHz +dram 512 MiB +- +- +float32, int8$", lines["rpi5"])
    assert re.search(r"xtensa-lx7 2x240 MHz +sram 256 KiB, psram 8 MiB +6 MiB +- +float32, int8$",
                     lines["esp32-s3"])
    assert re.search(r"cortex-m55 1x32 MHz +sram 2 MiB, dram 256 MiB +- +ethos-u55-128 ",
                     lines["corstone-300-ethos-u55"])


def test_nee_boards_shows_one_recipe_in_full():
    done = CliRunner().invoke(boards_main, ["cortex-m55-ethos-u55"])
    assert done.exit_code == 0, done.output
    text = done.output
    assert text.startswith("board cortex-m55-ethos-u55\n")
    for line in ("cortex-m55-ethos-u55.toml", "cpu            cortex-m55, 1 core at 500 MHz",
                 "threads        1", "sram  512 KiB (524288 B)", "dram  8 MiB (8388608 B)",
                 "flash          4 MiB (4194304 B)", "scratch_limit  64 KiB (65536 B)",
                 "npu            ethos-u55-128", "system_config Ethos_U55_High_End_Embedded",
                 "memory_mode Shared_Sram", "clock 500 MHz", "dtypes         int8, float32"):
        assert line in text, (line, text)
    host = CliRunner().invoke(boards_main, ["host"]).output
    assert "flash          - (the weights share the dram tier" in host
    assert "npu            -" in host


def test_nee_boards_shows_a_recipe_by_path_without_cpu(tmp_path):
    done = CliRunner().invoke(boards_main, [str(_recipe(tmp_path, 4096, 8192))])
    assert done.exit_code == 0, done.output
    assert "cpu            - (not given)" in done.output
    assert "threads        - (not given)" in done.output
    assert "sram  4 KiB (4096 B)" in done.output and "dram  8 KiB (8192 B)" in done.output


def test_nee_boards_gives_every_problem_of_a_bad_recipe_and_exits_1(tmp_path):
    path = _recipe(tmp_path, 0, 8192)
    path.write_text(path.read_text() + '[cpu]\narchitecture = "cortex_m55"\ncores = 0\n'
                    'clock_mhz = 100\nclok = 1\n')
    done = CliRunner().invoke(boards_main, [str(path)])
    assert done.exit_code == 1 and "Traceback" not in done.output
    lines = done.output.splitlines()
    assert lines[0] == f"Error: board recipe {path}: expected a valid recipe, found 4 problems:"
    assert lines[1:] == [
        "  key cpu.clok: expected one of the keys ['architecture', 'cores', 'clock_mhz'], "
        "found an unknown key; did you mean 'clock_mhz'?",
        "  key cpu.architecture: expected one of ['cortex-m4', 'cortex-m7', 'cortex-m33', "
        "'cortex-m55', 'cortex-m85', 'cortex-a53', 'cortex-a55', 'cortex-a72', 'cortex-a76', "
        "'xtensa-lx7', 'x86-64'], found 'cortex_m55'; did you mean 'cortex-m55'?",
        "  key cpu.cores: expected a positive integer, found 0",
        "  key memory[0].size: expected a positive integer (bytes), found 0",
    ]


@pytest.mark.parametrize(("arg", "found"), [("rpi-5", "did you mean 'rpi5'"),
                                            ("missing/recipe.toml", "no such file")])
def test_nee_boards_unknown_names_exit_1(arg, found):
    done = CliRunner().invoke(boards_main, [arg])
    assert done.exit_code == 1 and found in done.output and "Traceback" not in done.output


def test_nee_boards_is_an_installed_command_with_the_version():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["nee-boards"] == "toolchain.cli:boards_main"
    done = CliRunner().invoke(boards_main, ["--version"])
    assert done.exit_code == 0 and done.output.startswith(f"nee {__version__}, bundle schema")
