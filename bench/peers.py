"""What flowcast's transport is measured against: the physical limit and the peers.

A transport figure means little alone.  Each function here measures one
yardstick with two processes on loopback and returns its figures, so
``bench/road.py`` and ``bench/lane.py`` can print them from the same run
and give ratios:

* the **limit** -- raw ``sendto``/``recvfrom`` on UDP and Unix datagrams,
  no protocol at all (:func:`raw_udp`, :func:`raw_uxd`);
* **what users pick today** -- ZeroMQ PUSH/PULL over TCP, plain and with
  CURVE encryption, and REQ/REP round trips (:func:`zmq_pushpull`,
  :func:`zmq_reqrep`);
* **the protocol's reference implementation** -- raet 0.6.8's RoadStack and
  LaneStack (:func:`raet_road`, :func:`raet_lane`), used only as a peer to
  measure, never as code to borrow.

Every function returns ``{name: {"value": float | None, "unit": str,
"note": str}}``.  A peer that fails or overruns its deadline gives
``value: None`` and the reason in ``note`` -- a benchmark must report, not
hang: every loop is bounded by a count *and* a deadline, and a child
process that does not answer in time is terminated.

Throughput is counted at the receiver, from the moment the sender started
to the moment the last message arrived (``time.monotonic`` is one clock for
every process on the machine), so a sender that merely fills buffers gets
no credit.  Datagram figures also report what was lost.

The second process is *spawned* (a fresh interpreter: no inherited
threads, sockets or zmq contexts), so a script that calls these functions
must keep its top level under ``if __name__ == "__main__":``.

Run: ``.venv/bin/python bench/peers.py [--json] [--quick] [--repeats N]
[--only NAME ...]``.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, parser  # noqa: E402

__all__ = [
    "PEERS",
    "PeerFailed",
    "all_peers",
    "raet_lane",
    "raet_road",
    "raw_udp",
    "raw_uxd",
    "zmq_pushpull",
    "zmq_reqrep",
]

Result = dict[str, dict[str, Any]]

_BUFFER = 8 * 1024 * 1024
_KIB64 = 64 * 1024
_UDP64 = 65507  # the largest UDP payload over IPv4: "64 KiB" for raw UDP
_START_TIMEOUT = 20.0  # a spawned child imports Python, zmq or raet first
#: Seconds a sender keeps sending (``quick``: a tenth).  Counts are only
#: ceilings: on a slow or busy machine the budget ends a run first, so a
#: figure takes about this long whatever the peer's speed.
BUDGET = 1.5
RAET_BUDGET = 3.0
#: How long past its budget a run may take (draining, acks) before it is
#: cut off; what overruns that is a failed figure, not a hang.
_GRACE = 5.0


class PeerFailed(RuntimeError):
    """A measurement could not be made; the message says why."""


def _figure(value: float | None, unit: str, note: str = "") -> dict[str, Any]:
    return {"value": value, "unit": unit, "note": note}


def _failed(names: dict[str, str], reason: str) -> Result:
    return {name: _figure(None, unit, reason) for name, unit in names.items()}


def _big_buffers(sock: socket.socket) -> None:
    for force, plain in ((32, socket.SO_SNDBUF), (33, socket.SO_RCVBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, _BUFFER)
        except OSError:
            try:
                sock.setsockopt(socket.SOL_SOCKET, plain, _BUFFER)
            except OSError:
                pass


# -- two processes ----------------------------------------------------------------


def _child_main(target: Callable[..., Any], conn: Any, args: tuple) -> None:
    try:
        target(conn, *args)
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        try:
            conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=3)))
        except OSError:
            pass


def _pair(
    server: Callable[..., Any],
    client: Callable[..., Any],
    args: tuple,
    timeout: float | None = None,
) -> tuple[Any, Any]:
    """Run ``server(conn, *args)`` in a child and ``client(address, *args)`` here.

    The server sends ``("ready", address)`` once bound, then ``("done",
    result)``.  Returns ``(server result, client result)``; raises
    :class:`PeerFailed` with the reason if either side fails or overruns.
    ``args`` ends with the budget; ``timeout`` defaults to budget + grace.
    """
    if timeout is None:
        timeout = args[-1] + 2 * _GRACE
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child_main, args=(server, child, args), daemon=True)
    proc.start()
    child.close()
    try:
        kind, address = _expect(parent, "ready", _START_TIMEOUT, proc)
        client_result = client(address, *args)
        _, server_result = _expect(parent, "done", timeout, proc)
        return server_result, client_result
    finally:
        parent.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _expect(conn: Any, kind: str, timeout: float, proc: Any) -> tuple[str, Any]:
    if not conn.poll(timeout):
        raise PeerFailed(f"peer process gave no {kind!r} within {timeout:.0f} s")
    try:
        message = conn.recv()
    except EOFError:
        raise PeerFailed(f"peer process died (exit code {proc.exitcode})") from None
    if message[0] == "error":
        raise PeerFailed(f"peer process failed: {message[1]}")
    if message[0] != kind:
        raise PeerFailed(f"peer process said {message[0]!r}, expected {kind!r}")
    return message


def _guarded(names: dict[str, str], measure: Callable[[], Result], repeats: int = 1) -> Result:
    """Best of ``repeats`` runs of ``measure`` (fastest rate, shortest time);
    a failure becomes ``value: None`` with the reason, never an exception."""
    best: Result = {}
    for _ in range(max(1, repeats)):
        try:
            result = measure()
        except PeerFailed as error:
            result = _failed(names, str(error))
        except Exception as error:  # noqa: BLE001 - a peer that breaks is a figure of n/a
            result = _failed(names, f"{type(error).__name__}: {error}")
        for name, figure in result.items():
            held = best.get(name)
            if held is None or held["value"] is None:
                best[name] = figure
            elif figure["value"] is not None:
                lower = figure["unit"] == "us"
                if (figure["value"] < held["value"]) if lower else (figure["value"] > held["value"]):
                    best[name] = figure
    if repeats > 1:
        for figure in best.values():
            figure["note"] = (figure["note"] + "; " if figure["note"] else "") + f"best of {repeats}"
    return best


# -- raw datagrams: the limit --------------------------------------------------------


def _dgram_sink(conn: Any, family: int, size: int, count: int, budget: float) -> None:
    """Count datagrams until ``count`` arrived, the sender went quiet, or time is up."""
    tmp = None
    sock = socket.socket(family, socket.SOCK_DGRAM)
    _big_buffers(sock)
    if family == socket.AF_UNIX:
        tmp = tempfile.mkdtemp(prefix="fcpeer-")
        sock.bind(os.path.join(tmp, "sink"))
    else:
        sock.bind(("127.0.0.1", 0))
    # Non-blocking reads, select only when the queue is empty: measured
    # here no slower than blocking reads, and it bounds every wait.
    sock.setblocking(False)
    conn.send(("ready", sock.getsockname()))
    buf = bytearray(size + 1)
    recv_into = sock.recv_into
    clock = time.monotonic
    received = 0
    total = 0
    first = last = None
    end = clock() + budget + _GRACE
    while received < count:
        try:
            n = recv_into(buf)
        except BlockingIOError:
            now = clock()
            if received:
                last = now  # the queue just ran dry: the latest arrival was now
            # A quarter second of quiet after traffic began ends the run:
            # the sender is done, and UDP may have lost the rest.
            wait = min(0.25, end - now) if received else end - now
            if wait <= 0 or not select.select([sock], [], [], wait)[0]:
                break
            continue
        if n == 0:  # the sender's end marker (Unix datagrams lose nothing)
            last = clock()
            break
        received += 1
        total += n
        if first is None:
            first = clock()
    else:
        last = clock()
    sock.close()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    conn.send(("done", {"received": received, "bytes": total, "first": first, "last": last}))


def _dgram_source(address: Any, family: int, size: int, count: int, budget: float) -> dict[str, Any]:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    _big_buffers(sock)
    payload = b"\x5a" * size
    sendto = sock.sendto
    start = time.monotonic()
    end = start + budget
    sent = 0
    # Blocking sends: a full Unix-datagram queue makes the sender wait,
    # which is the fastest honest pace; UDP simply drops what overflows.
    while sent < count:
        burst = min(256, count - sent)
        for _ in range(burst):
            sendto(payload, address)
        sent += burst
        if time.monotonic() > end:
            break
    if family == socket.AF_UNIX:
        sendto(b"", address)
    sock.close()
    return {"sent": sent, "start": start}


def _gro_sink(conn: Any, size: int, count: int, budget: float) -> None:
    """Like :func:`_dgram_sink` for UDP, letting the kernel join arriving runs (GRO)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _big_buffers(sock)
    sock.setsockopt(17, 104, 1)  # SOL_UDP, UDP_GRO
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    conn.send(("ready", sock.getsockname()))
    recvmsg = sock.recvmsg
    space = socket.CMSG_SPACE(4)
    clock = time.monotonic
    received = total = 0
    first = last = None
    end = clock() + budget + _GRACE
    while received < count:
        try:
            data, ancillary, _, _ = recvmsg(65536, space)
        except BlockingIOError:
            now = clock()
            if received:
                last = now
            wait = min(0.25, end - now) if received else end - now
            if wait <= 0 or not select.select([sock], [], [], wait)[0]:
                break
            continue
        joined = size
        for level, kind, value in ancillary:
            if level == 17 and kind == 104:
                joined = struct.unpack("=i", value[:4])[0]
        received += -(-len(data) // joined)
        total += len(data)
        if first is None:
            first = clock()
    else:
        last = clock()
    sock.close()
    conn.send(("done", {"received": received, "bytes": total, "first": first, "last": last}))


def _gso_source(address: Any, size: int, count: int, budget: float) -> dict[str, Any]:
    """Send runs of ``size``-byte datagrams, the kernel splitting them (GSO)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _big_buffers(sock)
    per_call = min(64, _UDP64 // size)
    run = memoryview(b"\x5a" * (size * per_call))
    cmsg = [(17, 103, struct.pack("=H", size))]  # SOL_UDP, UDP_SEGMENT
    sendmsg = sock.sendmsg
    start = time.monotonic()
    end = start + budget
    sent = 0
    while sent < count:
        for _ in range(16):
            sendmsg((run,), cmsg, 0, address)
        sent += 16 * per_call
        if time.monotonic() > end:
            break
    sock.close()
    return {"sent": sent, "start": start}


def _stream_figure(server: dict[str, Any], client: dict[str, Any], what: str) -> tuple[float | None, str]:
    received = server["received"]
    if not received or server["last"] is None:
        return None, "nothing arrived"
    elapsed = server["last"] - client["start"]
    lost = client["sent"] - received
    note = f"{received} of {client['sent']} delivered in {elapsed:.2f} s"
    if lost > 0:
        note += f", {lost / client['sent']:.1%} lost"
    if what == "msgs":
        return received / elapsed, note
    return server["bytes"] / elapsed / 1e6, note


def _echo_server(conn: Any, family: int, size: int, count: int, budget: float) -> None:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    conn.send(("ready", sock.getsockname()))
    end = time.monotonic() + budget + _GRACE
    echoed = 0
    while echoed <= count:
        left = end - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], min(left, 2.0))[0]:
            break
        data, source = sock.recvfrom(size + 1)
        if not data:
            break
        sock.sendto(data, source)
        echoed += 1
    sock.close()
    conn.send(("done", {"echoed": echoed}))


def _echo_client(address: Any, family: int, size: int, count: int, budget: float) -> dict[str, Any]:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    payload = b"\x5a" * size
    times = []
    lost = 0
    end = time.monotonic() + budget
    clock = time.perf_counter
    for _ in range(count):
        if time.monotonic() > end:
            break
        start = clock()
        sock.sendto(payload, address)
        # Wait the way a peer waiting for its answer does: asleep in the OS.
        if not select.select([sock], [], [], 1.0)[0]:
            lost += 1
            continue
        sock.recv(size + 1)
        times.append(clock() - start)
    sock.sendto(b"", address)
    sock.close()
    return {"times": times, "lost": lost}


def _rtt_figure(name: str, client: dict[str, Any]) -> Result:
    times = client["times"]
    if not times:
        raise PeerFailed("no answer came back")
    note = f"median of {len(times)}"
    if client.get("lost"):
        note += f", {client['lost']} lost"
    return {name: _figure(statistics.median(times) * 1e6, "us", note)}


def raw_udp(quick: bool = False, repeats: int = 1) -> Result:
    """Raw UDP between two processes: 100 B msgs/s, 64 KiB MB/s, 100 B round
    trip, and 1,200-byte datagrams one call each and with GSO/GRO."""
    budget = BUDGET / 10 if quick else BUDGET

    def small() -> Result:
        srv, cli = _pair(_dgram_sink, _dgram_source, (socket.AF_INET, 100, 1_000_000, budget))
        value, note = _stream_figure(srv, cli, "msgs")
        return {"udp_100B": _figure(value, "msgs/s", note)}

    def large() -> Result:
        srv, cli = _pair(_dgram_sink, _dgram_source, (socket.AF_INET, _UDP64, 100_000, budget))
        value, note = _stream_figure(srv, cli, "bytes")
        return {"udp_64KiB": _figure(value, "MB/s", note + f"; {_UDP64} B datagrams")}

    def rtt() -> Result:
        _, cli = _pair(_echo_server, _echo_client, (socket.AF_INET, 100, 20_000, budget))
        return _rtt_figure("udp_rtt_100B", cli)

    def internet(name: str, server: Callable[..., Any], client: Callable[..., Any]) -> Callable[[], Result]:
        # 1,200-byte datagrams: the size internet paths carry unfragmented.
        def measure() -> Result:
            args = (1200, 10_000_000, budget)
            if server is _dgram_sink:
                args = (socket.AF_INET, *args)
            srv, cli = _pair(server, client, args)
            value, note = _stream_figure(srv, cli, "bytes")
            if value is not None:
                note += f"; {value * 1e6 / 1200:,.0f} datagrams/s"
            return {name: _figure(value, "MB/s", note)}

        return measure

    out = _guarded({"udp_100B": "msgs/s"}, small, repeats)
    out.update(_guarded({"udp_64KiB": "MB/s"}, large, repeats))
    out.update(_guarded({"udp_rtt_100B": "us"}, rtt, repeats))
    out.update(_guarded({"udp_1200B": "MB/s"}, internet("udp_1200B", _dgram_sink, _dgram_source), repeats))
    out.update(
        _guarded({"udp_1200B_gso_gro": "MB/s"}, internet("udp_1200B_gso_gro", _gro_sink, _gso_source), repeats)
    )
    return out


def _uxd_sink(conn: Any, size: int, count: int, budget: float) -> None:
    _dgram_sink(conn, socket.AF_UNIX, size, count, budget)


def _uxd_source(address: Any, size: int, count: int, budget: float) -> dict[str, Any]:
    return _dgram_source(address, socket.AF_UNIX, size, count, budget)


def raw_uxd(quick: bool = False, repeats: int = 1) -> Result:
    """Raw Unix datagrams between two processes: 100 B msgs/s."""
    budget = BUDGET / 10 if quick else BUDGET

    def run() -> Result:
        srv, cli = _pair(_uxd_sink, _uxd_source, (100, 2_000_000, budget))
        value, note = _stream_figure(srv, cli, "msgs")
        return {"uxd_100B": _figure(value, "msgs/s", note)}

    return _guarded({"uxd_100B": "msgs/s"}, run, repeats)


# -- ZeroMQ: what users pick today -------------------------------------------------------


def _zmq_pull(conn: Any, keys: tuple[bytes, bytes] | None, size: int, count: int, budget: float) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        sock.curve_server = True
        sock.curve_publickey = keys[0]
        sock.curve_secretkey = keys[1]
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    conn.send(("ready", f"tcp://127.0.0.1:{port}"))
    end = time.monotonic() + budget + _GRACE
    received = -1  # the sender's first message only opens the connection
    total = 0
    last = None
    recv = sock.recv
    copy = size < 1024
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while received < count:
        try:
            data = recv(zmq.NOBLOCK, copy=copy)
        except zmq.Again:
            left = end - time.monotonic()
            if left <= 0 or not poller.poll(min(left, 2.0) * 1000):
                break
            continue
        if not len(data):  # the end marker
            break
        received += 1
        total += len(data)
        last = time.monotonic()
    sock.close()
    ctx.term()
    conn.send(("done", {"received": max(0, received), "bytes": total - size, "first": None, "last": last}))


def _zmq_push(address: str, keys: tuple[bytes, bytes] | None, size: int, count: int, budget: float) -> dict[str, Any]:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, int(_GRACE * 1000))
    sock.setsockopt(zmq.SNDTIMEO, int((budget + _GRACE) * 1000))
    if keys is not None:
        public, secret = zmq.curve_keypair()
        sock.curve_serverkey = keys[0]
        sock.curve_publickey = public
        sock.curve_secretkey = secret
    sock.connect(address)
    payload = b"\x5a" * size
    copy = size < 1024
    send = sock.send
    sent = 0
    try:
        # The first message waits for the connection (and CURVE handshake):
        # the clock starts after it.
        send(payload)
        start = time.monotonic()
        end = start + budget
        while sent < count:
            send(payload, copy=copy)
            sent += 1
            if not sent & 1023 and time.monotonic() > end:
                break
        send(b"")
    except zmq.Again:
        raise PeerFailed("zmq send timed out") from None
    finally:
        sock.close()
        ctx.term()
    return {"sent": sent, "start": start}


def zmq_pushpull(curve: bool = False, quick: bool = False, repeats: int = 1) -> Result:
    """ZeroMQ PUSH/PULL over loopback TCP: 100 B msgs/s and 64 KiB MB/s."""
    suffix = "_curve" if curve else ""
    small_name, large_name = f"zmq_tcp{suffix}_100B", f"zmq_tcp{suffix}_64KiB"
    try:
        import zmq
    except ImportError as error:
        return _failed({small_name: "msgs/s", large_name: "MB/s"}, f"pyzmq missing: {error}")
    keys = zmq.curve_keypair() if curve else None
    budget = BUDGET / 10 if quick else BUDGET

    def run(size: int, count: int, name: str, what: str) -> Callable[[], Result]:
        def measure() -> Result:
            srv, cli = _pair(_zmq_pull, _zmq_push, (keys, size, count, budget))
            value, note = _stream_figure(srv, cli, what)
            return {name: _figure(value, "msgs/s" if what == "msgs" else "MB/s", note)}

        return measure

    out = _guarded({small_name: "msgs/s"}, run(100, 5_000_000, small_name, "msgs"), repeats)
    out.update(_guarded({large_name: "MB/s"}, run(_KIB64, 200_000, large_name, "bytes"), repeats))
    return out


def _zmq_rep(conn: Any, size: int, count: int, budget: float) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    conn.send(("ready", f"tcp://127.0.0.1:{port}"))
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    end = time.monotonic() + budget + _GRACE
    answered = 0
    while answered <= count + 1:
        left = end - time.monotonic()
        if left <= 0 or not poller.poll(min(left, 2.0) * 1000):
            break
        data = sock.recv()
        sock.send(data)
        answered += 1
        if not data:
            break
    sock.close()
    ctx.term()
    conn.send(("done", {"answered": answered}))


def _zmq_req(address: str, size: int, count: int, budget: float) -> dict[str, Any]:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 2000)
    sock.connect(address)
    payload = b"\x5a" * size
    times = []
    clock = time.perf_counter
    try:
        sock.send(payload)  # connect before timing
        sock.recv()
        end = time.monotonic() + budget
        for _ in range(count):
            if time.monotonic() > end:
                break
            start = clock()
            sock.send(payload)
            sock.recv()
            times.append(clock() - start)
        sock.send(b"")
        sock.recv()
    except zmq.Again:
        pass
    finally:
        sock.close()
        ctx.term()
    return {"times": times}


def zmq_reqrep(quick: bool = False, repeats: int = 1) -> Result:
    """ZeroMQ REQ/REP over loopback TCP: 100 B round trip, median."""
    budget = BUDGET / 10 if quick else BUDGET

    def run() -> Result:
        _, cli = _pair(_zmq_rep, _zmq_req, (100, 20_000, budget))
        return _rtt_figure("zmq_reqrep_rtt_100B", cli)

    return _guarded({"zmq_reqrep_rtt_100B": "us"}, run, repeats)


# -- raet 0.6.8: the protocol's reference implementation ------------------------------------


def _raet_import() -> Any:
    """Import raet on Python 3.10+, where it needs the pre-3.10 collections aliases."""
    import collections
    import collections.abc

    for name in ("Mapping", "MutableMapping", "Sequence", "MutableSequence", "Iterable", "Callable", "Set", "MutableSet", "Hashable"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))
    import raet.raeting  # noqa: F401
    from ioflo.aid import consoling as aid_consoling
    from ioflo.base import consoling as base_consoling

    for consoling in (aid_consoling, base_consoling):  # raet logs through both
        console = consoling.getConsole()
        console.reinit(verbosity=console.Wordage.mute)
    import raet
    import raet.keeping
    import raet.lane.paging
    import raet.road.packeting

    # json.loads and msgpack lost their ``encoding`` argument (Python 3.9,
    # msgpack 1.0); raet still passes it.  Give its modules codecs that
    # drop it -- in raet's namespaces only, never globally.
    for module in (raet.keeping, raet.lane.paging, raet.road.packeting):
        for name in ("json", "msgpack"):
            codec = getattr(module, name, None)
            if codec is not None and not isinstance(codec, _NoEncoding):
                setattr(module, name, _NoEncoding(codec))
    return raet


class _NoEncoding:
    """A codec module whose functions ignore the removed ``encoding`` argument."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if not callable(attr) or name not in ("loads", "dumps", "load", "dump"):
            return attr

        def call(*args: Any, encoding: Any = None, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call


def _raet_road(name: str, base: str, main: bool) -> Any:
    _raet_import()
    from ioflo.base.storing import Store
    from raet import nacling, raeting
    from raet.road import stacking

    store = Store(stamp=0.0)
    return stacking.RoadStack(
        store=store,
        name=name,
        main=main or None,
        auto=raeting.AutoMode.always.value,
        ha=("127.0.0.1", 0),
        sigkey=nacling.Signer().keyhex,
        prikey=nacling.Privateer().keyhex,
        dirpath=os.path.join(base, name),
    )


def _raet_clock(stack: Any, origin: float) -> None:
    """raet's timers read its store's stamp: keep it on the wall clock."""
    stack.store.changeStamp(time.monotonic() - origin)


def _raet_wait(stack: Any, origin: float, done: Callable[[], bool], until: float, nap: float = 0.001) -> bool:
    """Service ``stack`` until ``done()`` or ``until``; True if done."""
    while time.monotonic() < until:
        _raet_clock(stack, origin)
        stack.serviceAll()
        if done():
            return True
        if not stack.rxes:
            select.select([stack.server.ss], [], [], nap)
    return done()


def _raet_road_server(conn: Any, mode: str, size: int, count: int, budget: float) -> None:
    base = tempfile.mkdtemp(prefix="fcraet-")
    stack = None
    try:
        stack = _raet_road("main", base, True)
        origin = time.monotonic()
        conn.send(("ready", stack.ha))
        end = origin + budget + 2 * _GRACE
        received = 0
        total = 0
        last = None
        stopped = False
        rx = stack.rxMsgs
        while not stopped and time.monotonic() < end:
            _raet_clock(stack, origin)
            stack.serviceAll()
            while rx:
                body, source = rx.popleft()
                if "stop" in body:
                    stopped = True
                    break
                received += 1
                total += size
                last = time.monotonic()
                if mode == "echo":
                    stack.transmit(body, stack.fetchUidByName(source))
            if not rx and not stack.txes and not stack.txMsgs:
                select.select([stack.server.ss], [], [], 0.001)
        # Keep answering a moment, so the sender's stop transaction completes.
        _raet_wait(stack, origin, lambda: False, time.monotonic() + 0.2, 0.005)
        conn.send(("done", {"received": received, "bytes": total, "first": None, "last": last}))
    finally:
        if stack is not None:
            stack.server.close()
        shutil.rmtree(base, ignore_errors=True)


def _raet_road_client(address: Any, mode: str, size: int, count: int, budget: float) -> dict[str, Any]:
    _raet_import()
    from raet.road import estating

    base = tempfile.mkdtemp(prefix="fcraet-")
    stack = _raet_road("other", base, False)
    origin = time.monotonic()
    setup = origin + _GRACE
    try:
        stack.addRemote(estating.RemoteEstate(stack=stack, fuid=0, sid=0, ha=tuple(address)))
        stack.join()
        remote = next(iter(stack.remotes.values()))
        if not _raet_wait(stack, origin, lambda: bool(stack.remotes) and next(iter(stack.remotes.values())).joined, setup):
            raise PeerFailed("raet join did not complete")
        remote = next(iter(stack.remotes.values()))
        stack.allow(uid=remote.uid)
        if not _raet_wait(stack, origin, lambda: remote.allowed, setup):
            raise PeerFailed("raet allow did not complete")
        body = {"data": "x" * size}
        uid = remote.uid
        start = time.monotonic()
        end = start + budget
        if mode == "echo":
            result = _raet_echo(stack, uid, body, count, end, origin)
        else:
            # A window of transactions in flight: raet has no flow control,
            # and queuing everything at once overflows the receiver and
            # multiplies resends (NOTES.md) -- this is raet at its best.
            window = 32 if size <= 1024 else 2
            sent = 0
            rxes = stack.rxes
            while sent < count and time.monotonic() < end:
                _raet_clock(stack, origin)
                while sent < count and len(stack.transactions) + len(stack.txMsgs) < window:
                    stack.transmit(dict(body), uid)
                    sent += 1
                stack.serviceAll()
                if not rxes:
                    select.select([stack.server.ss], [], [], 0.0005)
            result = {"sent": sent, "start": start}
        # Let what is in flight finish, then tell the server to stop.
        _raet_wait(stack, origin, lambda: not stack.transactions and not stack.txMsgs, time.monotonic() + _GRACE)
        stack.transmit({"stop": 1}, uid)
        _raet_wait(stack, origin, lambda: not stack.transactions and not stack.txMsgs, time.monotonic() + _GRACE)
        return result
    finally:
        stack.server.close()
        shutil.rmtree(base, ignore_errors=True)


def _raet_echo(stack: Any, uid: int, body: dict, count: int, end: float, origin: float) -> dict[str, Any]:
    times = []
    clock = time.perf_counter
    rx = stack.rxMsgs
    for _ in range(count):
        if time.monotonic() > end:
            break
        start = clock()
        stack.transmit(dict(body), uid)
        if _raet_wait(stack, origin, lambda: bool(rx), end + _GRACE):
            rx.popleft()
            times.append(clock() - start)
    return {"times": times}


def raet_road(quick: bool = False, repeats: int = 1) -> Result:
    """raet 0.6.8 RoadStack: 100 B msgs/s one way, 64 KiB MB/s, 100 B echo round trip."""
    budget = RAET_BUDGET / 10 if quick else RAET_BUDGET

    def stream(size: int, name: str, what: str, unit: str) -> Callable[[], Result]:
        def measure() -> Result:
            _raet_import()
            srv, cli = _pair(_raet_road_server, _raet_road_client, ("stream", size, 100_000, budget))
            value, note = _stream_figure(srv, cli, what)
            return {name: _figure(value, unit, note)}

        return measure

    def echo() -> Result:
        _raet_import()
        _, cli = _pair(_raet_road_server, _raet_road_client, ("echo", 100, 10_000, budget))
        return _rtt_figure("raet_road_rtt_100B", cli)

    out = _guarded({"raet_road_100B": "msgs/s"}, stream(100, "raet_road_100B", "msgs", "msgs/s"), repeats)
    out.update(_guarded({"raet_road_64KiB": "MB/s"}, stream(_KIB64, "raet_road_64KiB", "bytes", "MB/s"), repeats))
    out.update(_guarded({"raet_road_rtt_100B": "us"}, echo, repeats))
    return out


def _raet_lane(name: str, base: str) -> Any:
    _raet_import()
    from raet.lane import stacking

    return stacking.LaneStack(name=name, uid=1, lanename="bench", sockdirpath=base)


def _raet_lane_server(conn: Any, base: str, size: int, count: int, budget: float) -> None:
    stack = _raet_lane("main", base)
    try:
        conn.send(("ready", stack.ha))
        end = time.monotonic() + budget + _GRACE
        received = 0
        last = None
        rx = stack.rxMsgs
        stopped = False
        while not stopped and time.monotonic() < end:
            stack.serviceAll()
            if not rx:
                select.select([stack.server.ss], [], [], 0.01)
                continue
            while rx:
                body, _ = rx.popleft()
                if "stop" in body:
                    stopped = True
                    break
                received += 1
            last = time.monotonic()
        conn.send(("done", {"received": received, "bytes": received * size, "first": None, "last": last}))
    finally:
        stack.server.close()


def _raet_lane_client(address: str, base: str, size: int, count: int, budget: float) -> dict[str, Any]:
    _raet_import()
    from raet.lane import yarding

    stack = _raet_lane("other", base)
    try:
        remote = yarding.RemoteYard(stack=stack, ha=address)
        stack.addRemote(remote)
        body = {"data": "x" * size}
        sent = 0
        start = time.monotonic()
        end = start + budget

        def flushed() -> bool:
            stack.serviceAll()
            return not stack.txes and not stack.txMsgs

        while sent < count and time.monotonic() < end:
            # Eight at a time: the Unix-datagram queue holds ten, and raet
            # keeps what could not be sent for its next service.
            while sent < count and len(stack.txes) + len(stack.txMsgs) < 8:
                stack.transmit(dict(body), remote.uid)
                sent += 1
            stack.serviceAll()
        stack.transmit({"stop": 1}, remote.uid)
        drain = time.monotonic() + _GRACE
        while not flushed() and time.monotonic() < drain:
            pass  # raet has no way to wait for a Unix-datagram queue to drain
        return {"sent": sent, "start": start}
    finally:
        stack.server.close()


def raet_lane(quick: bool = False, repeats: int = 1) -> Result:
    """raet 0.6.8 LaneStack (Unix datagrams): 100 B msgs/s."""
    budget = RAET_BUDGET / 10 if quick else RAET_BUDGET

    def run() -> Result:
        _raet_import()
        base = tempfile.mkdtemp(prefix="fclane-")
        try:
            srv, cli = _pair(_raet_lane_server, _raet_lane_client, (base, 100, 1_000_000, budget))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        value, note = _stream_figure(srv, cli, "msgs")
        return {"raet_lane_100B": _figure(value, "msgs/s", note)}

    return _guarded({"raet_lane_100B": "msgs/s"}, run, repeats)


# -- everything ------------------------------------------------------------------------------

#: Name -> measuring function (each takes ``quick`` and ``repeats``).
PEERS: dict[str, Callable[..., Result]] = {
    "udp": raw_udp,
    "uxd": raw_uxd,
    "zmq": lambda quick=False, repeats=1: zmq_pushpull(False, quick, repeats),
    "zmq_curve": lambda quick=False, repeats=1: zmq_pushpull(True, quick, repeats),
    "zmq_reqrep": zmq_reqrep,
    "raet_road": raet_road,
    "raet_lane": raet_lane,
}


def all_peers(quick: bool = False, only: list[str] | None = None, repeats: int = 1) -> Result:
    """Every peer figure (or those of the ``only`` groups), in a stable order."""
    out: Result = {}
    for name, measure in PEERS.items():
        if only and name not in only:
            continue
        out.update(measure(quick=quick, repeats=repeats))
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", choices=sorted(PEERS), help="measure only these groups")
    p.set_defaults(repeats=1)  # every figure already runs for about a second
    args = p.parse_args(argv)
    figures = Figures("peers", quick=args.quick, repeats=args.repeats)
    for name, fig in all_peers(args.quick, args.only, args.repeats).items():
        figures.add(name, fig["value"], fig["unit"], note=fig["note"])
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
