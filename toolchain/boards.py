"""Board recipes (boards/*.toml): memory tiers, NPU configuration and supported dtypes."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import ExportError
from toolchain.memory_plan.types import Tier

BOARDS_DIR = Path(__file__).resolve().parents[1] / "boards"


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
    """Names of the recipes shipped in boards/."""
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml"))


def load_board(name_or_path: str) -> Board:
    """A recipe by name (boards/NAME.toml) or by path to a .toml file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = BOARDS_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise ExportError(f"board {name_or_path!r}", f"one of {available_boards()} or a .toml path",
                          "no such recipe", "see boards/ for the recipe format")
    with path.open("rb") as f:
        raw = tomllib.load(f)
    try:
        tiers = tuple(Tier(m["name"], int(m["size"])) for m in raw["memory"])
        limit = raw.get("scratch_limit")
        return Board(raw.get("name", path.stem), raw.get("description", ""), tiers,
                     raw.get("npu", {}), tuple(raw.get("dtypes", ["float32"])),
                     None if limit is None else int(limit))
    except (KeyError, TypeError, ValueError) as e:
        raise ExportError(f"board recipe {path}", "[[memory]] entries with name and size",
                          f"{type(e).__name__}: {e}", "see boards/*.toml for examples") from e
