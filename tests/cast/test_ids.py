"""flowcast.cast.ids: time-ordered, strictly increasing within a process, UUIDv7 layout."""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from flowcast.cast.ids import ID_SIZE, IdMaker, check_id, id_hex, id_time, new_id


def test_many_ids_in_one_millisecond_strictly_increase():
    make = IdMaker(now_ms=lambda: 1_700_000_000_000, random_bits=random.Random(1).getrandbits)
    ids = [make() for _ in range(10_000)]
    assert all(len(i) == ID_SIZE for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {id_time(i) for i in ids} == {1_700_000_000.0}


def test_ids_follow_the_clock_and_never_go_back_when_it_does():
    now = [5_000]
    make = IdMaker(now_ms=lambda: now[0], random_bits=random.Random(2).getrandbits)
    first = make()
    now[0] = 6_000
    later = make()
    now[0] = 4_000  # the wall clock stepped back
    after_step_back = make()
    assert first < later < after_step_back
    assert id_time(later) == 6.0 and id_time(after_step_back) == 6.0


def test_a_full_counter_borrows_the_next_millisecond():
    # The worst seed: the counter starts at its top, so the next id must move the stamp.
    make = IdMaker(now_ms=lambda: 1_000, random_bits=lambda n: (1 << n) - 1)
    make._counter = (1 << 74) - 1
    make._ms = 1_000
    nxt = make()
    assert id_time(nxt) == 1.001


def test_ids_are_uuid_version_7():
    value = uuid.UUID(bytes=new_id())
    assert value.version == 7 and value.variant == uuid.RFC_4122
    assert id_hex(value.bytes) == str(value)


def test_the_process_maker_is_unique_and_ordered_across_threads():
    out: list[list[bytes]] = [[] for _ in range(4)]

    def run(slot: list[bytes]) -> None:
        for _ in range(5_000):
            slot.append(new_id())

    threads = [threading.Thread(target=run, args=(slot,)) for slot in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    every = [i for slot in out for i in slot]
    assert len(set(every)) == 20_000
    assert all(slot == sorted(slot) for slot in out)  # each thread sees them increase


@pytest.mark.parametrize("bad", [b"short", b"x" * 17, "a" * 16, 16, None])
def test_check_id_refuses_what_is_not_16_bytes(bad):
    with pytest.raises(ValueError, match="16 bytes"):
        check_id(bad)


def test_check_id_takes_bytearray():
    assert check_id(bytearray(16)) == bytes(16)


def test_a_forked_child_never_repeats_its_parents_ids():
    # Two houses forked from one process make ids in the same millisecond:
    # the child's random stream is reseeded at fork, or both would make the same id.
    import os

    make = IdMaker(now_ms=lambda: 1_234)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one id, to the parent, and out
        try:
            os.write(write, make())
        finally:
            os._exit(0)
    os.close(write)
    mine = make()
    theirs = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    assert len(theirs) == 16 and theirs != mine
