"""The House is a HouseLike: what every layer inside a house may use of it.

No type checker runs in this project, so the structural check is done
here: every member the Protocol declares exists on a House with the same
kind (property, method or plain attribute), and the service slots are the
declared ones, each None until its layer wires it.
"""

from __future__ import annotations

import inspect

import pytest

from flowcast.flow import parse_flo
from flowcast.house import House
from flowcast.routing.wiring import wire_router
from flowcast.store import SERVICE_SLOTS, HouseLike

FLOW = "house tiny\ninit .counter with 0\nframer main be active first tick\n  frame tick\n    inc .counter with 1\n"


@pytest.fixture
def house() -> House:
    built = House(parse_flo(FLOW, "tiny.flo").house("tiny"), virtual=True, out=lambda line: None)
    yield built
    built.close()


def members() -> dict[str, str]:
    """Each member HouseLike declares, and its kind."""
    found = {name: "attribute" for name in HouseLike.__annotations__}
    for name, value in vars(HouseLike).items():
        if isinstance(value, property):
            found[name] = "property"
        elif inspect.isfunction(value) and not name.startswith("_"):
            found[name] = "method"
    return found


def test_house_satisfies_the_protocol_member_by_member(house: House) -> None:
    declared = members()
    assert {"name", "store", "scheduler", "clock", "stamp", "on_close", *SERVICE_SLOTS} == set(declared)
    for name, kind in declared.items():
        on_class = inspect.getattr_static(House, name, None)
        if kind == "property":
            # A property on House, or a plain attribute the constructor sets.
            assert isinstance(on_class, property) or name in vars(house), name
        elif kind == "method":
            assert inspect.isfunction(on_class), name
        else:
            assert name in vars(house), name
    assert isinstance(house, HouseLike)


def test_service_slots_start_empty_and_the_router_is_wired_into_its_slot(house: House) -> None:
    assert all(getattr(house, slot) is None for slot in SERVICE_SLOTS)
    assert house.clock is house.scheduler.clock
    assert house.store.stamp == house.stamp()
    router = wire_router(house, estate="alpha", yard="manor")
    assert house.router is router and router.scheduler is house.scheduler


def test_something_missing_a_slot_is_not_a_house() -> None:
    class Bare:
        name = "bare"
        store = scheduler = clock = stamp = None
        router = cast = None  # no causal slot

        def on_close(self, closer: object) -> None: ...

    assert not isinstance(Bare(), HouseLike)
    Bare.causal = None
    assert isinstance(Bare(), HouseLike)
