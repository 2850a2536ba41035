"""Board recipes (boards/*.toml): memory tiers, NPU configuration and supported dtypes.

The shipped recipes install as the package ``toolchain.recipes`` and are found by name; a
user's own recipe is given by path.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from toolchain.errors import ExportError
from toolchain.memory_plan.types import Tier

RECIPES = resources.files("toolchain.recipes")


@dataclass(frozen=True)
class Board:
    """A board recipe: tiers fastest first."""

    name: str
    description: str
    tiers: tuple[Tier, ...]
    npu: dict
    dtypes: tuple[str, ...]
    scratch_limit: int | None = None  # max workspace bytes a kernel call may ask for


def available_boards() -> list[str]:
    """Names of the shipped recipes."""
    return sorted(p.name.removesuffix(".toml") for p in RECIPES.iterdir()
                  if p.name.endswith(".toml"))


def load_board(name_or_path: str) -> Board:
    """A shipped recipe by name, or a recipe .toml by path."""
    path = Path(name_or_path)
    if path.suffix:
        if not path.is_file():
            raise ExportError(f"board recipe {name_or_path!r}", "an existing .toml file",
                              "no such file", f"or name a shipped board: {available_boards()}")
        source = path
    else:
        source = RECIPES / f"{name_or_path}.toml"
        if not source.is_file():
            raise _unknown_board(name_or_path)
    try:
        with source.open("rb") as f:
            raw = tomllib.load(f)
        tiers = tuple(Tier(m["name"], int(m["size"])) for m in raw["memory"])
        limit = raw.get("scratch_limit")
        return Board(raw.get("name", path.stem), raw.get("description", ""), tiers,
                     raw.get("npu", {}), tuple(raw.get("dtypes", ["float32"])),
                     None if limit is None else int(limit))
    except (KeyError, TypeError, ValueError) as e:  # TOMLDecodeError is a ValueError
        raise ExportError(f"board recipe {source}", "TOML with [[memory]] entries (name, size)",
                          f"{type(e).__name__}: {e}", "see boards/*.toml for examples") from e


def _unknown_board(name: str) -> ExportError:
    known = available_boards()
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ExportError(f"board {name!r}", f"one of {known} or a path to a recipe .toml",
                       "no such recipe", f"{hint}a recipe of your own is given by its path")
