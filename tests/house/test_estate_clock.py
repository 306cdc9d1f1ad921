"""An estate's house threads on the house's clock: the join loop and the status writer.

Both ran on the wall clock or a poll: the join loop looked at its attempt
every 50 ms, and the status writer measured rates with ``time.monotonic``
while the house it reports on may run on virtual time.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from flowcast.house.estate import _status_writer
from flowcast.house.joining import JoinTries, keep_joined
from flowcast.runtime import wall_now
from tests.routing.kit import World as RoutedWorld
from tests.transport.roadkit import World


def counted(body: Any, directives: list[Any]):  # type: ignore[no-untyped-def]
    """Run ``body``, noting every directive it yields (each is one wake-up)."""
    value = None
    while True:
        try:
            directive = body.send(value)
        except StopIteration:
            return
        directives.append(directive)
        value = yield directive


def test_keep_joined_waits_for_the_answer_not_a_poll() -> None:
    world = World(seed=1)
    alpha = world.estate("alpha")
    directives: list[Any] = []
    tries = JoinTries("beta")
    world.scheduler.spawn(counted(keep_joined(alpha, "beta", tries, world.scheduler), directives), name="join")
    world.run_for(2.5)  # beta is not there: the first try (2 s) times out unanswered
    assert not alpha.is_allowed("beta")
    # One wait for the answer, one back-off sleep: a 50 ms poll made about 40.
    assert len(directives) <= 3, directives
    # what `flowcast status` shows for a remote that has not joined: where, how often, what came back
    assert (tries.tries, tries.answer, tries.retry_in) == (1, "timeout", 1.0)
    assert JoinTries.describe(tries.as_dict(), wall_now()).startswith("trying beta, 1 try; last: no answer")
    world.estate("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta"), 10)
    assert len(directives) <= 6, directives
    assert tries.answer == "accepted" and tries.tries == 2


def test_keep_joined_keeps_the_last_answer_and_its_reason_for_the_status() -> None:
    world = World(seed=1)
    alpha = world.estate("alpha")
    world.estate("beta", policy="never")  # holds a key it does not know for its operator
    tries = JoinTries("beta")
    world.scheduler.spawn(keep_joined(alpha, "beta", tries, world.scheduler), name="join")
    assert world.run_until(lambda: tries.answer is not None, 10)
    assert (tries.answer, tries.reason) == ("pending", "new key"), tries.as_dict()
    line = JoinTries.describe(tries.as_dict(), wall_now())
    assert line.startswith("trying beta, 1 try; last: pending: the estate holds the join for its operator (new key)"), line


def test_keep_joined_stops_when_the_road_closes() -> None:
    world = World(seed=1)
    alpha = world.estate("alpha")
    thread = world.scheduler.spawn(keep_joined(alpha, "beta", JoinTries("beta"), world.scheduler), name="join")
    world.run_for(0.5)
    alpha.close()
    world.run_for(5.0)  # the guard timer ends the wait even if the road never answers
    assert thread not in world.scheduler.threads


def test_status_writer_measures_rates_on_the_house_clock(tmp_path: Path) -> None:
    world = RoutedWorld(seed=2)
    estate = world.routed_estate("alpha", ["manor"])
    router = estate["manor"]
    house = SimpleNamespace(scheduler=world.scheduler, router=router, name="alpha-manor")
    path = tmp_path / "manor.json"
    router.store.queue("inbox")
    router.store.queue("out")
    world.run_for(30.0)
    router.send("nowhere", 1, src="out")  # no such share: a denial at t=30 on the house clock
    world.scheduler.spawn(_status_writer(house, path, "manor", True), name="status")
    world.run_for(0.5)
    first = json.loads(path.read_text())
    for n in range(5):
        router.send("inbox", n)
    world.run_for(1.0)  # one status period of virtual time, next to no wall time
    second = json.loads(path.read_text())
    assert second["counts"]["delivered"] - first["counts"].get("delivered", 0) == 5
    assert 4.0 <= second["rates"]["delivered"] <= 6.0  # 5 in one house second, not 5 in a few microseconds
    (denial,) = second["denials"]
    assert abs(denial["at"] - wall_now()) < 60  # a wall stamp for `flowcast status`, from a house-clock one
    assert abs(second["updated"] - wall_now()) < 60
