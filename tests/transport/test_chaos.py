"""The chaos relay: real UDP on loopback, faults applied and counted."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from flowcast.transport.chaos import ChaosRelay, main, parse_endpoint
from flowcast.transport.ports import UdpPort


@pytest.fixture
def server():
    port = UdpPort()
    yield port
    port.close()


@pytest.fixture
def client():
    port = UdpPort()
    yield port
    port.close()


def receive(port, want, timeout=5.0):
    """Datagrams arriving at ``port`` until ``want`` came or ``timeout`` passed."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        select.select([port], [], [], left)
        got.extend(port.receive_many(want - len(got)))
    return got


def relay_for(server, **faults):
    return ChaosRelay(("127.0.0.1", 0), server.address, seed=1, **faults).start()


def test_relays_both_ways_in_order_without_faults(server, client):
    with relay_for(server) as relay:
        for i in range(100):
            assert client.send(b"up %d" % i, relay.address)
        got = receive(server, 100)
        assert [d for d, _ in got] == [b"up %d" % i for i in range(100)]
        upstream = {source for _, source in got}
        assert upstream == {relay.upstream_address(client.address)}
        assert upstream != {client.address}
        for data, source in got:
            server.send(data.replace(b"up", b"down"), source)
        back = receive(client, 100)
        assert [d for d, _ in back] == [b"down %d" % i for i in range(100)]
        assert {source for _, source in back} == {relay.address}
        assert relay.wait_for(lambda: relay.counts["down_forwarded"] == 100, 5.0)
        assert relay.counts["up_received"] == relay.counts["up_forwarded"] == 100
        assert relay.counts["clients"] == 1
    assert relay.error is None


def test_each_client_has_its_own_upstream_and_gets_its_own_replies(server, client):
    other = UdpPort()
    try:
        with relay_for(server) as relay:
            client.send(b"from one", relay.address)
            other.send(b"from two", relay.address)
            got = dict(receive(server, 2))
            assert set(got) == {b"from one", b"from two"}
            assert got[b"from one"] != got[b"from two"]
            for data, source in got.items():
                server.send(b"re: " + data, source)
            assert [d for d, _ in receive(client, 1)] == [b"re: from one"]
            assert [d for d, _ in receive(other, 1)] == [b"re: from two"]
            assert client.receive() is None and other.receive() is None
    finally:
        other.close()


def test_loss_is_applied_and_counted(server, client):
    with relay_for(server, loss=0.3) as relay:
        for i in range(1000):
            client.send(b"%d" % i, relay.address)
        assert relay.wait_for(lambda: relay.counts["up_received"] == 1000, 5.0)
        forwarded = relay.counts["up_forwarded"]
        got = receive(server, forwarded)
        assert len(got) == forwarded == 1000 - relay.counts["lost"]
        assert 200 <= relay.counts["lost"] <= 400
        numbers = [int(d) for d, _ in got]
        assert numbers == sorted(numbers)


def test_duplication_and_corruption(server, client):
    originals = [bytes([i]) * 64 for i in range(50)]
    with relay_for(server, duplicate=1.0, corrupt=1.0) as relay:
        for data in originals:
            client.send(data, relay.address)
        got = [d for d, _ in receive(server, 100)]
        assert len(got) == 100
        assert relay.counts["duplicated"] == relay.counts["corrupted"] == 50
        for sent, (first, second) in zip(originals, zip(got[::2], got[1::2])):
            assert first == second != sent  # one corrupted datagram, sent twice
            assert 1 <= sum(bin(x ^ y).count("1") for x, y in zip(sent, first)) <= 3


def test_reordering_lets_later_datagrams_overtake(server, client):
    with relay_for(server, reorder=0.3, reorder_window=0.05) as relay:
        for i in range(300):
            client.send(b"%03d" % i, relay.address)
        got = [d for d, _ in receive(server, 300)]
        assert sorted(got) == [b"%03d" % i for i in range(300)]
        assert sum(1 for x, y in zip(got, got[1:]) if x > y) > 10
        assert relay.counts["reordered"] > 50


def test_delay_holds_datagrams_back(server, client):
    with relay_for(server, delay=0.05) as relay:
        start = time.monotonic()
        client.send(b"slow", relay.address)
        assert [d for d, _ in receive(server, 1)] == [b"slow"]
        assert time.monotonic() - start >= 0.05


def test_strangers_cannot_inject_through_an_upstream_socket(server, client):
    stranger = UdpPort()
    try:
        with relay_for(server) as relay:
            client.send(b"hello", relay.address)
            (_, upstream), = receive(server, 1)
            stranger.send(b"spoof", upstream)
            assert relay.wait_for(lambda: relay.counts["stray"] == 1, 5.0)
            server.send(b"genuine", upstream)
            assert [d for d, _ in receive(client, 1)] == [b"genuine"]
            assert client.receive() is None
    finally:
        stranger.close()


def test_too_many_clients_recycles_the_oldest(server):
    clients = [UdpPort() for _ in range(4)]
    try:
        relay = ChaosRelay(("127.0.0.1", 0), server.address, max_clients=2).start()
        with relay:
            for c in clients:
                c.send(b"x", relay.address)
            assert len(receive(server, 4)) == 4
            assert relay.counts["clients"] == 4
            assert relay.upstream_address(clients[0].address) is None
            assert relay.upstream_address(clients[3].address) is not None
    finally:
        for c in clients:
            c.close()


def test_command_line_relays_and_prints_counts_on_sigterm(server, client):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "flowcast.transport.chaos",
            "--listen", "127.0.0.1:0", "--forward", "%s:%d" % server.address,
            "--dup", "1.0", "--seed", "9",
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert select.select([proc.stdout], [], [], 30)[0], "relay printed nothing in 30 s"
        first = proc.stdout.readline()
        assert first.startswith("chaos: listening on 127.0.0.1:"), first + proc.stderr.read()
        port = int(first.split()[3].rsplit(":", 1)[1])
        for i in range(10):
            client.send(b"%d" % i, ("127.0.0.1", port))
        assert len(receive(server, 20)) == 20
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "up_received=10 up_forwarded=20" in out
    assert "duplicated=10" in out
    assert "overflow=0" in out


def test_close_right_after_start_stops_the_thread(server):
    for _ in range(5):
        relay = ChaosRelay(("127.0.0.1", 0), server.address).start()
        relay.close()
        assert not relay._thread.is_alive()


def test_duration_ends_the_run():
    # Forward to a port nobody uses: the run must still end on its own.
    assert main(["--listen", "127.0.0.1:0", "--forward", "127.0.0.1:9", "--duration", "0.05"]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--listen", "nowhere", "--forward", "127.0.0.1:1"],
        ["--listen", "127.0.0.1:0", "--forward", "example.com:80"],
        ["--listen", "127.0.0.1:0", "--forward", "127.0.0.1:1", "--loss", "1.5"],
        ["--listen", "127.0.0.1:0", "--forward", "127.0.0.1:1", "--delay", "9-3"],
        ["--listen", "127.0.0.1:99999", "--forward", "127.0.0.1:1"],
        ["--forward", "127.0.0.1:1"],
    ],
)
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert "error" in capsys.readouterr().err


def test_endpoint_forms():
    assert parse_endpoint("127.0.0.1:5") == ("127.0.0.1", 5)
    assert parse_endpoint("[::1]:7") == ("::1", 7)
    assert parse_endpoint("localhost:8") == ("127.0.0.1", 8)
