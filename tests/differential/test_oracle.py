"""The Ioflo side of the differential suite stands on its own.

These tests need nothing from flowcast: they check that every corpus script
builds and runs under Ioflo 2.0.3, that its trace is non-empty and the same
on every run, that the corpus covers every construct it promises, and that
the oracle itself reads Ioflo correctly (hand-computed traces of tiny
scripts).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from tests.differential.corpus import CorpusScript, corpus, parse_header, parse_trace_lines
from tests.differential.ioflo_oracle import OracleError, Transition, ioflo_run, ioflo_trace

SCRIPTS = corpus()
IDS = [s.name for s in SCRIPTS]
RUNNABLE = [s for s in SCRIPTS if not s.ioflo_fails]  # Ioflo builds and runs these
RUNNABLE_IDS = [s.name for s in RUNNABLE]

#: Constructs the corpus must exercise; each must be named in some script's
#: ``# covers:`` line (word-boundary match, case-insensitive).
REQUIRED_CONSTRUCTS = [
    "be active", "be inactive", "be aux", "be slave", "first", "at period",
    "frame nesting", "over", "under", "next",
    "enter", "recur", "exit", "benter", "let", "renter", "rexit", "precur",
    "==", "!=", "<", "<=", ">", ">=", "tolerance", "field in path",
    "not", "and", "boolean", "elapsed", "recurred", "goal", "set elapsed",
    "is done", "done me", "any", "all", "is running", "timeout", "repeat",
    "print", "put", "inc with", "inc from", "copy", "set",
    "bid start", "bid stop", "bid run", "bid ready", "bid abort",
    "ready", "start", "stop", "run",
    "aux", "conditional aux", "init with", "init to", "init from",
    "multi-field", "of me", "framer.me", "go me", "outer transitions",
    "multiple framers", "do",
]


def test_corpus_is_large_enough() -> None:
    assert len(SCRIPTS) >= 15, [s.name for s in SCRIPTS]


def _mentions(text: str, construct: str) -> bool:
    """True if ``construct`` appears in ``text`` as a whole phrase (so ``<`` is not found in ``<=``)."""
    edge = r"[\w<>=!.+-]"
    return re.search(rf"(?<!{edge}){re.escape(construct)}(?!{edge})", text, re.I) is not None


def test_corpus_covers_every_construct() -> None:
    covers = "\n".join(s.covers for s in SCRIPTS)
    missing = [c for c in REQUIRED_CONSTRUCTS if not _mentions(covers, c)]
    assert not missing, f"no corpus script covers: {missing}"


@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_header_is_well_formed(script: CorpusScript) -> None:
    assert script.period > 0 and script.until > 0
    assert script.covers, "say what the script exercises in '# covers:'"
    # ``until`` between two ticks: the trace does not depend on whether the
    # last tick is run when it falls exactly on ``until``.
    ticks = script.until / script.period
    assert not math.isclose(ticks, round(ticks), abs_tol=1e-9), "until must not fall on a tick"
    if script.differs:
        assert script.expected_path.exists(), "a 'differs' script needs its .expected trace"
    # run_trace runs one house while the oracle's skedder runs them all
    houses = [ln for ln in script.path.read_text().splitlines() if ln.split()[:1] == ["house"]]
    assert len(houses) == 1, "corpus scripts declare exactly one house"


@pytest.mark.parametrize("script", RUNNABLE, ids=RUNNABLE_IDS)
def test_runs_cleanly_under_ioflo(script: CorpusScript, oracle) -> None:
    run = oracle(script)
    assert run.trace, "no transition at all: the script exercises nothing"
    console = run.console
    if script.ioflo_reports:  # an act that fails in Ioflo on purpose: the script says which
        assert script.ioflo_reports in console, console
        console = "\n".join(line for line in console.splitlines() if script.ioflo_reports not in line)
    assert "Error" not in console, run.console
    assert "Failure" not in [m for _t, m in run.prints], "an ioflo example plan reported failure"
    # every framer's first appearance is an entry from nothing
    seen: set[str] = set()
    for t in run.trace:
        if t.framer not in seen:
            assert t.source == "-", t
            seen.add(t.framer)
        assert 0 <= t.time <= script.until
    assert [t.time for t in run.trace] == sorted(t.time for t in run.trace)


@pytest.mark.parametrize("script", RUNNABLE, ids=RUNNABLE_IDS)
def test_ioflo_trace_is_deterministic(script: CorpusScript, oracle) -> None:
    again = ioflo_run(script.path, script.period, script.until, script.behaviors)
    assert again.trace == oracle(script).trace
    assert again.prints == oracle(script).prints


def test_documented_differences_are_real(oracle) -> None:
    """A ``differs`` script's expected trace must not be what Ioflo does (else drop the mark).

    Where Ioflo is documented to fail (``ioflo-fails``), it must still fail
    with that error: if a later Ioflo ran it, the script should be compared.
    """
    differing = [s for s in SCRIPTS if s.differs]
    for script in differing:
        expected = parse_trace_lines(script.expected_path.read_text())
        assert expected, f"{script.name}: empty .expected trace"
        if script.ioflo_fails:
            with pytest.raises(OracleError, match=re.escape(script.ioflo_fails)):
                ioflo_run(script.path, script.period, script.until, script.behaviors)
            continue
        actual = [tuple(t) for t in oracle(script).trace]
        assert actual != expected, f"{script.name}: ioflo already produces the expected trace"


# --- the oracle itself, on scripts small enough to trace by hand ---------

def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.flo"
    path.write_text(text)
    return path


def test_oracle_reads_starts_and_transitions(tmp_path: Path) -> None:
    path = _write(tmp_path, """
