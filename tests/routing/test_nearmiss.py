"""``no_share`` says which share was meant: to the estate's own houses, to a remote only what its policy
lets it write, to the operator always; and never at more than RATE suggestions a second (issue 14, item 5)."""

from __future__ import annotations

from flowcast.routing.nearmiss import MAX_NAMES, RATE
from tests.routing.kit import World
from tests.routing.test_router import errors_of


def _reasons(queue) -> list[str]:
    return [m["data"]["reason"] for m in queue.drain()]


def test_a_house_of_the_same_estate_is_told_the_share_it_meant() -> None:
    world = World(seed=3)
    alpha = world.routed_estate("alpha", ["manor", "w1"])
    alpha.store("manor").queue("temperature")
    out = errors_of(alpha, "w1")
    alpha["w1"].send("temprature@manor", 21.5, src="out")
    alpha["w1"].send("zzz@manor", 1, src="out")  # nothing near: no suggestion
    assert world.run_until(lambda: len(out.queue) == 2, 5)
    assert _reasons(out) == [
        "no share 'temprature' in yard 'manor' of 'alpha'; did you mean 'temperature'?",
        "no share 'zzz' in yard 'manor' of 'alpha'",
    ]


def test_a_remote_is_told_only_a_share_its_policy_lets_it_write() -> None:
    world = World(seed=4)
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=[{"allow": "write", "estate": "beta"}])
    beta = world.routed_estate("beta", ["manor"], policy=[
        {"allow": "write", "estate": "alpha", "share": "public.*"},
        {"allow": "write", "estate": "alpha", "share": "secrex"},  # allowed by name, and missing
    ])
    world.connect(alpha, beta)
    manor = beta.store("manor")
    manor.queue("public.readings")
    manor.queue("secret")  # near "secrex", but alpha may not write it: never named to alpha
    out = errors_of(alpha, "w1")
    alpha["w1"].send("public.reedings@.beta", 1, src="out")
    alpha["w1"].send("secrex@.beta", 2, src="out")
    assert world.run_until(lambda: len(out.queue) == 2, 5)
    told = _reasons(out)
    assert told[0] == "no share 'public.reedings' in yard 'manor' of 'beta'; did you mean 'public.readings'?"
    assert told[1] == "no share 'secrex' in yard 'manor' of 'beta'" and "secret" not in told[1].replace("secrex", "")
    # beta's operator sees what was meant in both cases
    notes = [d["reason"] for d in beta["manor"].denials if d["kind"] == "no_share"]
    assert notes[-1] == "no share 'secrex' in yard 'manor' of 'beta'; did you mean 'secret'?"


def test_suggestions_are_budgeted_so_a_flood_of_misaddressed_messages_costs_little() -> None:
    world = World(seed=5)
    alpha = world.routed_estate("alpha", ["manor"])
    alpha.store("manor").queue("temperature")
    out = errors_of(alpha, "manor")
    burst = int(RATE) + 10
    for _ in range(burst):
        alpha["manor"].send("temprature", 1, src="out")  # one instant: the bucket holds RATE
    reasons = _reasons(out)
    assert len(reasons) == burst
    assert sum("did you mean" in r for r in reasons) == int(RATE)
    assert alpha["manor"].near_miss.skipped == 10
    world.run_for(1.0)  # a second later the bucket is full again
    alpha["manor"].send("temprature", 1, src="out")
    assert _reasons(out)[-1].endswith("did you mean 'temperature'?")


def test_a_house_with_more_shares_than_the_matching_budget_gets_no_suggestion() -> None:
    world = World(seed=6)
    alpha = world.routed_estate("alpha", ["manor"])
    store = alpha.store("manor")
    store.queue("temperature")
    for i in range(MAX_NAMES):
        store.share(f"filler.s{i}")
    out = errors_of(alpha, "manor")
    alpha["manor"].send("temprature", 1, src="out")
    assert _reasons(out) == ["no share 'temprature' in yard 'manor' of 'alpha'"]
    assert alpha["manor"].near_miss.skipped == 1


def test_one_suggestion_stops_looking_at_its_time_budget() -> None:
    """Long names of repeated letters make difflib slow (about 0.35 ms a pair here, 90 ms for these 256):
    looking stops once BUDGET has passed, on a scripted clock where each look costs a millisecond."""
    from flowcast.routing.nearmiss import BUDGET, nearest

    names = ["b" * 60 + f"{i:04d}" for i in range(256)]
    now = [0.0]
    looked = []

    def clock() -> float:
        looked.append(now[0])
        now[0] += 0.001
        return now[0]

    found = nearest("b" * 63 + "x", names, clock=clock)
    assert found == names[0]  # the nearest of those it had time for
    assert len(looked) == 1 + round(BUDGET / 0.001) + 1  # the start, one look a name within budget, the stop
    assert nearest("temprature", ["pressure", "temperature", "tempo"]) == "temperature"
    assert nearest("zzz", ["temperature"]) is None


def test_a_name_longer_than_a_person_types_gets_no_suggestion() -> None:
    from flowcast.routing.nearmiss import MAX_LENGTH

    world = World(seed=8)
    alpha = world.routed_estate("alpha", ["manor"])
    long = "t" * (MAX_LENGTH + 1)
    alpha.store("manor").queue(long[:-1])
    out = errors_of(alpha, "manor")
    alpha["manor"].send(long, 1, src="out")
    assert _reasons(out) == [f"no share {long!r} in yard 'manor' of 'alpha'"]
    assert alpha["manor"].near_miss.skipped == 1
