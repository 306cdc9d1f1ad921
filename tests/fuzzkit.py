"""Fuzzing the live transport and router: shared by the short test and ``bench/fuzz_decoder.py``.

A decoder fed garbage from a frozen clock, outside any session, meets only
its first few checks: the handshake token buckets empty after ~2,000
inputs, and sealed datagrams never open.  So here:

* the virtual clock advances with every input and the scheduler runs the
  stacks' timers and their legitimate traffic, so rate limits refill and
  the join/hello/cookie/initiate handlers see thousands of inputs;
* hostile *plaintext* is sealed with a live session's own keys, so it
  passes the AEAD and reaches the reliable layer and the message decoder,
  the way a connected peer's bugs or malice would;
* acknowledged-lane datagrams and router parcels are fuzzed too; the lanes
  are keyed, as every estate's are, so hostile lane datagrams are sealed
  with the real pair key (they reach the link), and impostors -- no
  trailer, a wrong or reflected key, a replay, a flipped bit -- must each
  be one counted drop;
* every input is timed and (when asked) its memory measured with
  tracemalloc: a decoder that does not raise but takes a second or pins
  megabytes is a finding too.

Inputs come from one seeded :class:`random.Random` (reproducible by seed
and index), as mutations of datagrams captured from a real run and as
structured hostile chunks with extreme field values.

The stacks are built by :func:`build_world` only (through
``tests/routing/kit.py``): when a stack's constructor changes, that is
the one place to adapt.
"""

from __future__ import annotations

import logging
import random
import shutil
import struct
import tempfile
import time
import tracemalloc
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from flowcast.routing.parcel import pack_message
from flowcast.transport import handshake as hs
from flowcast.transport.crypto import open_packet
from flowcast.transport.lanekeys import TRAILER_SIZE, YardMac, seal
from flowcast.transport.reliable import Link
from flowcast.transport.stack import Message
from flowcast.transport.wire import (
    ACK,
    ACK_STREAM,
    ACK_RANGE,
    ALLOW_ACK,
    HEADER_SIZE,
    MSG,
    PATH,
    PING,
    RUN,
    SEG,
    SKIP,
    ChunkKind,
    PacketKind,
    WireError,
    decode_chunks,
    unpack_header,
)

__all__ = ["FuzzReport", "Fuzzer", "TARGETS", "build_world"]

#: Every target, in the order inputs go round them.
TARGETS = ("decoders", "road", "session", "lane", "router")
#: Handshake handlers of the target road stack whose calls are the reach figure.
HANDLERS = ("_on_join", "_on_join_reply", "_on_hello", "_on_cookie", "_on_initiate", "_authentic")
#: Source addresses the outside inputs come from: enough that per-source buckets refill.
SOURCES = 32
_HANDSHAKE_KINDS = frozenset(range(PacketKind.JOIN, PacketKind.INITIATE + 1))
_EXTREMES = (0, 1, 2, 3, 7, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, (1 << 63), (1 << 64) - 1)


# -- the world ------------------------------------------------------------------------------


@dataclass
class World:
    """The stacks under fuzz, on one virtual clock and seeded network."""

    kit: Any  # tests.routing.kit.World
    alpha: Any  # Estate: the peer whose live session keys seal hostile plaintext
    beta: Any  # Estate: manor (road + router + lane) and worker (router + lane)
    samples: dict[str, list[bytes]] = field(default_factory=dict)
    #: Export recorders hooked to every router, so the route-event hooks are fuzzed too.
    recorders: list[Any] = field(default_factory=list)

    def recorded(self) -> int:
        """Route events the recorders took (journaled or pending)."""
        return sum(rec.writer.events + rec.pending for rec in self.recorders)

    @property
    def road(self):
        return self.beta.roads["main"]

    @property
    def peer_road(self):
        return self.alpha.roads["main"]

    def now(self) -> float:
        return self.kit.scheduler.clock.now()


