"""The differential corpus: ``tests/flow/corpus/*.flo`` and the run settings in their headers.

Each script says in its leading comment block how it is to be run, so the
script file alone is the whole test case::

    # differential: period=0.125 until=5
    # covers: timeout, next, print
    # differs: <why flowcast deliberately does something else>   (optional)
    # ioflo-fails: <text of the error Ioflo stops with>           (optional, with differs)
    # ioflo-reports: <text of an error Ioflo prints and carries on> (optional)
    # behaviors: <module> [<module> ...]                          (optional)

Only the comment lines before the first statement are read.  A ``differs``
script has a sibling ``NAME.expected`` file holding the trace flowcast must
produce instead (one ``T FRAMER FROM -> TO`` line per transition), so the
difference is asserted, not just tolerated.  When the difference is that
Ioflo cannot run the script at all (a bug of its own), ``ioflo-fails`` says
which error it stops with, and the tests check that it still does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parents[1] / "flow" / "corpus"

_SETTINGS = re.compile(r"^#\s*differential:\s*(?P<body>.*)$")
_KEYED = re.compile(r"^#\s*(?P<key>covers|differs|ioflo-fails|ioflo-reports|behaviors):\s*(?P<value>.*)$")


@dataclass(frozen=True)
class CorpusScript:
    """One corpus script and how to run it on both sides."""

    path: Path
    period: float
    until: float
    covers: str = ""
    differs: str = ""  # empty: traces must be equal
    ioflo_fails: str = ""  # error text Ioflo is known to stop with (only with ``differs``)
    ioflo_reports: str = ""  # error text Ioflo prints on its console and runs on (a failing act)
    behaviors: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def expected_path(self) -> Path:
        return self.path.with_suffix(".expected")


def parse_header(path: Path) -> CorpusScript:
    """Read the settings from the leading comment block of ``path``."""
    settings: dict[str, str] = {}
    keyed: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break
        m = _SETTINGS.match(line)
        if m:
            for item in m.group("body").split():
                key, _, value = item.partition("=")
                settings[key] = value
            continue
        m = _KEYED.match(line)
        if m:
            keyed[m.group("key")] = (keyed.get(m.group("key"), "") + " " + m.group("value")).strip()
    if "period" not in settings or "until" not in settings:
        raise ValueError(f"{path}: header lacks '# differential: period=P until=U'")
    if keyed.get("ioflo-fails") and not keyed.get("differs"):
        raise ValueError(f"{path}: 'ioflo-fails' needs a 'differs' line saying why flowcast differs")
    return CorpusScript(
        path=path,
        period=float(settings["period"]),
        until=float(settings["until"]),
        covers=keyed.get("covers", ""),
        differs=keyed.get("differs", ""),
        ioflo_fails=keyed.get("ioflo-fails", ""),
        ioflo_reports=keyed.get("ioflo-reports", ""),
        behaviors=tuple(keyed.get("behaviors", "").split()),
    )


def corpus() -> list[CorpusScript]:
    """All corpus scripts, sorted by name (stable test ids)."""
    return [parse_header(p) for p in sorted(CORPUS_DIR.glob("*.flo"))]


def parse_trace_lines(text: str) -> list[tuple[float, str, str, str]]:
    """Parse ``T FRAMER FROM -> TO`` lines (the ``flowcast run --trace`` format)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        t, framer, source, arrow, target = line.split()
        if arrow != "->":
            raise ValueError(f"bad trace line: {line!r}")
        out.append((round(float(t), 6), framer, source, target))
    return out
