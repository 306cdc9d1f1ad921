"""The attacks of bench/hostile.py, one per class of issue 25, as an accepted estate sends them.

Each runs in an attacker's process (bench/_hostile_peer.py) on its own
scheduler for the seconds it is given, then answers the parent with what
it sent.  Every attack but the JOIN flood comes from an estate the victim
accepted (acceptance ``always``): its messages are sealed in a real
session, so the victim's road takes them as a peer's.  The JOIN flood
comes from fresh addresses that never prove themselves (they do not
answer cookies), and counts at its own sockets what the victim sent back.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from typing import Any, Callable, Iterator, Protocol

#: How an ``error`` report may be at most (the router's MAX_ERROR_PARCEL is 16 KiB, headers included).
ERROR_REASON = 15_000
_SEG = struct.Struct("!BBHQIII")  # the wire's SEG chunk header (flowcast.transport.wire.SEG)


class Attacker(Protocol):
    """What an attack uses of its estate (bench/_hostile_peer.Peer)."""

    scheduler: Any
    store: Any
    router: Any
    road: Any

    def reply(self, *message: Any) -> None: ...


def start_attack(peer: Attacker, kind: str, seconds: float, params: dict[str, Any]) -> Any:
    """Make attack ``kind`` (keys, messages), answer ``("armed", info)``, run it for ``seconds``; then ``("attacked", stats)``."""
    body = ATTACKS[kind](peer, params)
    peer.reply("armed", getattr(body, "info", {}))

    def run() -> Iterator[Any]:
        from flowcast.runtime import sleep

        stats: dict[str, Any] = {"kind": kind}
        end = time.monotonic() + seconds
        step = body(stats)
        try:
            while time.monotonic() < end:
                pause = next(step)
                yield sleep(max(0.0, min(pause, end - time.monotonic())))
        except StopIteration:
            pass
        stats["seconds"] = seconds
        peer.reply("attacked", stats)

    return peer.scheduler.spawn(run(), name=f"attack {kind}")


Attack = Callable[[dict[str, Any]], Iterator[float]]


def _seal(peer: Attacker, body: bytes) -> int:
    """Seal ``body`` in the live session to the victim and send it: a joined estate's datagram of its choosing."""
    remote = peer.road.remote("victim")
    _, datagram = remote.session.seal(body)
    peer.road.port.send(datagram, remote.address)
    return len(datagram)


# -- 1. big messages from an estate with no rules -----------------------------------------


def big_messages(peer: Attacker, params: dict[str, Any]) -> Attack:
    """One message of ``size`` bytes every ``every`` seconds, from an estate no rule lets write anything.

    The message is an array of empty maps, the most Python objects per
    byte msgpack can make, sent as the road's own msgpack (``road.send``,
    not a router parcel): a victim whose road decodes it before its router
    looks at the policy pays ~72 bytes of objects per byte sent.
    """
    size, every = int(params["size"]), float(params["every"])
    data = [{}] * max(1, size - 5)

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats["sent"] = stats["bytes"] = 0
        while True:
            peer.road.send(data, "victim")
            stats["sent"] += 1
            stats["bytes"] += size
            yield every

    return body


# -- 2. CAST rewind storm (and zero-window ACKs) ----------------------------------------


def _sub(sid: bytes, pattern: str, ask: int | None) -> dict[str, Any]:
    sub: dict[str, Any] = {"sid": sid, "pattern": pattern, "cursor": 0, "lease": 60.0}
    if ask is not None:
        sub["ask"] = ask
    return sub


def rewind_storm(peer: Attacker, params: dict[str, Any]) -> Attack:
    """``subs`` subscriptions from cursor 0, each asked again with a new ``ask`` ``hz`` times a second.

    A new ``ask`` is an explicit resend request: a publisher that honours
    every one sends its whole window again each time.  The attacker never
    reports a cursor, so nothing it was sent is ever settled; with the road
    option ``receive_window`` 0 (set by the parent) its ACKs also advertise
    a zero window, so what the publisher sends waits on the victim's side.
    """
    subs, hz = int(params["subs"]), float(params["hz"])
    sids = [os.urandom(16) for _ in range(subs)]
    for n in range(subs):
        peer.store.share(f"cs{n}")

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats["subscribes"] = 0
        ask = 0
        while True:
            ask += 1
            for n, sid in enumerate(sids):
                peer.router.send("cast@.victim", _sub(sid, "victim/**", ask), src=f"cs{n}", tag="cast.sub")
            stats["subscribes"] += subs
            yield 1.0 / hz

    return body