def build_world(seed: int = 1) -> World:
    """Two estates joined on a simulated network, a two-yard acknowledged lane, traffic captured.

    The one place fuzz stacks are constructed (via ``tests/routing/kit.py``);
    adapt it here when a constructor changes (e.g. lane credentials).
    """
    from tests.routing.kit import World as KitWorld

    kit = KitWorld(seed=seed, delay=0.001, record=True)
    alpha = kit.routed_estate("alpha", ["manor"], policy=[{"allow": "any"}], lane_keys=True)
    beta = kit.routed_estate("beta", ["manor", "worker"], policy=[{"allow": "write", "estate": "alpha", "share": "fuzz.*"}], lane_keys=True)
    for yard in ("manor", "worker"):
        beta.store(yard).share("fuzz.board")
        beta.store(yard).queue("fuzz.queue", 64, budget=QUEUE_BUDGET)
    alpha.store("manor").share("fuzz.back")
    kit.connect(alpha, beta)
    world = World(kit, alpha, beta)
    _record(world)
    _capture(world)
    for rec in world.recorders:
        rec.rotate()  # the first Parquet segment loads its codecs: not a cost of the inputs to come
    return world


#: fuzz.queue's byte budget: small, so the budget's refusals are reached too.
QUEUE_BUDGET = 4000


def _record(world: World) -> None:
    """Hook an export Recorder to every router (in a temporary directory gone with the world)."""
    from flowcast.export import Recorder

    root = tempfile.mkdtemp(prefix="flowcast-fuzz-events-")
    clock = world.kit.scheduler.clock.now
    for estate in (world.alpha, world.beta):
        for yard, router in estate.houses.items():
            rec = Recorder(f"{root}/{estate.name}-{yard}", estate=estate.name, house=yard, clock=clock, epoch=1.7e9)
            router.set_events(rec)
            world.recorders.append(rec)
    weakref.finalize(world, _close_recorders, list(world.recorders), root)


def _close_recorders(recorders: list[Any], root: str) -> None:
    for rec in recorders:
        rec.close()
    shutil.rmtree(root, ignore_errors=True)


def _capture(world: World) -> None:
    """Run real traffic of every kind and keep the datagrams (and the sealed plaintexts)."""
    kit, alpha, beta = world.kit, world.alpha, world.beta
    for i in range(40):
        alpha["manor"].send("fuzz.board@manor.beta", {"n": i, "pad": "x" * (i * 29)})
        beta["worker"].send("fuzz.queue@manor", {"i": i, "blob": bytes(i * 53)})
        beta["manor"].send("fuzz.board@worker", i)
    alpha["manor"].send("fuzz.board@manor.beta", {"big": bytes(150_000)})
    beta["manor"].send("fuzz.queue@worker", {"big": bytes(90_000)})
    # Handshakes from strangers, so joins/hellos/initiates exist to mutate.
    for n in range(3):
        stranger = kit.estate(f"stranger{n}")
        stranger.join(beta.roads["main"].address)
    kit.run_for(3.0)
    trace = kit.net.trace
    road_addr, lane_addrs = world.road.address, {"beta/manor", "beta/worker"}
    road = [d for _, _, dst, d in trace if dst == road_addr or (len(d) > 1 and d[1] != PacketKind.LANE and dst not in lane_addrs)]
    lane = [d for _, src, dst, d in trace if dst == "beta/worker" and src == "beta/manor"]
    lane_back = [d for _, src, dst, d in trace if dst == "beta/manor" and src == "beta/worker"]
    session = beta.roads["main"].remote("alpha").session
    key = session.rx_key
    bodies = []
    for d in road:
        if len(d) > 32 and d[1] == PacketKind.SEALED:
            try:
                bodies.append(bytes(open_packet(key, d, session.aegis)))
            except Exception:  # noqa: BLE001 - sealed for another session or direction
                pass
    parcels = [
        pack_message(("fuzz.back", "manor", "alpha", "main"), ("fuzz.board", "", "beta", "main"), "", 1.5, {"k": 1}),
        pack_message(("fuzz.queue", "worker", "beta", ""), ("fuzz.board", "manor", "beta", ""), "error", 2.0, [1, 2]),
        pack_message(("", "manor", "beta", ""), ("fuzz.queue", "worker", "beta", ""), "read", 3.0, None),
    ]
    handshakes = [d for d in road if len(d) > 1 and d[1] in _HANDSHAKE_KINDS]
    assert road and lane and lane_back and bodies and handshakes, "capture found no traffic: the world did not run"
    assert all(beta[y].lane.authenticated for y in ("manor", "worker")), "the fuzz world's lanes must be keyed, as an estate's are"
    world.samples = {
        "road": road,
        "handshakes": handshakes,
        "lane": lane,  # sealed, as captured: what impostors replay and flip
        "lane_back": lane_back,
        "lane_plain": [d[:-TRAILER_SIZE] for d in lane],  # what hostile inputs mutate before sealing
        "lane_back_plain": [d[:-TRAILER_SIZE] for d in lane_back],
        "bodies": bodies,
        "parcels": parcels,
    }


