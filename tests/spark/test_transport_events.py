"""End to end: two road stacks record through real Recorders, Spark finds the known latency.

Virtual time and a fixed link delay make the answer exact: every message
is sent on its own, so its delivery comes exactly one link delay later,
and the latency job (deriving latency from the sent and delivered times
joined by message id) must find that delay at p50 for each route.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import fcspark
import metrics
from flowcast.export.collect import collect
from flowcast.export.demo import EPOCH
from flowcast.export.recorder import Recorder
from tests.transport.roadkit import World

DELAY = 0.004
COUNT = 40
STREAMS = 2
TICK = 1e-6  # event times are whole microseconds


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("transport-events")
    world = World(seed=11, delay=DELAY)
    now = world.scheduler.clock.now
    recorders = [Recorder(root / "live", estate=name, house="road", clock=now, epoch=EPOCH, batch=16) for name in ("alpha", "beta")]
    alpha = world.estate("alpha", events=recorders[0])
    beta = world.estate("beta", events=recorders[1])
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 10)
    outs = []
    for i in range(COUNT):  # one at a time, well spaced: nothing waits behind anything
        outs.append(alpha.send({"n": i}, "beta", stream=i % STREAMS))
        world.run_for(0.05)
    assert all(o.delivered for o in outs)
    assert len(beta.receive_many()) == COUNT
    for recorder in recorders:
        recorder.close()
    report = collect([root / "live"], root / "collected")
    assert report.skipped == []
    return root / "collected"


def _route(stream: int) -> str:
    return f"//alpha/{stream} -> //beta/{stream}"


def test_latency_job_finds_the_link_delay_per_route(spark, exported: Path) -> None:
    events, _ = fcspark.load_events(spark, exported)
    rows = {r["route"]: r for r in metrics.latency(events)["latency"].collect()}
    assert set(rows) == {_route(stream) for stream in range(STREAMS)}
    for row in rows.values():
        assert row["delivered"] == COUNT // STREAMS
        assert row["timed"] == COUNT // STREAMS
        assert row["p50"] == pytest.approx(DELAY, abs=TICK)
        assert row["max"] == pytest.approx(DELAY, abs=TICK)


def test_loss_job_sees_nothing_lost(spark, exported: Path) -> None:
    events, _ = fcspark.load_events(spark, exported)
    rows = {r["route"]: r for r in metrics.loss(events)["loss"].collect()}
    for stream in range(STREAMS):
        row = rows[_route(stream)]
        assert (row["sent"], row["delivered"], row["lost"], row["acknowledged"], row["resent"], row["denied"]) == (
            COUNT // STREAMS, COUNT // STREAMS, 0, COUNT // STREAMS, 0, 0
        )


def test_presence_changes_are_exported(exported: Path) -> None:
    table = pq.read_table(exported).to_pylist()
    seen = {(r["estate"], r["remote"], r["detail"]) for r in table if r["kind"] == "presence"}
    assert {("alpha", "beta", "alive"), ("beta", "alpha", "alive")} <= seen
