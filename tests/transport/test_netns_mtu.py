"""A road between two hosts never relies on IP fragmentation (issue 15, item 1).

Two network namespaces joined by a veth pair whose MTU is 1,280 (the IPv6
minimum, the smallest any path may have).  Estate beta's road listens in
one, alpha's joins from the other and sends 64 KiB messages.  With no
``datagram_size`` given, a remote on another host gets 1,232-byte datagrams
(transport/roadmtu.py): every message arrives, and neither namespace's IP
layer fragmented or reassembled anything (``/proc/net/snmp``: FragCreates,
ReasmReqds), so no datagram exceeded the link.  The control: the same road
told to use 65,507-byte datagrams makes the kernel fragment them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.house.test_netns import MTU, REPO, Hosts, _ip, hosts  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="network namespaces are Linux-only")

MESSAGES = 5
SIZE = 65536

BETA = """
import json, sys
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.road import RoadStack
from flowcast.transport.stack import serve
keep = Keep(None); keep.ensure_local("beta")
beta = RoadStack(UdpPort(sys.argv[1], int(sys.argv[2])), keep, policy="always")
print("ready", flush=True)
got = []
def done():
    got.extend(beta.receive_many())
    return len(got) >= int(sys.argv[3])
ok = serve([beta], until=done, timeout=60)
serve([beta], timeout=0.5)  # the last acknowledgements go out
print(json.dumps({"ok": ok, "sizes": [len(m.data) for m in got], "intact": all(m.data == bytes([i % 251]) * len(m.data) for i, m in enumerate(got))}), flush=True)
beta.close()
"""

ALPHA = """
import json, sys
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.road import RoadStack
from flowcast.transport.stack import serve
keep = Keep(None); keep.ensure_local("alpha")
size = json.loads(sys.argv[5])
alpha = RoadStack(UdpPort(sys.argv[1], 0), keep, policy="always", datagram_size=size)
alpha.join((sys.argv[2], int(sys.argv[3])))
assert serve([alpha], until=lambda: alpha.is_allowed("beta"), timeout=20), "never allowed"
outs = [alpha.send_bytes(bytes([i % 251]) * int(sys.argv[6]), "beta", timeout=None) for i in range(int(sys.argv[4]))]
ok = serve([alpha], until=lambda: all(o.delivered for o in outs), timeout=60)
print(json.dumps({"ok": ok, "datagram": alpha.datagram_size, "sent": alpha.port.counts["sent"]}), flush=True)
alpha.close()
"""


def _snmp(ns: str) -> dict[str, int]:
    """The IP counters of namespace ``ns``."""
    lines = [line.split() for line in _ip("netns", "exec", ns, "cat", "/proc/net/snmp").stdout.splitlines() if line.startswith("Ip:")]
    names, values = lines[0][1:], lines[1][1:]
    return {name: int(value) for name, value in zip(names, values)}


def _run(hosts: Hosts, datagram_size: int | None, port: int) -> tuple[dict, dict]:
    beta = subprocess.Popen(["ip", "netns", "exec", hosts.b, sys.executable, "-c", BETA, hosts.addr_b, str(port), str(MESSAGES)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert beta.stdout.readline().strip() == "ready", beta.stderr.read()
        alpha = subprocess.run(
            ["ip", "netns", "exec", hosts.a, sys.executable, "-c", ALPHA, hosts.addr_a, hosts.addr_b, str(port), str(MESSAGES),
             json.dumps(datagram_size), str(SIZE)],
            cwd=REPO, capture_output=True, text=True, timeout=90)
        assert alpha.returncode == 0, alpha.stderr
        out, err = beta.communicate(timeout=90)
        assert beta.returncode == 0, err
    finally:
        if beta.poll() is None:
            beta.kill()
            beta.wait(timeout=10)
    return json.loads(alpha.stdout.splitlines()[-1]), json.loads(out.splitlines()[-1])


@pytest.fixture
def narrow(hosts: Hosts) -> Hosts:  # noqa: F811 - the imported fixture
    """The namespaces, their veths at the IPv6 minimum MTU (the fixture sets it; checked here)."""
    for ns, dev in ((hosts.a, hosts.dev_a), (hosts.b, hosts.dev_b)):
        assert f"mtu {MTU} " in _ip("-n", ns, "link", "show", "dev", dev).stdout
    return hosts


def test_between_hosts_a_road_sends_datagrams_the_path_carries_whole(narrow: Hosts) -> None:
    before = {ns: _snmp(ns) for ns in (narrow.a, narrow.b)}
    sent, got = _run(narrow, None, 7540)
    after = {ns: _snmp(ns) for ns in (narrow.a, narrow.b)}
    assert sent["ok"] and got["ok"] and got["intact"] and got["sizes"] == [SIZE] * MESSAGES
    assert sent["sent"] >= MESSAGES * (SIZE // 1232)  # 1,232-byte datagrams: at least 53 a message
    for ns in (narrow.a, narrow.b):
        assert after[ns]["FragCreates"] == before[ns]["FragCreates"], ns  # nothing was too large to send whole
        assert after[ns]["ReasmReqds"] == before[ns]["ReasmReqds"], ns  # nothing arrived in fragments


def test_the_control_loopback_sized_datagrams_are_fragmented_on_that_path(narrow: Hosts) -> None:
    before = _snmp(narrow.a)
    sent, got = _run(narrow, 65507, 7541)
    assert sent["ok"] and got["sizes"] == [SIZE] * MESSAGES  # it works here, on a lossless veth...
    assert _snmp(narrow.a)["FragCreates"] > before["FragCreates"]  # ...by fragmenting every datagram
