"""Estates as real processes on loopback: routed share to share across yards and estates.

Two estates: alpha (manor, w1, w2) and beta (manor, w1).  alpha's w1 sends
to a worker of beta (lane -> road -> lane), to beta's manor by the relative
address ``@.beta``, to its own sibling w2 (lane only), to a share beta's
policy protects, and to a share that does not exist.  Receivers append
every landed message to a file, so the test reads what really arrived.
"""

from __future__ import annotations

import pytest

from flowcast.house.estate import open_house
from flowcast.house.layout import load_layout
from tests.house.estates import free_udp_port, idle_flow, lines, start_estate, status, stop_estate, wait_for, write_flow

N = 100


def _recorder(path, house, out):
    return write_flow(
        path,
        house,
        f"framer keep be active first listen\n  frame listen\n    do routeplay record from inbox with out \"{out}\"\n",
    )


@pytest.fixture
def estates(tmp_path):
    a_port, b_port = free_udp_port(), free_udp_port()
    out = tmp_path / "out"
    out.mkdir()
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle_a.flo", "idlea")
    _recorder(flows / "rec_w2.flo", "recwtwo", out / "alpha-w2.jsonl")
    _recorder(flows / "rec_bm.flo", "recbm", out / "beta-manor.jsonl")
    _recorder(flows / "rec_bw.flo", "recbw", out / "beta-w1.jsonl")
    dsts = " ".join(["inbox@w1.beta", "inbox@.beta", "inbox@w2", "secret@w1.beta", "nothere@w1.beta"])
    write_flow(
        flows / "send.flo",
        "sender",
        "framer fire be active first go\n  frame go\n"
        f"    do routeplay send with dsts \"{dsts}\" count {N} out \"{out / 'alpha-w1-errors.jsonl'}\"\n",
    )
    (tmp_path / "alpha.yaml").write_text(
        f"""
estate: alpha
roads:
  main: {{port: {a_port}, acceptance: always}}
policy:
  - {{allow: write, estate: beta}}
houses:
  - {{name: manor, flow: flows/idle_a.flo, manor: true}}
  - {{name: w1, flow: flows/send.flo}}
  - {{name: w2, flow: flows/rec_w2.flo}}
"""
    )
    (tmp_path / "beta.yaml").write_text(
        f"""
estate: beta
roads:
  main:
    port: {b_port}
    acceptance: always
    remotes: [{{estate: alpha, host: 127.0.0.1, port: {a_port}}}]
policy:
  - {{deny: write, share: "secret*"}}
  - {{allow: write, estate: alpha}}
houses:
  - {{name: manor, flow: flows/rec_bm.flo, manor: true}}
  - {{name: w1, flow: flows/rec_bw.flo}}
"""
    )
    return tmp_path, out


def test_layout_wiring_in_process(estates):
    tmp_path, _out = estates
    layout = load_layout(tmp_path / "beta.yaml")
    house = open_house(layout, "manor", houses=2)
    try:
        router = house.router
        assert router.is_manor and router.estate == "beta" and router.yard == "manor"
        assert router.lane.yards == ["w1"]
        assert list(router.roads) == ["main"]
        assert router.roads["main"].address[1] == layout.roads["main"].port
        assert [r.effect for r in router.policy.rules] == ["deny", "allow"]
        assert (layout.run / "lane" / "manor").exists()
    finally:
        house.stop()
        house.run()  # runs the closers: sockets closed


def test_routed_across_yards_and_estates(estates):
    tmp_path, out = estates
    beta = start_estate(tmp_path / "beta.yaml", houses=2)
    alpha = start_estate(tmp_path / "alpha.yaml", houses=3)
    try:
        wait_for(
            lambda: len(lines(out / "beta-w1.jsonl")) >= N and len(lines(out / "beta-manor.jsonl")) >= N
            and len(lines(out / "alpha-w2.jsonl")) >= N and len(lines(out / "alpha-w1-errors.jsonl")) >= 2 * N,
            what="all messages and errors",
        )
        beta_w1 = lines(out / "beta-w1.jsonl")
        # lane -> road -> lane, exactly once and in order
        assert [m["data"]["n"] for m in beta_w1] == list(range(N))
        assert beta_w1[0]["src"] == ["play.out", "w1", "alpha", "main"]
        assert beta_w1[0]["dst"] == ["inbox", "w1", "beta", "main"]
        # relative addresses: "@.beta" is beta's manor; "@w2" is alpha's own w2
        assert [m["data"]["n"] for m in lines(out / "beta-manor.jsonl")] == list(range(N))
        assert [m["data"]["n"] for m in lines(out / "alpha-w2.jsonl")] == list(range(N))
        # denials and undeliverables come back to the source share, with the reason
        errors = lines(out / "alpha-w1-errors.jsonl")
        kinds = {}
        for e in errors:
            kinds.setdefault(e["error"]["kind"], []).append(e)
        assert sorted(kinds) == ["denied", "no_share"] and len(kinds["denied"]) == N and len(kinds["no_share"]) == N
        assert "denied by policy" in kinds["denied"][0]["error"]["reason"]
        assert kinds["denied"][0]["src"] == ["secret", "manor", "beta", "main"]
        assert kinds["no_share"][0]["error"]["dst"] == "nothere@w1.beta/main"
        # beta's manor counted and logged the denials with their routes
        beta_status = wait_for(lambda: (s := status(tmp_path / "run" / "beta", "manor")).get("counts", {}).get("denied", 0) >= N and s)
        assert beta_status["denials"][-1]["src"] == "play.out@w1.alpha/main"
        assert beta_status["roads"]["main"]["alpha"] in ("allowed", "alive")
    finally:
        a_code, a_out = stop_estate(alpha)
        b_code, b_out = stop_estate(beta)
    assert a_code == 0, a_out
    assert b_code == 0, b_out


