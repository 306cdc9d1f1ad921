"""The ``drain:`` setting: per estate, per house entry, the default, and its bounds."""

from __future__ import annotations

from pathlib import Path

from flowcast.house.estate import STAGE_CACHE, STAGE_MANOR, STAGE_WORKER, stop_stage
from flowcast.house.layout import load_layout, plan_houses
from flowcast.house.layoutspec import DEFAULT_DRAIN
from tests.house.test_layout import MINIMAL, one_error, tree, write  # noqa: F401 - tree is a fixture

TWO = """\
estate: alpha
{top}houses:
  - {{name: manor, flow: ../flows/ping.flo, manor: true}}
  - {{name: worker, flow: ../flows/worker.flo{entry}}}
"""


def test_no_drain_given_is_the_default(tree: Path) -> None:
    layout = load_layout(write(tree, MINIMAL))
    assert layout.drain is None
    assert layout.drain_of(layout.houses[0]) == DEFAULT_DRAIN


def test_an_entry_drain_wins_over_the_estate_drain(tree: Path) -> None:
    layout = load_layout(write(tree, TWO.format(top="drain: 7\n", entry=", drain: 0.5")))
    manor, worker = layout.houses
    assert layout.drain_of(manor) == 7.0
    assert layout.drain_of(worker) == 0.5


def test_drain_zero_is_allowed_and_means_report_at_once(tree: Path) -> None:
    layout = load_layout(write(tree, TWO.format(top="drain: 0\n", entry="")))
    assert layout.drain_of(layout.houses[1]) == 0.0


def test_a_drain_out_of_range_or_not_a_number_is_located(tree: Path) -> None:
    error = one_error(tree, TWO.format(top="drain: 601\n", entry=""))
    assert "drain" in error.message and "0..600" in error.message and error.where.line == 2
    error = one_error(tree, TWO.format(top="", entry=", drain: soon"))
    assert "drain of" in error.message and "number of seconds" in error.message and error.where.line == 4


def test_workers_stop_before_the_cache_house_and_the_cache_house_before_the_manor(tree: Path) -> None:
    text = TWO.format(top="", entry="") + "  - {name: cache, flow: ../flows/other.flo}\ncast: {house: cache}\n"
    layout = load_layout(write(tree, text))
    stages = {p.yard: stop_stage(layout, p) for p in plan_houses(layout, 3)}
    assert stages == {"manor": STAGE_MANOR, "worker": STAGE_WORKER, "cache": STAGE_CACHE}
    assert STAGE_WORKER < STAGE_CACHE < STAGE_MANOR