# -- inputs ---------------------------------------------------------------------------------


def _int(rng: random.Random, bits: int) -> int:
    value = rng.choice(_EXTREMES) if rng.random() < 0.7 else rng.getrandbits(bits)
    return value & ((1 << bits) - 1)


def mutate(rng: random.Random, samples: list[bytes], limit: int = 2048) -> bytes:
    """One input from captured ``samples``: flips, truncation, splices, rewritten header bytes, or noise."""
    op = rng.randrange(8)
    data = rng.choice(samples)
    if op == 0:
        return rng.randbytes(rng.randrange(limit))
    if op == 1:
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == 2:
        return data[: rng.randrange(len(data) + 1)]
    if op == 3:
        other = rng.choice(samples)
        return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]
    if op == 4:
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            if b:
                b[rng.randrange(min(len(b), 24))] = rng.randrange(256)
        return bytes(b)
    if op == 5:
        return data[:HEADER_SIZE] + rng.randbytes(rng.randrange(64))
    if op == 6:
        return data  # unchanged: a replay
    cut = rng.randrange(len(data) + 1)
    return data[:cut] + rng.randbytes(rng.randrange(1, 16)) + data[cut:]


def hostile_chunk(rng: random.Random, *, close: bool = False) -> bytes:
    """One reliable-layer chunk with extreme or random fields (CLOSE only if ``close``)."""
    kind = rng.randrange(12) if close else rng.choice((0, 1, 2, 3, 4, 5, 6, 8, 9, 11))
    flags = _int(rng, 8) if rng.random() < 0.3 else rng.choice((0, 1, 2, 3))
    if kind == ChunkKind.MSG:
        payload = _payload(rng)
        length = len(payload) if rng.random() < 0.9 else _int(rng, 32)
        return MSG.pack(kind, flags, _int(rng, 16) % 8, _int(rng, 64) if rng.random() < 0.3 else rng.randrange(64), length) + payload
    if kind == ChunkKind.RUN:
        payloads = [_payload(rng) for _ in range(rng.randrange(0, 6))]
        block = msgpack.packb(payloads) if rng.random() < 0.8 else _payload(rng)
        count = len(payloads) if rng.random() < 0.8 else _int(rng, 16)
        length = len(block) if rng.random() < 0.9 else _int(rng, 32)
        seq = rng.randrange(64) if rng.random() < 0.7 else _int(rng, 64)
        return RUN.pack(kind, flags, _int(rng, 16) % 8, seq, count, length) + block
    if kind == ChunkKind.SEG:
        payload = rng.randbytes(rng.randrange(0, 300))
        count = _int(rng, 32)
        number = _int(rng, 32) if rng.random() < 0.5 else rng.randrange(max(1, min(count, 8)))
        length = len(payload) if rng.random() < 0.9 else _int(rng, 32)
        seq = rng.randrange(64) if rng.random() < 0.7 else _int(rng, 64)
        return SEG.pack(kind, flags, rng.randrange(8), seq, number, count, length) + payload
    if kind == ChunkKind.ACK:
        ranges, streams = rng.randrange(0, 70), rng.randrange(0, 70)
        sane = rng.random() < 0.8  # counts that match what follows, so the chunk decodes
        body = ACK.pack(kind, flags, ranges, streams, _int(rng, 32))
        body += b"".join(ACK_RANGE.pack(_int(rng, 64), _int(rng, 64)) for _ in range(ranges if sane else rng.randrange(ranges + 1)))
        body += b"".join(ACK_STREAM.pack(_int(rng, 16), _int(rng, 64)) for _ in range(streams if sane else rng.randrange(streams + 1)))
        return body
    if kind == ChunkKind.SKIP:
        return SKIP.pack(kind, flags, rng.randrange(8), _int(rng, 64))
    if kind == ChunkKind.ALLOW_ACK:
        return ALLOW_ACK.pack(kind, flags, _int(rng, 32))
    if kind in (ChunkKind.PING, ChunkKind.CLOSE):
        return PING.pack(kind, flags)
    if kind in (ChunkKind.PATH_CHALLENGE, ChunkKind.PATH_RESPONSE):
        return PATH.pack(kind, flags, _int(rng, 64))
    return bytes([kind]) + rng.randbytes(rng.randrange(32))


