"""A short fuzz of the live stacks (the long one is ``bench/fuzz_decoder.py``).

What it proves, on a few thousand inputs per target: nothing escapes any
receive path, no stack counts an internal error, every input is handled in
bounded time and memory, the handshake handlers are really reached (the
clock advances, so the token buckets refill), hostile plaintext really
opens inside the live session, and both the road and the lane still carry
a fresh message afterwards.  Bounds are loose (an order of magnitude above
what a loaded 2-core box shows) so they fail on a real regression, not on
a busy machine.
"""

from __future__ import annotations

import pytest

from tests import fuzzkit

INPUTS = 10_000  # ~2 s with tracemalloc on


@pytest.fixture(scope="module")
def fuzzed():
    world = fuzzkit.build_world(seed=3)
    report = fuzzkit.Fuzzer(world, seed=11).run(INPUTS)
    return world, report


def test_nothing_escapes_and_no_stack_errs(fuzzed) -> None:
    world, report = fuzzed
    assert report.escaped == []
    assert report.internal_errors == 0
    assert sum(report.inputs.values()) == INPUTS
    assert set(report.inputs) == set(fuzzkit.TARGETS)
    # Every router recorded routed messages to its export recorder (the hooks were fuzzed too),
    # and the budgeted fuzz.queue refused some: those paths ran without an internal error.
    assert len(world.recorders) == 3 and world.recorded() > 0
    assert all(router.hooks.routed is not None for est in (world.alpha, world.beta) for router in est.houses.values())
    assert sum(est.store(yard).get("fuzz.queue").dropped_budget for est, yard in ((world.beta, "manor"), (world.beta, "worker"))) > 0


def test_every_input_is_bounded_in_time_and_memory(fuzzed) -> None:
    _, report = fuzzed
    for target in fuzzkit.TARGETS:
        assert report.max_seconds[target] < 0.25, (target, report.max_seconds)  # typical: < 3 ms
        assert report.max_alloc[target] < 8 << 20, (target, report.max_alloc)  # typical: < 300 kB
        assert report.max_kept[target] < 2 << 20, (target, report.max_kept)  # typical: < 70 kB
    assert report.growth < 32 << 20, report.growth  # typical: ~1.5 MB over the whole run


def test_handlers_and_the_session_are_reached(fuzzed) -> None:
    world, report = fuzzed
    per_target = INPUTS // len(fuzzkit.TARGETS)
    for handler in ("_on_join", "_on_hello", "_on_initiate", "_on_cookie", "_on_join_reply"):
        assert report.reach[handler] >= per_target // 20, (handler, report.reach)
    # Hostile plaintext sealed with the live keys opens: it reaches the reliable layer.
    assert report.reach["_authentic"] >= per_target * 0.7  # 80% of session inputs go this way
    # Payloads sent for the road to decode are dropped undecoded: its router reads only bytes (issue 25).
    assert world.road.counts["bad_chunks"] > 0 and world.road.counts["not_bytes"] > 0


def test_a_frozen_clock_starves_the_handlers() -> None:
    """The old fuzzer's mistake, kept as a check that the clock is what buys the reach."""
    frozen = fuzzkit.Fuzzer(fuzzkit.build_world(seed=3), seed=11, advance=0.0, sources=1, memory=False).run(INPUTS)
    moving = fuzzkit.Fuzzer(fuzzkit.build_world(seed=3), seed=11, memory=False).run(INPUTS)
    assert frozen.escaped == [] and moving.escaped == []
    # Two sources (the fuzzer's and the peer's address), each with a bucket of
    # handshake_rate / 10 = 200 that never refills: at most 400 handshakes.
    assert frozen.reach["_on_hello"] + frozen.reach["_on_initiate"] + frozen.reach["_on_join"] <= 400
    for handler in ("_on_join", "_on_hello", "_on_initiate"):
        assert moving.reach[handler] > frozen.reach[handler], (handler, moving.reach, frozen.reach)


def test_keyed_lanes_hear_sealed_hostile_datagrams_and_drop_every_impostor(fuzzed) -> None:
    """The fuzz world's lanes are keyed, as an estate's: hostile datagrams sealed with the
    real pair key reach the link; impostors (no trailer, a wrong or reflected key, a
    replay, a flipped bit) are each exactly one counted drop."""
    world, report = fuzzed
    lanes = [world.beta[yard].lane for yard in ("manor", "worker")]
    assert all(lane.authenticated for lane in lanes)
    lane, per_target = report.lane, INPUTS // len(fuzzkit.TARGETS)
    assert lane["sealed"] >= per_target // 2 and lane["sealed_authentic"] == lane["sealed"], lane
    assert sum(stack.counts["bad_chunks"] for stack in lanes) > per_target // 10  # the chunks got past the tag
    assert lane["impostor"] >= per_target // 10 and lane["impostor_heard"] == 0, lane
    for kind in fuzzkit.IMPOSTOR_KINDS:
        assert lane[f"impostor.{kind}"] > 0, (kind, lane)
    assert sum(fuzzkit._lane_refusals(stack) for stack in lanes) >= lane["impostor"]


def test_the_stacks_still_carry_messages_afterwards(fuzzed) -> None:
    world, _ = fuzzed
    assert fuzzkit.still_works(world)


def test_the_bench_runs_and_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import fuzz_decoder

    assert fuzz_decoder.main(["--quick", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["figures"]
    assert figures["escaped"]["value"] == 0 and figures["still_delivers"]["value"] == 1
    assert figures["reach._on_hello"]["value"] > 0 and "frozen clock" in figures["reach._on_hello"]["note"]
