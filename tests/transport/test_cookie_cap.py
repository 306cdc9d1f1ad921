"""Issue 25, finding 8: replies to addresses that have not proven they receive are capped.

Was a finding: every JOIN past ``join_rate`` got a cookie reply -- a flood at
full speed drew 282,000 of them, honest p99 3.9 s, a new estate joined after
6.5 s.  Now cookies are spent from a byte budget (replybudget.py): in all,
and a fair share per address with headroom for newcomers, never more than
three times the bytes that came from an address.  Counts, not timings: the
simulated network carries every datagram, the tap below sees them all.
"""

from __future__ import annotations

import os

from flowcast.transport import handshake as hs
from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.joingate import parse_join_cookie, wrap_join
from flowcast.transport.replybudget import DEFAULT_REPLY_RATE, DEFAULT_REPLY_SOURCE_RATE, ReplyBudget
from flowcast.transport.wire import PacketKind
from tests.transport.roadkit import World
from tests.house.test_layout import tree  # noqa: F401 - a fixture
from tests.transport.test_adversarial import Tap


def _joins(n: int) -> list[bytes]:
    return [hs.build_join(LongTermKeys.generate(), f"f{i}", "f", 0, os.urandom(16), i + 1) for i in range(n)]


def _bytes(tap: Tap, source=None, destination=None) -> int:
    return sum(len(d) for s, dd, d in tap.seen if (source is None or s == source) and (destination is None or dd == destination))


def test_a_full_speed_flood_from_one_address_gets_a_bounded_number_of_cookies():
    world = World(seed=2581, delay=0.0005)
    tap = Tap(world)
    main = world.estate("main", policy="always", join_rate=20.0)
    flooder = world.net.port("flooder")
    packets = _joins(50)
    seconds = 2.0
    for step in range(200):  # 10,000 JOINs a second for two seconds
        for n in range(100):
            flooder.send(packets[n % 50], "main")
        world.run_for(seconds / 200)
        flooder.receive_many(4096)
    cookies = tap.kind(PacketKind.JOIN_COOKIE, "main", "flooder")
    # 20 a second for one address (640 B/s) and a burst of five, not one per JOIN
    assert len(cookies) == main.counts["join_cookies"] <= seconds * DEFAULT_REPLY_SOURCE_RATE / 32 + 5 + 1
    assert main.counts["reply_limited"] > 15_000
    assert _bytes(tap, "main", "flooder") <= 3 * _bytes(tap, "flooder", "main")
    assert main.counts["internal_errors"] == 0


def test_a_flood_from_many_addresses_is_capped_in_all_and_a_newcomer_joins_at_once():
    world = World(seed=2582, delay=0.0005)
    tap = Tap(world)
    main = world.estate("main", policy="always", join_rate=20.0)
    flooders = [world.net.port(f"flood{n}") for n in range(400)]
    packets = _joins(100)
    newcomer = world.estate("newcomer")
    attempt = None
    started = joined_after = None
    for step in range(100):  # 20,000 JOINs a second from 400 addresses, each answering its cookies
        for n, port in enumerate(flooders):
            port.send(packets[(step + n) % 100], "main")
        if step == 40:
            attempt = newcomer.join("main")
            started = world.scheduler.clock.now()
        world.run_for(0.02)
        if attempt is not None and joined_after is None and attempt.result == "accepted":
            joined_after = world.scheduler.clock.now() - started
        for port in flooders:
            for data, _ in port.receive_many(64):
                parsed = parse_join_cookie(data) if data[1] == PacketKind.JOIN_COOKIE else None
                if parsed is not None:
                    port.send(wrap_join(packets[(parsed[0] - 1) % 100], parsed[1]), "main")
    cookies = len(tap.kind(PacketKind.JOIN_COOKIE, "main"))
    # the flood's addresses share half the rate; the newcomer's first JOIN finds the other half
    assert cookies <= 2.0 * DEFAULT_REPLY_RATE / 32 + DEFAULT_REPLY_RATE / 4 / 32 + 1
    assert main.counts["reply_limited"] > 20_000
    assert joined_after is not None and joined_after <= 0.1, joined_after  # a round trip or two, not seconds
    for port in flooders[:20]:
        assert _bytes(tap, "main", port.address) <= 3 * _bytes(tap, port.address, "main")


def test_the_ledger_never_sends_an_address_more_than_three_times_what_it_sent():
    budget = ReplyBudget(1 << 20, per_source=1 << 20)  # the ledger alone (rated=False): the buckets are another test's
    assert not budget.take("never-heard", 32, 0.0)  # nothing came from it: nothing goes
    budget.heard("victim", 100)
    assert not budget.take("victim", 301, 0.0, rated=False)
    assert budget.take("victim", 200, 0.0, rated=False) and budget.take("victim", 100, 0.0, rated=False)
    assert not budget.take("victim", 1, 0.0, rated=False)  # 300 sent for 100 received
    assert budget.counts["amplification_limited"] == 3 and budget.ratio("victim") == 3.0
    budget.heard("victim", 10)
    assert budget.take("victim", 30, 0.0, rated=False) and not budget.take("victim", 1, 0.0, rated=False)


def test_a_join_let_through_without_a_cookie_is_answered_within_the_ledger():
    """The signed reply to an uncookied JOIN goes to an unproven address too: the ledger holds it (never
    more than 3x); the join budget, not the cookie buckets, rations how many."""
    world = World(seed=2583, delay=0.0005)
    tap = Tap(world)
    main = world.estate("main", policy="always", join_cookies="never")
    mallory = world.net.port("mallory")
    for packet in _joins(5):
        mallory.send(packet, "main")
    world.run_for(0.2)
    assert len(tap.kind(PacketKind.JOIN_ACCEPT, "main", "mallory")) == 5
    assert _bytes(tap, "main", "mallory") <= 3 * _bytes(tap, "mallory", "main")
    assert main._joins.replies.ratio("mallory") <= 1.0


def test_the_reply_budget_is_set_from_the_layout(tree):
    from flowcast.house.layout import load_layout
    from tests.house.test_layout import MINIMAL, write
    from tests.house.test_layout_limits import road_of

    layout = MINIMAL + "roads:\n  main:\n    port: 0\n    reply_bytes: 8192\n    reply_source_bytes: 320\n"
    options = load_layout(write(tree, layout)).roads["main"].stack_options()
    assert options == {"reply_bytes": 8192, "reply_source_bytes": 320}
    replies = road_of(options)._joins.replies
    assert (replies.rate, replies.per_source) == (8192.0, 320.0)
    assert (road_of({})._joins.replies.rate, road_of({})._joins.replies.per_source) == (DEFAULT_REPLY_RATE, DEFAULT_REPLY_SOURCE_RATE)
