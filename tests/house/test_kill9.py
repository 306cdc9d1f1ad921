"""Kill -9 a worker house mid-stream: it is restarted, rejoins the lane, and
nothing the receiving estate acknowledged to the sender is lost.

beta's manor streams numbered messages over the road to ``inbox@sink.alpha``;
alpha's manor acknowledges each on the road and passes it down the lane to
the worker ``sink``, which appends every landed message to a file.  The test
SIGKILLs ``sink`` part way through.  Every message beta saw acknowledged must
be in the file afterwards (written by the first or the restarted sink; a
message the dead sink had taken but not acknowledged on the lane may appear
twice: at least once is the contract across a crash).
"""

from __future__ import annotations

import json
import os
import signal

from tests.house.estates import free_udp_port, idle_flow, lines, start_estate, stop_estate, wait_for, write_flow

N = 3000


def test_kill_9_of_a_worker_loses_nothing_acknowledged(tmp_path):
    a_port, b_port = free_udp_port(), free_udp_port()
    flows = tmp_path / "flows"
    flows.mkdir()
    landed, acked = tmp_path / "landed.jsonl", tmp_path / "acked.jsonl"
    idle_flow(flows / "idle.flo", "idle")
    write_flow(flows / "sink.flo", "sink",
               f"framer keep be active first listen\n  frame listen\n    do routeplay record from inbox with out \"{landed}\"\n")
    write_flow(flows / "stream.flo", "stream",
               "framer pour be active first go\n  frame go\n"
               f"    do routeplay stream with dst \"inbox@sink.alpha\" count {N} per_tick 60 acked \"{acked}\"\n")
    (tmp_path / "alpha.yaml").write_text(f"""
estate: alpha
roads:
  main: {{port: {a_port}, acceptance: always}}
policy:
  - {{allow: write, estate: beta, share: inbox}}
houses:
  - {{name: manor, flow: flows/idle.flo, manor: true}}
  - {{name: sink, flow: flows/sink.flo}}
""")
    (tmp_path / "beta.yaml").write_text(f"""
estate: beta
roads:
  main:
    port: {b_port}
    acceptance: always
    remotes: [{{estate: alpha, host: 127.0.0.1, port: {a_port}}}]
houses:
  - {{name: manor, flow: flows/stream.flo, manor: true}}
""")
    alpha = start_estate(tmp_path / "alpha.yaml", houses=2)
    supervisor = tmp_path / "run" / "alpha" / "supervisor.json"

    def sink() -> dict:
        try:
            houses = json.loads(supervisor.read_text())["houses"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return {}
        return next((h for h in houses if h["name"] == "sink"), {})

    first_pid = wait_for(lambda: sink().get("pid"), what="the sink house")
    beta = start_estate(tmp_path / "beta.yaml", houses=1)
    try:
        wait_for(lambda: len(lines(landed)) >= 400, what="the stream to be flowing")
        os.kill(first_pid, signal.SIGKILL)
        killed_at = len(lines(landed))
        restarted = wait_for(lambda: (s := sink()).get("restarts") == 1 and s.get("pid") not in (None, first_pid) and s,
                             what="the supervisor to restart the sink")
        assert restarted["last_exit"] == -signal.SIGKILL
        # the stream completes through the restarted sink
        wait_for(lambda: len(lines(acked)) >= N, timeout=60, what="every message to be acknowledged")
        wait_for(lambda: {m["data"]["n"] for m in lines(landed)} >= set(range(N)), timeout=30,
                 what="every acknowledged message to land")
    finally:
        b_code, b_out = stop_estate(beta)
        a_code, a_out = stop_estate(alpha)
    acked_ns = {m["n"] for m in lines(acked)}
    landed_ns = [m["data"]["n"] for m in lines(landed)]
    assert acked_ns == set(range(N))
    assert acked_ns <= set(landed_ns), "a message acknowledged to beta never landed"
    assert killed_at < N  # the kill really was mid-stream
    assert len(landed_ns) - len(set(landed_ns)) < N // 2  # redelivery is bounded to what was in flight
    assert a_code == 0, a_out
    assert b_code == 0, b_out