def _payload(rng: random.Random) -> bytes:
    choice = rng.randrange(5)
    if choice == 0:
        return rng.randbytes(rng.randrange(200))
    if choice == 1:  # msgpack containers declaring far more than they hold
        return rng.choice((b"\xdd", b"\xdf", b"\xdb", b"\xc6")) + struct.pack("!I", _int(rng, 32)) + rng.randbytes(rng.randrange(16))
    if choice == 2:
        return b"\x91" * rng.randrange(1, 3000)  # deep nesting
    if choice == 3:
        return msgpack.packb({"n": rng.random(), "s": "x" * rng.randrange(100)})
    return pack_message(
        ("fuzz.back", "manor", "alpha", "main"), ("fuzz.board", rng.choice(("", "manor", "worker")), "beta", "main"), "", 1.0, rng.random()
    )


def hostile_body(rng: random.Random, bodies: list[bytes]) -> bytes:
    """Plaintext for the live session: captured bodies mutated, or 1-4 hostile chunks."""
    if rng.random() < 0.3:
        return mutate(rng, bodies, 1200)
    close = rng.random() < 0.01  # CLOSE is reserved (a bad chunk today); rare, in case it comes to end sessions
    return b"".join(hostile_chunk(rng, close=close) for _ in range(rng.choice((1, 1, 2, 3))))


def hostile_route(rng: random.Random) -> Any:
    names = ("fuzz.board", "fuzz.queue", "fuzz.back", "flowcast.policy", "", ".x", "a" * 300, "beta", "alpha", "worker", "manor", "main", "*")
    choice = rng.randrange(6)
    if choice == 0:
        return [rng.choice(names) for _ in range(rng.choice((3, 4, 5)))]
    if choice == 1:
        return rng.choice((None, 1, 2.5, "text", b"bytes", {"a": 1}, [1, 2, 3, 4], ["a", None, "b", "c"]))
    return [rng.choice(names[:4]), rng.choice(("", "manor", "worker")), rng.choice(("alpha", "beta", "")), rng.choice(("main", ""))]


def hostile_router_parcel(rng: random.Random, parcels: list[bytes]) -> bytes:
    """A routed parcel: header and data each sane, hostile, or mutated."""
    if rng.random() < 0.3:
        return mutate(rng, parcels, 600)
    tag = rng.choice(("", "error", "read", "value", "x" * 65, 7, None))
    stamp = rng.choice((1.0, 0, -1, float("nan"), float("inf"), 1e308, "now", None, (1 << 64) - 1))
    parts = [hostile_route(rng), hostile_route(rng), tag, stamp]
    if rng.random() < 0.3:  # header extensions, sane or not (docs/routing.md)
        parts.append(rng.choice(({"id": b"x" * 16}, {"k": "x" * 600}, {1: 2}, {"k": {"n": 1}}, {"k": list(range(40))}, [], None, "ext")))
    head = msgpack.packb(parts, use_bin_type=True) if rng.random() < 0.9 else rng.randbytes(20)
    n = len(head) if rng.random() < 0.9 else _int(rng, 32)
    data = _payload(rng) if rng.random() < 0.8 else b""
    return n.to_bytes(4, "big") + head + data


# -- the run --------------------------------------------------------------------------------


