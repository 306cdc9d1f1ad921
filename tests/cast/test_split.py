"""The split: M receivers across estates take disjoint shares of the stream, filtered at the publisher."""

from __future__ import annotations

from tests.cast.kit import Cast, payloads

N = 600


def _road_bytes_from_abc(cast) -> int:
    return sum(len(data) for _t, src, _dst, data in cast.world.net.trace if src == "abc:main")


def _run(tmp_path, subs) -> tuple[Cast, int]:
    cast = Cast(tmp_path, others=("xyz", "uvw"), record=True)
    for estate, yard, split in subs:
        cast.service(estate, yard).subscribe("abc/messages/**", estate="abc", into="inbox", split=split)
    cast.world.run_for(1)
    before = _road_bytes_from_abc(cast)
    tickets = [cast.pub.publish(f"abc/messages/alice/{i}", b"%06d" % i + bytes(94), publisher="alice") for i in range(N)]
    assert cast.run_until(lambda: all(t.done for t in tickets), 10)
    assert cast.run_until(lambda: sum(len(cast.queue(e, y).queue) for e, y, _s in subs) == N, 60)
    cast.world.run_for(2)
    return cast, _road_bytes_from_abc(cast) - before


def test_three_receivers_across_two_estates_take_disjoint_sets_whose_union_is_everything(tmp_path):
    subs = [("xyz", "bob", ("id", 3, 0)), ("xyz", "carol", ("id", 3, 1)), ("uvw", "bob", ("id", 3, 2))]
    cast, split_bytes = _run(tmp_path / "split", subs)
    sets = [set(payloads(cast.queue(e, y))) for e, y, _s in subs]
    assert all(sets) and sum(map(len, sets)) == N
    assert set().union(*sets) == {b"%06d" % i + bytes(94) for i in range(N)}
    assert all(len(s) > N / 6 for s in sets)  # a hash, not one receiver taking all
    _one, whole_bytes = _run(tmp_path / "whole", [("xyz", "bob", None)])
    # Filtered at the publisher: the three together cost about one stream, not three.
    assert split_bytes < 1.5 * whole_bytes, (split_bytes, whole_bytes)


def test_a_split_by_publisher_keeps_each_publishers_chain_on_one_receiver(tmp_path):
    cast = Cast(tmp_path)
    a = cast.service("xyz", "bob").subscribe("abc/messages/**", estate="abc", into="inbox", split=("publisher", 2, 0))
    b = cast.service("xyz", "carol").subscribe("abc/messages/**", estate="abc", into="inbox", split=("publisher", 2, 1))
    names = [f"user{i}" for i in range(12)]
    tickets = [cast.pub.publish(f"abc/messages/{p}/{n}", b"%s-%d" % (p.encode(), n), publisher=p) for n in range(5) for p in names]
    assert cast.run_until(lambda: len(cast.queue("xyz", "bob").queue) + len(cast.queue("xyz", "carol").queue) == len(tickets), 20)
    bob = {item["publisher"] for item in cast.queue("xyz", "bob").queue}
    carol = {item["publisher"] for item in cast.queue("xyz", "carol").queue}
    assert bob and carol and not bob & carol and bob | carol == set(names)
    for queue in (cast.queue("xyz", "bob"), cast.queue("xyz", "carol")):
        for p in bob | carol:  # each publisher's messages in its order
            mine = [item["data"] for item in queue.queue if item["publisher"] == p]
            assert mine in ([], [b"%s-%d" % (p.encode(), n) for n in range(5)])
    assert a.state == b.state == "active"
