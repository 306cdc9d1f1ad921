"""Where export files live, and what their names may contain.

An export directory holds finished segments by day and house::

    ROOT/2026-11-22/crossing/alpha.crossing.20261122T001500123456Z.3f9a1c.parquet

plus one hidden journal folder per writing house (``ROOT/.journal/ESTATE.HOUSE``)
for the open segment.  Readers (pyarrow, Spark) skip names starting with a
dot, which is also why a segment is written as ``.NAME.inprogress`` and only
renamed to ``NAME`` when complete: no reader ever sees a torn file.

Estate and house names become path parts, so they are held to a strict
alphabet here; nothing from the wire reaches a path any other way.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from flowcast.errors import Error
from flowcast.runtime.durable import replace_durably

__all__ = [
    "ExportNameError",
    "check_part",
    "journal_dir",
    "partition_dir",
    "segment_files",
    "publish",
    "inprogress",
]

_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
SUFFIX = ".parquet"


class ExportNameError(ValueError, Error):
    """An estate or house name that cannot safely become a path part."""


def check_part(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _PART.fullmatch(name):
        raise ExportNameError(f"{kind} name {name!r} cannot name export files: want letters, digits, '_' or '-' (max 64)")
    return name


def journal_dir(root: Path, estate: str, house: str) -> Path:
    return root / ".journal" / f"{estate}.{house}"


def partition_dir(root: Path, day: date, house: str) -> Path:
    return root / day.isoformat() / house


def inprogress(final: Path) -> Path:
    """The hidden name a file is written under before it is complete."""
    return final.with_name(f".{final.name}.inprogress")


def publish(tmp: Path, final: Path) -> None:
    """Make a completely written file visible under its final name, durably."""
    replace_durably(tmp, final)


def segment_files(root: Path, since: date | None = None, until: date | None = None) -> list[tuple[date, str, Path]]:
    """Finished segments under ``root`` as (day, house, path), oldest day first.

    Only ``DAY/HOUSE/*.parquet`` counts; hidden files (in-progress writes,
    journals) and anything else are not segments.
    """
    found: list[tuple[date, str, Path]] = []
    if not root.is_dir():
        return found
    for day_dir in sorted(root.iterdir()):
        if not day_dir.is_dir() or not _DAY.fullmatch(day_dir.name):
            continue
        try:
            day = date.fromisoformat(day_dir.name)
        except ValueError:  # shaped like a day, not a real one (2026-13-45): not ours
            continue
        if (since is not None and day < since) or (until is not None and day > until):
            continue
        for house_dir in sorted(day_dir.iterdir()):
            if not house_dir.is_dir() or house_dir.name.startswith("."):
                continue
            for path in sorted(house_dir.iterdir()):
                if path.name.endswith(SUFFIX) and not path.name.startswith((".", "_")) and path.is_file():
                    found.append((day, house_dir.name, path))
    return found