@dataclass
class FuzzReport:
    """What a run did: inputs per target, handler reach, escapes, and the bounds it measured."""

    inputs: Counter = field(default_factory=Counter)
    reach: Counter = field(default_factory=Counter)
    escaped: list[str] = field(default_factory=list)
    max_seconds: dict[str, float] = field(default_factory=dict)
    max_alloc: dict[str, int] = field(default_factory=dict)  # peak bytes allocated while one input ran
    max_kept: dict[str, int] = field(default_factory=dict)  # bytes still held after one input
    #: Lane inputs by kind: ``sealed`` (from the sender's path, real key) and how many
    #: passed the tag (``sealed_authentic``); ``impostor`` (and per kind), and
    #: ``impostor_heard``, those that were not exactly one counted drop.
    lane: Counter[str] = field(default_factory=Counter)
    growth: int = 0  # traced bytes after the run minus before it
    sessions: int = 0  # sessions re-established after a hostile chunk ended one
    internal_errors: int = 0
    seconds: float = 0.0
    virtual_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": dict(self.inputs),
            "reach": dict(self.reach),
            "escaped": len(self.escaped),
            "escapes": self.escaped[:10],
            "max_ms_per_input": {k: round(v * 1000, 3) for k, v in self.max_seconds.items()},
            "max_alloc_bytes": dict(self.max_alloc),
            "max_kept_bytes": dict(self.max_kept),
            "lane": dict(self.lane),
            "growth_bytes": self.growth,
            "sessions_reestablished": self.sessions,
            "internal_errors": self.internal_errors,
            "seconds": round(self.seconds, 2),
            "virtual_seconds": round(self.virtual_seconds, 1),
        }


