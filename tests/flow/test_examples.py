"""The example flows in flows/ run, and those Ioflo can also run give its trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcast.flow.loader import load_flow
from flowcast.house.trace import run_trace
from tests.differential.ioflo_oracle import ioflo_trace

FLOWS = Path(__file__).resolve().parents[2] / "flows"


def rows(trace):
    return [(round(float(t.time), 6), t.framer, t.source, t.target) for t in trace]


@pytest.mark.parametrize("name", ["traffic.flo", "plant.flo"])
def test_example_matches_ioflo(name, tmp_path):
    path = FLOWS / name
    ours = rows(run_trace(path, period=0.125, until=12.05))
    assert len(ours) > 5
    # 'log' (share histories for export) is flowcast's own; Ioflo gets the script without it.
    plain = tmp_path / name
    plain.write_text("".join(line for line in path.read_text().splitlines(True) if not line.startswith("log ")))
    assert ours == rows(ioflo_trace(plain, 0.125, 12.05))


def test_traffic_light_cycles_and_button_shortens_green():
    trace = rows(run_trace(FLOWS / "traffic.flo", until=12.05))
    light = [(t, src, dst) for t, framer, src, dst in trace if framer == "light"]
    assert light[:4] == [(0.0, "-", "red"), (3.0, "red", "green"), (4.625, "green", "yellow"), (5.625, "yellow", "red")]


def test_yaml_twin_means_the_same():
    assert load_flow(FLOWS / "traffic.yaml").houses == load_flow(FLOWS / "traffic.flo").houses
    assert rows(run_trace(FLOWS / "traffic.yaml", until=12.05)) == rows(run_trace(FLOWS / "traffic.flo", until=12.05))


def test_hello_counts_to_five_then_finishes():
    printed: list[str] = []
    trace = rows(run_trace(FLOWS / "hello.flo", until=5, out=printed.append))
    assert [row[3] for row in trace] == ["counting", "greet", "finish"]
    assert printed == ["goodbye"]  # the greeter prints to stdout itself; print acts go to out