# -- 3. wide subscriptions --------------------------------------------------------------


def wide_subscriptions(peer: Attacker, params: dict[str, Any]) -> Attack:
    """``subs`` subscriptions of everything, each acknowledged at once: as many forwarded messages as the publisher gives."""
    subs = int(params["subs"])
    sids = [os.urandom(16) for _ in range(subs)]
    got = [0]

    def acker(n: int, sid: bytes) -> Callable[[Any], None]:
        def landed(share: Any) -> None:
            upto = share.get("upto")
            msgs = share.get("msgs")
            if isinstance(msgs, list):
                got[0] += len(msgs)
            if isinstance(upto, int) and share.get("sid") == sid:
                peer.router.send("cast@.victim", {"sid": sid, "cursor": upto}, src=f"cw{n}", tag="cast.cursor")

        return landed

    for n, sid in enumerate(sids):
        peer.store.share(f"cw{n}").watchers.append(acker(n, sid))

    def body(stats: dict[str, Any]) -> Iterator[float]:
        for n, sid in enumerate(sids):
            peer.router.send("cast@.victim", _sub(sid, "victim/**", None), src=f"cw{n}", tag="cast.sub")
        stats["subscriptions"] = subs
        while True:
            stats["forwarded"] = got[0]
            yield 0.1

    return body


# -- 4. error queues and the live-session send queue -------------------------------------------


def error_flood(peer: Attacker, params: dict[str, Any]) -> Attack:
    """``rate`` error reports a second of ~16 KiB into the victim's ``out.error``; the road's window at 0 (parent).

    The victim's flow sends to this estate from ``out``, which lets this
    estate answer ``out`` with errors for 300 s; and the zero window makes
    everything that flow sends wait in the victim's send queue.
    """
    rate = float(params["rate"])
    report = {"kind": "undelivered", "reason": "r" * ERROR_REASON, "tag": "feed", "dst": "sink@.mallory"}
    per_tick = max(1, int(rate / 100))
    peer.store.share("sink")

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats["errors"] = 0
        while True:
            for _ in range(per_tick):
                peer.router.send("out@manor.victim", report, src="sink", tag="error")
            stats["errors"] += per_tick
            yield per_tick / rate

    return body


# -- 5. share read floods --------------------------------------------------------------


def read_flood(peer: Attacker, params: dict[str, Any]) -> Attack:
    """A read of the victim's big share every ``every`` seconds."""
    every = float(params["every"])
    answers = peer.store.share("bigans")
    got = [0]
    answers.watchers.append(lambda share: got.__setitem__(0, got[0] + 1))

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats["reads"] = 0
        while True:
            peer.router.send("big@.victim", None, src="bigans", tag="read")
            stats["reads"] += 1
            stats["answered"] = got[0]
            yield every

    return body


# -- 6. many streams and a PING flood ---------------------------------------------------------


def streams_and_pings(peer: Attacker, params: dict[str, Any]) -> Attack:
    """A message on each of ``streams`` streams (state the victim keeps per stream), then ``rate`` PINGs a second."""
    streams, rate = int(params["streams"]), float(params["rate"])
    ping = bytes((6, 0))  # ChunkKind.PING, no flags (flowcast.transport.wire.PING)
    per_tick = max(1, int(rate / 200))

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats["streams"] = stats["pings"] = 0
        for stream in range(1, streams + 1):
            peer.road.send_bytes(b"s", "victim", stream=stream & 0xFFFF)
            stats["streams"] += 1
            if stream % 2048 == 0:
                yield 0.01  # the road's send queue drains between runs
        while True:
            for _ in range(per_tick):
                _seal(peer, ping)
            stats["pings"] += per_tick
            yield per_tick / rate

    return body


# -- 7. incomplete messages (eviction pressure) ---------------------------------------------


def incomplete(peer: Attacker, params: dict[str, Any]) -> Attack:
    """``rate`` bytes a second of pieces of messages whose last piece never comes (each a new message)."""
    rate, piece_size = float(params["rate"]), int(params.get("piece", 48_000))
    piece = b"n" * piece_size
    per_message = 8  # pieces sent of a message declared to have 40

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats["bytes"] = stats["messages"] = 0
        seq = 0
        while True:
            for number in range(per_message):
                stats["bytes"] += _seal(peer, _SEG.pack(2, 0, 3, seq, number, 40, len(piece)) + piece)
            seq += 1
            stats["messages"] = seq
            yield per_message * piece_size / rate

    return body