class Fuzzer:
    """Feeds inputs round the targets; ``advance`` seconds of virtual time pass per input.

    ``advance=0`` and ``in_session=False`` reproduce the old fuzzer (frozen
    clock, one source address, nothing sealed): the baseline of the reach figure.
    """

    def __init__(
        self, world: World, seed: int = 0, *, advance: float = 0.001, sources: int = SOURCES, memory: bool = True, service_every: int = 50
    ) -> None:
        self.world = world
        self.rng = random.Random(seed)
        self.advance = advance
        self.sources = [f"fuzzer{i}" for i in range(max(1, sources))]
        self.memory = memory
        self.service_every = service_every
        self.report = FuzzReport()
        self.link = Link(65000, lambda stream, flags, payload: None, None)
        self._count_handlers()

    def _count_handlers(self) -> None:
        road, reach = self.world.road, self.report.reach
        for name in HANDLERS:
            method = getattr(road, name)

            def counted(*args: Any, _method: Callable = method, _name: str = name) -> Any:
                reach[_name] += 1
                return _method(*args)

            setattr(road, name, counted)  # instance attribute: the class and other stacks are untouched

    # one input per target -----------------------------------------------------------------

    def _decoders(self, data: bytes, now: float) -> None:
        for call in (unpack_header, decode_chunks, lambda d: self.link.handle(d, now)):
            try:
                call(data)
            except WireError:
                pass
        road = self.world.road
        hs.parse_join(data)
        hs.parse_join_reply(data)
        hs.open_hello(data, road.keys)
        hs.open_initiate(data, now, road._allows.jar)

    def _input(self, target: str) -> tuple[Callable[[float], None], bytes]:
        rng, w = self.rng, self.world
        s = w.samples
        if target == "decoders":
            data = mutate(rng, s["road"])
            return (lambda now: self._decoders(data, now)), data
        if target == "road":
            data = mutate(rng, s["handshakes"] if rng.random() < 0.6 else s["road"])
            source = rng.choice(self.sources) if rng.random() < 0.9 else w.peer_road.address
            return (lambda now: w.road._receive(data, source, now)), data
        if target == "session":
            body = hostile_body(rng, s["bodies"])
            session = self._session()
            if session is None:
                return (lambda now: None), body
            if rng.random() < 0.2:
                # The other way: beta's keys, into alpha, the initiator (ALLOW_ACK is read there).
                back = w.road.remote("alpha").session
                if back is not None and back.remote_index is not None:
                    _, datagram = back.seal(body)
                    return (lambda now: w.peer_road._receive(datagram, w.road.address, now)), body
            _, datagram = session.seal(body)
            source = w.peer_road.address if rng.random() < 0.95 else rng.choice(self.sources)
            return (lambda now: w.road._receive(datagram, source, now)), body
        if target == "lane":
            return self._lane_input()
        parcel = hostile_router_parcel(rng, s["parcels"])
        where = rng.randrange(3)
        if where == 0:
            road = w.road
            return (lambda now: road.hooks.message(Message("alpha", 0, parcel))), parcel
        if where == 1:
            lane = w.beta["manor"].lane
            return (lambda now: lane.hooks.message(Message("worker", 0, parcel))), parcel
        lane = w.beta["worker"].lane
        return (lambda now: lane.hooks.message(Message("manor", 0, parcel))), parcel

    def _lane_input(self) -> tuple[Callable[[float], None], bytes]:
        """A hostile datagram sealed with the real pair key, or (a quarter of them) an impostor."""
        rng, w = self.rng, self.world
        s = w.samples
        if rng.random() < 0.2:  # the other way: worker -> manor
            lane, sender, key = w.beta["manor"].lane, w.beta["worker"].lane, "lane_back"
        else:
            lane, sender, key = w.beta["worker"].lane, w.beta["manor"].lane, "lane"
        if rng.random() < IMPOSTORS:
            return self._impostor(lane, sender, s[key])
        plain = s[key + "_plain"]
        if rng.random() < 0.5:
            sample = rng.choice(plain)
            data = sample[: _lane_header(sample)] + b"".join(hostile_chunk(rng) for _ in range(rng.randint(1, 3)))
        else:
            data = mutate(rng, plain)
        if len(data) >= _LANE_IDS.stop:
            # The real boot ids stay: a datagram naming a new boot replaces the
            # sender's incarnation for good, and every later input would then
            # only meet the stale-boot check.
            data = data[:4] + sender.boot.to_bytes(4, "big") + data[8:16] + lane.boot.to_bytes(4, "big") + data[20:]
        # Sealed by the sender's own stack (its seq, its key for this receiver):
        # what a yard's bugs or malice would send.
        data = sender._seal(sender._yards[lane.name], data, b"")
        source = sender.address if rng.random() < 0.95 else rng.choice(self.sources)
        counts = self.report.lane

        def feed(now: float) -> None:
            refused = _lane_refusals(lane)
            lane._receive(data, source, now)
            if source == sender.address:
                counts["sealed"] += 1
                counts["sealed_authentic" if _lane_refusals(lane) == refused else "sealed_refused"] += 1

        return feed, data

    def _impostor(self, lane: Any, sender: Any, sealed: list[bytes]) -> tuple[Callable[[float], None], bytes]:
        """A datagram from the sender's path that its pair key did not seal (now): each must be one counted drop."""
        rng = self.rng
        sample = rng.choice(sealed)
        plain = sample[:-TRAILER_SIZE]
        kind = rng.choice(IMPOSTOR_KINDS)
        if kind == "unsealed":
            data = mutate(rng, [plain]) if rng.random() < 0.5 else plain
        elif kind == "wrong_key":
            mac = YardMac(rng.randbytes(32), rng.randbytes(32), 0)
            data = seal(mac, plain, b"", time.monotonic_ns())
        elif kind == "reflected":  # sealed with the key of the other direction
            data = lane._seal(lane._yards[sender.name], plain, b"")  # what the receiver itself sent the sender
        elif kind == "replayed":
            data = sample
        else:  # flipped: a real sealed datagram with one bit changed
            flipped = bytearray(sample)
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            data = bytes(flipped)
        counts = self.report.lane

        def feed(now: float) -> None:
            refused = _lane_refusals(lane)
            lane._receive(data, sender.address, now)
            counts["impostor"] += 1
            counts[f"impostor.{kind}"] += 1
            if _lane_refusals(lane) != refused + 1:
                counts["impostor_heard"] += 1  # a finding: the test asserts there are none

        return feed, data

    def _session(self):
        """alpha's live session with beta, re-established (and counted) if a hostile chunk ended it."""
        w = self.world
        remote = w.peer_road.remote("beta")
        session = remote.session
        if session is not None and session.remote_index is not None and w.road.is_allowed("alpha"):
            return session
        self.report.sessions += 1
        w.peer_road.allow("beta")
        w.kit.run_until(lambda: w.peer_road.is_allowed("beta") and w.road.is_allowed("alpha"), 5)
        session = w.peer_road.remote("beta").session
        return session if session is not None and session.remote_index is not None else None

    # the loop -----------------------------------------------------------------------------

    def run(self, inputs: int, targets: tuple[str, ...] = TARGETS, max_seconds: float | None = None) -> FuzzReport:
        """Feed ``inputs`` inputs (or stop after ``max_seconds`` of wall time)."""
        rep, w = self.report, self.world
        clock = w.kit.scheduler.clock
        start_virtual = clock.now()
        tracing = self.memory and not tracemalloc.is_tracing()
        if tracing:
            tracemalloc.start()
        logging.disable(logging.ERROR)  # refusals are logged (rate-limited); here they are the point
        self._drain()
        before = tracemalloc.get_traced_memory()[0] if self.memory else 0
        started = time.perf_counter()
        perf = time.perf_counter
        try:
            for i in range(inputs):
                target = targets[i % len(targets)]
                feed, data = self._input(target)
                if self.memory:
                    tracemalloc.reset_peak()
                    held = tracemalloc.get_traced_memory()[0]
                t0 = perf()
                try:
                    feed(clock.now())
                except Exception as error:  # noqa: BLE001 - the point: record what escaped
                    rep.escaped.append(f"{target}: {type(error).__name__}: {str(error)[:200]} on {data[:48].hex()}")
                elapsed = perf() - t0
                rep.inputs[target] += 1
                if elapsed > rep.max_seconds.get(target, 0.0):
                    rep.max_seconds[target] = elapsed
                if self.memory:
                    now_held, peak = tracemalloc.get_traced_memory()
                    rep.max_alloc[target] = max(rep.max_alloc.get(target, 0), peak - held)
                    rep.max_kept[target] = max(rep.max_kept.get(target, 0), now_held - held)
                if self.advance:
                    clock.advance_to(clock.now() + self.advance)
                if (i + 1) % self.service_every == 0:
                    self._service()
                if max_seconds is not None and perf() - started > max_seconds:
                    break
            self._service()
            self._drain()
            if self.memory:
                rep.growth = tracemalloc.get_traced_memory()[0] - before
        finally:
            logging.disable(logging.NOTSET)
            if tracing:
                tracemalloc.stop()
        rep.seconds = time.perf_counter() - started
        rep.virtual_seconds = clock.now() - start_virtual
        rep.internal_errors = sum(s.counts["internal_errors"] for s in self._stacks())
        return rep

    def _stacks(self) -> list[Any]:
        w = self.world
        return [w.road, w.peer_road, w.beta["manor"].lane, w.beta["worker"].lane, w.alpha["manor"].lane]

    def _service(self) -> None:
        """Let the scheduler run up to now: deliveries, timers, the stacks' own replies."""
        scheduler = self.world.kit.scheduler
        scheduler.run(until=scheduler.clock.now())
        self._drain()

    def _drain(self) -> None:
        """Take what the stacks delivered, as an application would."""
        for stack in self._stacks():
            stack.receive_many()
        for estate, yards in ((self.world.beta, ("manor", "worker")), (self.world.alpha, ("manor",))):
            for yard in yards:
                store = estate.store(yard)
                for name in ("fuzz.queue", "fuzz.queue.error", "fuzz.board.error", "fuzz.back.error"):
                    try:
                        share = store.get(name)
                    except ValueError:
                        share = None
                    if share is not None and hasattr(share, "drain"):
                        share.drain()


