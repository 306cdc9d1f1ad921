from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from flowcast.routing import Route, RouteError


@pytest.mark.parametrize(
    "text, route",
    [
        ("pong", Route("pong")),
        ("pong@.beta", Route("pong", "", "beta")),
        ("a.b.c@worker2.beta.example/control", Route("a.b.c", "worker2", "beta.example", "control")),
        ("x@manor", Route("x", "manor")),
        ("x/main", Route("x", "", "", "main")),
        ("@worker", Route("", "worker")),
        ("", Route()),
        (".abs.name@y", Route("abs.name", "y")),
    ],
)
def test_parse_and_print(text, route):
    assert Route.parse(text) == route
    assert Route.parse(str(route)) == route


@pytest.mark.parametrize(
    "text",
    ["a/b/c", "a@b@c", "bad name@y", "x@../etc", "x@y/ch.an", "x@y./c", "x@" + "y" * 40, "x" * 600, "x@.be..ta", "1x", "x@y/\n"],
)
def test_bad_text_is_refused_with_a_reason(text):
    with pytest.raises(RouteError) as info:
        Route.parse(text)
    assert "route" in str(info.value)


@pytest.mark.parametrize("value", [None, "x", [1, 2, 3, 4], ["a", "b", "c"], ["a/b", "", "", ""], ["a", "", "../x", ""], {"a": 1}])
def test_wire_form_is_validated(value):
    with pytest.raises(RouteError):
        Route.from_wire(value)


def test_resolution_against_the_sender():
    assert Route("s").resolved("w1", "alpha", "main") == Route("s", "w1", "alpha", "main")
    assert Route("s", "w2").resolved("w1", "alpha", "main") == Route("s", "w2", "alpha", "main")
    # another estate: the empty yard stays empty (that estate's manor)
    assert Route("s", "", "beta").resolved("w1", "alpha", "main") == Route("s", "", "beta", "main")
    assert Route("s", "", "alpha", "ctl").resolved("w1", "alpha", "main") == Route("s", "w1", "alpha", "ctl")


_yard = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,8}", fullmatch=True)
_estate = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,5}(\.[A-Za-z0-9][A-Za-z0-9_-]{0,5}){0,2}", fullmatch=True)
_share = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}(\.[A-Za-z_][A-Za-z0-9_]{0,5}){0,3}", fullmatch=True)


@given(st.one_of(st.just(""), _share), st.one_of(st.just(""), _yard), st.one_of(st.just(""), _estate), st.one_of(st.just(""), _yard))
def test_text_round_trip(share, yard, estate, channel):
    route = Route.make(share, yard, estate, channel)
    assert Route.parse(str(route)) == route
    assert Route.from_wire(list(route)) == route


@given(st.text(max_size=80))
def test_parse_never_raises_anything_but_route_error(text):
    try:
        Route.parse(text)
    except RouteError:
        pass