# -- 8. JOIN flood from unproven addresses -------------------------------------------------------


def join_flood(peer: Attacker, params: dict[str, Any]) -> Attack:
    """Signed JOINs of ``keys`` fresh keys from ``ports`` source ports at ``rate`` a second, never answering a cookie.

    What the victim sends those addresses back, over what they sent, is the
    amplification an attacker spoofing a third party's address would get.
    """
    from flowcast.transport import handshake as hs
    from flowcast.transport.crypto import LongTermKeys

    keys, ports, rate = int(params["keys"]), int(params["ports"]), float(params["rate"])
    target = tuple(params["target"])
    packets = [hs.build_join(LongTermKeys.generate(), f"flood{n}", "flood", 0, os.urandom(16), n + 1) for n in range(keys)]
    socks = []
    for _ in range(ports):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        socks.append(sock)

    def drain(stats: dict[str, Any]) -> None:
        readable, _, _ = select.select(socks, [], [], 0)
        for sock in readable:
            for _ in range(256):
                try:
                    data = sock.recv(65536)
                except OSError:
                    break
                stats["received"] += len(data)
                stats["replies"] += 1

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats.update(sent=0, sent_bytes=0, received=0, replies=0, send_errors=0)
        start = time.monotonic()
        try:
            while True:
                due = int((time.monotonic() - start) * rate)
                while stats["sent"] < due:
                    packet = packets[stats["sent"] % keys]
                    try:
                        socks[stats["sent"] % ports].sendto(packet, target)
                        stats["sent_bytes"] += len(packet)
                    except OSError:
                        stats["send_errors"] += 1
                    stats["sent"] += 1
                drain(stats)
                yield 0.002
        finally:
            drain(stats)

    def closing(stats: dict[str, Any]) -> Iterator[float]:
        try:
            yield from body(stats)
        finally:
            # The replies to the last JOINs are still on their way: a bounded wait for them.
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                select.select(socks, [], [], 0.05)
                drain(stats)
            for sock in socks:
                sock.close()

    return closing


# -- 9. causal: forged dep signatures, a missing-dependency flood --------------------------------


def causal_flood(peer: Attacker, params: dict[str, Any]) -> Attack:
    """``missing`` messages whose dep never comes, 256 to a ``causal.have``; then ``forged`` pairs (a dep
    and a message naming it with a forged signature) in one answer each.

    The key is an authorized publisher's (``seed``): every message verifies,
    so the victim's relay must buffer or refuse it on its merits.
    """
    from nacl.signing import SigningKey

    from flowcast.causal.message import TopicMsgID, make

    key = SigningKey(bytes.fromhex(params["seed"]))
    missing, forged, per = int(params["missing"]), int(params["forged"]), 256
    orphans = []
    for n in range(missing):
        never = make(key, "chat", b"never %d" % n)
        orphans.append(make(key, "chat", b"orphan %d" % n, deps=[never.id]).wire)
    pairs = []
    for n in range(forged):
        real = make(key, "chat", b"real %d" % n)
        lie = TopicMsgID(real.publisher, real.hash, bytes(64))
        pairs.append([real.wire, make(key, "chat", b"forged %d" % n, deps=[lie]).wire])
    peer.store.share("causal")

    def body(stats: dict[str, Any]) -> Iterator[float]:
        stats["orphans"] = stats["forged"] = 0
        for pair in pairs:
            peer.router.send("causal@.victim", {"topic": "chat", "msgs": pair, "none": []}, src="causal", tag="causal.have")
            stats["forged"] += 1
        for start in range(0, len(orphans), per):
            chunk = orphans[start : start + per]
            peer.router.send("causal@.victim", {"topic": "chat", "msgs": chunk, "none": []}, src="causal", tag="causal.have")
            stats["orphans"] += len(chunk)
            yield 0.01
        while True:
            yield 1.0

    body.info = {"orphans": len(orphans), "forged": [pair[1].hex() for pair in pairs]}  # type: ignore[attr-defined]
    return body


ATTACKS: dict[str, Callable[[Attacker, dict[str, Any]], Attack]] = {
    "big": big_messages,
    "rewind": rewind_storm,
    "zerowindow": rewind_storm,  # the same storm; the attacker's road advertises a zero window (bench/_hostile_classes.py)
    "wide": wide_subscriptions,
    "queues": error_flood,
    "reads": read_flood,
    "streams": streams_and_pings,
    "incomplete": incomplete,
    "joins": join_flood,
    "causal": causal_flood,
}
