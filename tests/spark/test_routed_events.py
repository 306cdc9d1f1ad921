"""End to end: routers of two estates record through real Recorders, the routed job finds the known latency.

Virtual time and a fixed delay per datagram make the answers exact: a
message from alpha's worker to beta's worker takes three hops (lane, road,
lane), so it lands exactly three delays after it was routed; the error
report for a denied message goes back in two (beta's manor to alpha's, then
the lane).  A burst sent in one tick checks that ids numbered within a
stamp still match.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import all as all_jobs
import fcspark
import metrics
from flowcast.export.collect import collect
from flowcast.export.demo import EPOCH
from flowcast.export.recorder import Recorder
from tests.routing.kit import World

DELAY = 0.004
SPACED = 10
BURST = 5
FORWARD = "out/w1/alpha/main -> inbox/w1/beta/main"
DENIED = "out/w1/alpha/main -> secret//beta/main"
REPORT = "secret/manor/beta/main -> out/w1/alpha/main"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("routed-events")
    world = World(seed=13, delay=(DELAY, DELAY))
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=[{"allow": "write", "estate": "beta"}])
    beta = world.routed_estate("beta", ["manor", "w1"], policy=[{"deny": "write", "share": "secret"}, {"allow": "write", "estate": "alpha"}])
    world.connect(alpha, beta)
    now = world.scheduler.clock.now
    recorders = []
    for estate in (alpha, beta):
        for yard, router in estate.houses.items():
            recorder = Recorder(root / "live", estate=estate.name, house=yard, clock=now, epoch=EPOCH, batch=8)
            router.set_events(recorder)
            recorders.append(recorder)
    inbox = beta.store("w1").queue("inbox")
    alpha.store("w1").queue("out")
    errors = alpha.store("w1").queue("out.error")
    for i in range(SPACED):  # one at a time: nothing waits behind anything
        alpha["w1"].send("inbox@w1.beta", {"n": i}, src="out")
        world.run_for(0.05)
    for i in range(BURST):  # one stamp, ids STAMP:0..4 at both ends
        alpha["w1"].send("inbox@w1.beta", {"n": i}, src="out")
    alpha["w1"].send("secret@.beta", 0, src="out")
    assert world.run_until(lambda: len(inbox.queue) == SPACED + BURST and len(errors.queue) == 1, 5)
    for recorder in recorders:
        recorder.close()
    report = collect([root / "live"], root / "collected")
    assert report.skipped == []
    return root / "collected"


def test_routed_job_counts_and_times_each_route(spark, exported: Path, tmp_path: Path) -> None:
    summary = fcspark.run_jobs(spark, [job for job in all_jobs.JOBS if job.name == "routed"], exported, tmp_path)
    assert summary["jobs"]["routed"]["tables"] == {"routed": 3, "routed_refused": 1}
    events, _ = fcspark.load_events(spark, exported)
    tables = metrics.routed(events)
    rows = {r["route"]: r for r in tables["routed"].collect()}
    assert set(rows) == {FORWARD, DENIED, REPORT}
    forward = rows[FORWARD]
    assert (forward["routed"], forward["landed"], forward["refused"], forward["lost"], forward["timed"]) == (15, 15, 0, 0, 15)
    for p in ("p50", "p95", "p99", "max"):
        assert forward[p] == pytest.approx(3 * DELAY, abs=2e-6), p
    denied = rows[DENIED]
    assert (denied["routed"], denied["landed"], denied["refused"], denied["lost"], denied["timed"]) == (1, 0, 1, 0, 0)
    assert denied["p50"] is None
    report = rows[REPORT]
    assert (report["routed"], report["landed"], report["timed"]) == (1, 1, 1)
    assert report["p50"] == pytest.approx(2 * DELAY, abs=2e-6)
    (refusal,) = tables["routed_refused"].collect()
    assert (refusal["route"], refusal["reason"], refusal["count"]) == (DENIED, "denied", 1)
    # the transport's loss table is about hops: router events stay out of it
    assert not {r["route"] for r in metrics.loss(events)["loss"].collect()} & set(rows)