def test_a_manor_keeps_joining_an_estate_that_starts_later(tmp_path):
    """alpha names beta as a remote and starts first; beta comes up only after
    alpha's first join has timed out -- alpha tries again and they connect."""
    from tests.house.estates import ROOT  # noqa: F401 - the flows below are generated

    a_port, b_port = free_udp_port(), free_udp_port()
    flows = tmp_path / "flows"
    flows.mkdir()
    out = tmp_path / "landed.jsonl"
    write_flow(flows / "send.flo", "sender",
               "framer fire be active first go\n  frame go\n    do routeplay send with dsts \"inbox@.beta\" count 3\n")
    _recorder(flows / "rec.flo", "rec", out)
    (tmp_path / "alpha.yaml").write_text(f"""
estate: alpha
roads:
  main:
    port: {a_port}
    acceptance: always
    remotes: [{{estate: beta, host: 127.0.0.1, port: {b_port}}}]
houses:
  - {{name: manor, flow: flows/send.flo, manor: true}}
""")
    (tmp_path / "beta.yaml").write_text(f"""
estate: beta
roads:
  main: {{port: {b_port}, acceptance: always}}
policy:
  - {{allow: write, estate: alpha, share: inbox}}
houses:
  - {{name: manor, flow: flows/rec.flo, manor: true}}
""")
    alpha = start_estate(tmp_path / "alpha.yaml", houses=1)
    beta = None
    try:
        log = tmp_path / "run" / "alpha" / "logs" / "manor.log"
        wait_for(lambda: log.exists() and "join beta at" in log.read_text(), what="alpha's first join to fail")
        beta = start_estate(tmp_path / "beta.yaml", houses=1)
        # alpha's three messages were held for beta and are delivered once it joins
        wait_for(lambda: len(lines(out)) == 3, timeout=40, what="messages after the late join")
        assert sorted(m["data"]["n"] for m in lines(out)) == [0, 1, 2]
    finally:
        codes = [stop_estate(p) for p in (alpha, beta) if p is not None]
    assert all(code == 0 for code, _ in codes), codes


def test_is_layout_tells_layouts_from_yaml_flows(tmp_path):
    from flowcast.house.layout import is_layout

    (tmp_path / "e.yaml").write_text("estate: alpha\nhouses: []\n")
    (tmp_path / "f.yaml").write_text("house: {name: h, framers: []}\n")
    (tmp_path / "bad.yaml").write_text("estate: [unclosed\n")
    (tmp_path / "x.flo").write_text("estate: alpha\n")
    assert is_layout(tmp_path / "e.yaml")
    assert not is_layout(tmp_path / "f.yaml")
    assert not is_layout(tmp_path / "bad.yaml")  # the flow loader reports it, with its position
    assert not is_layout(tmp_path / "x.flo")
    assert not is_layout(tmp_path / "missing.yaml")


def test_flow_options_are_refused_for_a_layout(estates, capsys):
    from flowcast.cli.main import main

    tmp_path, _ = estates
    assert main(["run", str(tmp_path / "alpha.yaml"), "--virtual", "--until", "3"]) == 2
    assert "--until, --virtual apply to a flow script" in capsys.readouterr().err


def test_a_house_routes_as_one_yard_only(estates):
    from flowcast.routing.wiring import wire_router

    tmp_path, _ = estates
    house = open_house(load_layout(tmp_path / "beta.yaml"), "w1", houses=2)
    try:
        assert wire_router(house, estate="beta", yard="w1") is house.router
        with pytest.raises(ValueError, match="already routes as yard 'w1'"):
            wire_router(house, estate="gamma", yard="manor")
    finally:
        house.stop()
        house.run()
