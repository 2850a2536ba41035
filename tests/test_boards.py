"""Board recipes: every shipped recipe loads; tiers steer the plan; small boards fail clearly."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from runtime_py.program import Program
from toolchain.boards import Board, available_boards, load_board
from toolchain.cli import export_main
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.memory_plan.types import Tier
from toolchain.serialize.bundle import write_bundle

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", available_boards())
def test_every_shipped_recipe_loads(name):
    board = load_board(name)
    assert board.tiers and all(t.capacity > 0 for t in board.tiers)


def test_unknown_board_lists_the_known_ones_and_the_closest():
    with pytest.raises(ExportError, match=r"one of \[.*'host'.*\].*did you mean 'rpi4'"):
        load_board("rpi5")
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
    assert done.exit_code == 1
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


def test_weights_beyond_the_boards_dram_are_an_export_error():
    """32 MiB of float weights on a board with 512 KiB SRAM and 8 MiB DRAM (no flash): the
    weights share the DRAM with the activations and do not fit."""
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU()).eval()
    with pytest.raises(ExportError) as e:
        export(model, (torch.randn(1, 2048),), board=load_board("cortex-m55-ethos-u55"))
    text = str(e.value)
    assert "weights on board cortex-m55-ethos-u55" in text and "dram tier (8388608 B)" in text
    assert "33570816 B (32.0 MiB) of weights" in text and "--quantize int8" in text


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