#: The share of lane inputs that are impostors, and what they are.
IMPOSTORS = 0.25
IMPOSTOR_KINDS = ("unsealed", "wrong_key", "reflected", "replayed", "flipped")


def _lane_refusals(lane: Any) -> int:
    counts = lane.counts
    return counts["lane_forged"] + counts["lane_unauthenticated"] + counts["lane_replayed"]


#: Where an acknowledged lane datagram carries its boot ids (sender's at 4, receiver's at 16).
_LANE_IDS = slice(4, 20)


def _lane_header(sample: bytes) -> int:
    return _LANE_IDS.stop


def still_works(world: World) -> bool:
    """After fuzzing: a fresh message goes alpha -> beta and manor -> worker, end to end."""
    alpha, beta, kit = world.alpha, world.beta, world.kit
    if not (world.peer_road.is_allowed("beta") and world.road.is_allowed("alpha")):
        world.peer_road.allow("beta")
        kit.run_until(lambda: world.peer_road.is_allowed("beta") and world.road.is_allowed("alpha"), 10)
    marker = random.random()
    alpha["manor"].send("fuzz.board@manor.beta", {"alive": marker})
    beta["manor"].send("fuzz.board@worker", {"alive": marker})
    logging.disable(logging.ERROR)  # the routers' refusals of earlier hostile chunks' replies
    try:
        return kit.run_until(
            lambda: beta.store("manor").get("fuzz.board").fields().get("alive") == marker
            and beta.store("worker").get("fuzz.board").fields().get("alive") == marker,
            10,
        )
    finally:
        logging.disable(logging.NOTSET)