house h
framer f be active first one
frame one
  go two if elapsed >= 0.25
frame two
  go one if recurred >= 2
""")
    # started at 0 (enter+recur, no segue); elapsed is 0.25 at the tick at 0.25;
    # `two` entered at 0.25 has recurred 1 at 0.375 and 2 at 0.5.
    assert ioflo_trace(path, 0.125, 0.9) == [
        Transition(0.0, "f", "-", "one"),
        Transition(0.25, "f", "one", "two"),
        Transition(0.5, "f", "two", "one"),
        Transition(0.75, "f", "one", "two"),
    ]


def test_oracle_reports_leaves_and_aux_entries(tmp_path: Path) -> None:
    path = _write(tmp_path, """
house h
framer f be active first a
frame a
  go mid
frame top
  frame mid in top
    aux x
    frame low in mid
framer x be aux first x1
frame x1
  go x2
frame x2
""")
    assert ioflo_trace(path, 0.5, 1.2) == [
        Transition(0.0, "f", "-", "a"),
        Transition(0.5, "f", "a", "low"),   # go mid lands on mid's primary under
        Transition(0.5, "x", "-", "x1"),    # aux entered with mid, after f's line
        Transition(1.0, "x", "x1", "x2"),   # auxes segue before their frame
    ]


def test_oracle_stops_at_until_inclusive(tmp_path: Path) -> None:
    path = _write(tmp_path, """
house h
framer f be active first a
frame a
  go b
frame b
  go a
""")
    assert [t.time for t in ioflo_trace(path, 0.25, 1.0)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [t.time for t in ioflo_trace(path, 0.25, 0.99)] == [0.0, 0.25, 0.5, 0.75]


def test_oracle_reports_build_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, "house h\nframer f be active\nframe a\n  go nowhere\n")
    with pytest.raises(OracleError, match="failed to build"):
        ioflo_run(path, 0.125, 1.0)


def test_oracle_restores_ioflo_console(tmp_path: Path) -> None:
    from ioflo.aid.consoling import getConsole

    console = getConsole()
    before = (console.__dict__.get("write"), console._verbosity)
    ioflo_run(_write(tmp_path, "house h\nframer f be active\nframe a\n"), 0.125, 0.3)
    assert (console.__dict__.get("write"), console._verbosity) == before


def test_trace_line_parser_matches_cli_format() -> None:
    text = "0 f - -> one\n0.25 f one -> two  # comment\n\n"
    assert parse_trace_lines(text) == [(0.0, "f", "-", "one"), (0.25, "f", "one", "two")]
    assert str(Transition(0.25, "f", "one", "two")) == "0.25 f one -> two"


def test_header_parser_reads_settings(tmp_path: Path) -> None:
    path = tmp_path / "x.flo"
    path.write_text("# differential: period=0.1 until=2.05\n# covers: go, not\n"
                    "# differs: because\nhouse h\n# covers: ignored after statements\n")
    script = parse_header(path)
    assert (script.period, script.until, script.covers, script.differs) == (0.1, 2.05, "go, not", "because")


def test_oracle_wraps_ioflo_exceptions(tmp_path: Path) -> None:
    # `done NAME` makes ioflo 2.0.3 raise NameError while resolving (a bug of
    # its own): the oracle reports it as a build failure, not a crash.
    path = _write(tmp_path, "house h\nframer f be active first a\nframe a\n  done x\n"
                            "framer x be aux first x1\nframe x1\n")
    with pytest.raises(OracleError, match="NameError"):
        ioflo_run(path, 0.125, 1.0)


def test_corpus_readme_lists_every_script() -> None:
    readme = (Path(__file__).resolve().parents[1] / "flow" / "corpus" / "README.md").read_text()
    missing = [s.path.name for s in SCRIPTS if f"`{s.path.name}`" not in readme]
    assert not missing, f"add to tests/flow/corpus/README.md: {missing}"
