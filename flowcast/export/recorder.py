"""The in-house event recorder: what transports, routers and shares call.

Recording must cost the house almost nothing, so an event is one tuple
appended to a list plus one 8-byte store into a memory-mapped counter (the
count that lets a restart say how many events a crash lost).  Everything
else -- conversion to Arrow, JSON for share fields, route text, Parquet --
happens per batch in :mod:`flowcast.export.segments`.

Public API for the transport, routers, cast and causal layers::

    recorder.message(kind, msg_id, src, dst, size, latency=None,
                     *, segment=None, lag=None, detail=None, share=None)
    recorder.presence(remote, status, detail=None)
    recorder.cast(kind, msg_id, remote, *, size=None, latency=None, seq=None,
                  upto=None, count=None, sub=None, name=None, detail=None)
    recorder.causal(kind, msg_id, topic, publisher, *, epoch=None, seq=None, lag=None,
                    latency=None, count=None, sub=None, share=None, remote=None, detail=None)

``kind`` is one of :data:`flowcast.export.schema.MESSAGE_KINDS`.  ``src`` and
``dst`` are route tuples ``(share, yard, estate, channel)`` or their text;
``latency`` and ``lag`` are seconds.  Shares marked for logging are recorded
through their watchers (:meth:`Recorder.watch_house`), with no call needed;
so are a house's CAST and causal services (:meth:`Recorder.watch_cast`,
:meth:`Recorder.watch_causal`, from ``watch_house``).

Event time is ``clock()`` read when the event happens, plus ``epoch``, the
wall time at clock zero.  For a house that clock is its scheduler's
(:meth:`Recorder.for_house`), not its tick stamp: a message sent by one
house and landed by another, mid-tick each, must be timed by when it
happened (about a millisecond apart), not by the 0.125 s ticks it happened
in, or latencies come out as tick noise and can even be negative.  A share
change is stamped the same way, when it is written.  A virtual-clock run
still exports repeatable timestamps; a real one exports wall time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowcast.export.castevents import CastRecorder
from flowcast.export.causalevents import CausalRecorder
from flowcast.export.schema import CAST_KINDS, CAUSAL_KINDS, MESSAGE_KINDS, PRESENCE_KIND
from flowcast.export.segments import _COUNT, Recovery, SegmentWriter, route_text
from flowcast.runtime import wall_now
from flowcast.store import HouseLike, Share

if TYPE_CHECKING:  # the builder is heavy; a recorder only reads what it built
    from flowcast.flow.builder import BuiltHouse

__all__ = ["Recorder", "route_text"]

_KINDS = frozenset(MESSAGE_KINDS)
_CAST = frozenset(CAST_KINDS)
_CAUSAL = frozenset(CAUSAL_KINDS)
_pack = _COUNT.pack_into


class Recorder:
    """Buffers a house's events and hands them to a segment writer in batches."""

    def __init__(
        self,
        root: Path | str,
        *,
        estate: str,
        house: str,
        clock: Callable[[], float],
        epoch: float | None = None,
        batch: int = 4096,
        flush_every: float = 1.0,
        max_bytes: int = 32 << 20,
        max_age: float = 300.0,
        out: Callable[[str], None] | None = None,
    ) -> None:
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self._now = clock
        self.epoch = wall_now() - clock() if epoch is None else float(epoch)  # wall time at clock zero, for readers
        self.estate = estate
        self.house = house
        self.writer = SegmentWriter(
            root, estate, house, epoch=self.epoch, max_bytes=max_bytes, max_age=max_age, out=out
        )
        self._batch = batch
        self._flush_every = flush_every
        self._rows: list[tuple] = []
        self._counter = self.writer.counter
        self._journaled = 0
        self._watched: list[Share] = []
        self._casts: list[CastRecorder] = []
        self._causals: list[CausalRecorder] = []
        self.closed = False
        #: Events offered after close and not recorded (a hook left in place).
        self.after_close = 0

    @classmethod
    def for_house(cls, house: HouseLike, root: Path | str, *, estate: str, **options: Any) -> Recorder:
        """A recorder on a House's scheduler clock, already watching its logged shares.

        What a house calls at start (``flowcast run --export DIR`` does).
        The scheduler's clock, real or virtual, is read when each event
        happens; with no ``epoch`` given, the wall time at its zero is
        taken now, so two houses of one host map to one wall time.
        """
        recorder = cls(root, estate=estate, house=house.name, clock=house.clock.now, **options)
        recorder.watch_house(house)
        return recorder

    @property
    def recovery(self) -> Recovery:
        """What this start recovered from (and lost to) a previous crash."""
        return self.writer.recovery

    @property
    def pending(self) -> int:
        return len(self._rows)

    # -- recording (the hot path) ----------------------------------------

    def message(
        self,
        kind: str,
        msg_id: str,
        src: Any,
        dst: Any,
        size: int,
        latency: float | None = None,
        *,
        segment: int | None = None,
        lag: float | None = None,
        detail: str | None = None,
        share: str | None = None,
    ) -> None:
        """Record one message event (see the module docstring for the fields)."""
        if self.closed:  # a stack or router still hooked to it must not fail for that
            self.after_close += 1
            return
        if kind not in _KINDS:
            raise ValueError(f"unknown message event kind {kind!r}; want one of {', '.join(MESSAGE_KINDS)}")
        stamp = self._now()
        rows = self._rows
        rows.append((stamp, kind, share, None, msg_id, src, dst, size, latency, segment, lag, None, detail))
        n = len(rows)
        _pack(self._counter, 0, n, self._journaled)  # the crash-loss count: one 8-byte store
        if n >= self._batch or stamp - rows[0][0] >= self._flush_every:
            self.flush()

    def presence(self, remote: str, status: str, detail: str | None = None) -> None:
        """Record that ``remote`` (an estate) changed presence to ``status``."""
        self._add((self._now(), PRESENCE_KIND, None, None, None, None, None, None, None, None, None, remote, status if detail is None else f"{status}: {detail}"))

    def cast(
        self,
        kind: str,
        msg_id: str | None,
        remote: str | None,
        *,
        size: int | None = None,
        latency: float | None = None,
        seq: int | None = None,
        upto: int | None = None,
        count: int | None = None,
        sub: str | None = None,
        name: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Record one CAST event (``kind`` in :data:`flowcast.export.schema.CAST_KINDS`; docs/export.md)."""
        if kind not in _CAST:
            raise ValueError(f"unknown CAST event kind {kind!r}; want one of {', '.join(CAST_KINDS)}")
        self._add((self._now(), kind, msg_id, remote, size, latency, seq, upto, count, sub, name, detail))

    def causal(
        self,
        kind: str,
        msg_id: str | None,
        topic: str | None,
        publisher: str | None,
        *,
        epoch: int | None = None,
        seq: int | None = None,
        lag: float | None = None,
        latency: float | None = None,
        count: int | None = None,
        sub: str | None = None,
        share: str | None = None,
        remote: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Record one causal event (``kind`` in :data:`flowcast.export.schema.CAUSAL_KINDS`; docs/export.md)."""
        if kind not in _CAUSAL:
            raise ValueError(f"unknown causal event kind {kind!r}; want one of {', '.join(CAUSAL_KINDS)}")
        self._add((self._now(), kind, msg_id, topic, publisher, epoch, seq, lag, latency, count, sub, share, remote, detail))

    def _on_share(self, share: Share) -> None:
        history = share.history
        fields = history[-1][1] if history else share.fields()  # the share already copied its fields there
        stamp = self._now()  # when it was written, on the clock message events use
        rows = self._rows
        rows.append((stamp, share.name, fields))  # the short shape: see segments.rows_to_batches
        n = len(rows)
        _pack(self._counter, 0, n, self._journaled)
        if n >= self._batch or stamp - rows[0][0] >= self._flush_every:
            self.flush()

    def _add(self, row: tuple) -> None:
        if self.closed:
            self.after_close += 1
            return
        rows = self._rows
        rows.append(row)
        n = len(rows)
        _pack(self._counter, 0, n, self._journaled)
        if n >= self._batch or row[0] - rows[0][0] >= self._flush_every:
            self.flush()

    # -- shares ------------------------------------------------------------

    def watch(self, share: Share) -> None:
        """Record every change of ``share`` from now on."""
        if self.closed:
            raise ValueError("recorder is closed")
        share.watchers.append(self._on_share)
        self._watched.append(share)

    def watch_house(self, house: HouseLike | BuiltHouse) -> list[str]:
        """Watch the shares a built house (or a House) marked for logging."""
        built = getattr(house, "built", house)
        names = list(built.logged)
        for name in names:
            self.watch(built.store.get(name))
        service = getattr(house, "cast", None)
        if service is not None:
            self.watch_cast(service)
        service = getattr(house, "causal", None)
        if service is not None:
            self.watch_causal(service)
        return names

    def follow_cast(self, house: Any) -> Callable[[], None]:
        """A chore for the house's ticks: watch ``house.cast`` once it is set (behaviours or
        user code may attach a service after this recorder exists); one identity check a tick."""
        return self._follow(house, "cast", self._casts, self.watch_cast)

    def watch_cast(self, service: Any) -> CastRecorder:
        """Record a CastService's cache and delivery events (flowcast.export.castevents) until close."""
        if self.closed:
            raise ValueError("recorder is closed")
        listeners = CastRecorder(service, self)
        self._casts.append(listeners)
        return listeners

    def follow_causal(self, house: Any) -> Callable[[], None]:
        """As :meth:`follow_cast`, for ``house.causal`` (a CausalService attaches itself after the
        house's CAST service, so usually after a recorder made at start)."""
        return self._follow(house, "causal", self._causals, self.watch_causal)

    def _follow(self, house: Any, attribute: str, watching: list[Any], watch: Callable[[Any], Any]) -> Callable[[], None]:
        watched: list[Any] = [None]

        def chore() -> None:
            service = getattr(house, attribute, None)
            if service is not None and service is not watched[0] and not self.closed:
                if not any(listeners.service is service for listeners in watching):  # watch_house did
                    watch(service)
                watched[0] = service

        return chore

    def watch_causal(self, service: Any) -> CausalRecorder:
        """Record a CausalService's mailbox and relay events (flowcast.export.causalevents) until close."""
        if self.closed:
            raise ValueError("recorder is closed")
        listeners = CausalRecorder(service, self)
        self._causals.append(listeners)
        return listeners

    # -- batches -----------------------------------------------------------

    def flush(self) -> None:
        """Hand buffered events to the writer (journaled, not yet Parquet)."""
        rows = self._rows
        if not rows:
            return
        self.writer.append(rows, rows[-1][0])
        self._rows = []  # only now: a failed write (disk full) keeps the batch for the next try
        self._counter = self.writer.counter
        self._journaled = self.writer.journaled

    def poll(self) -> None:
        """Flush and roll what is due by age; call it now and then from the house."""
        if self.closed:
            return
        now = self._now()
        if self._rows and now - self._rows[0][0] >= self._flush_every:
            self.flush()
        if self.writer.due(now):
            self.rotate()

    def rotate(self) -> list[Path]:
        """Flush and publish the open segment now (a house stopping for a while, tests)."""
        self.flush()
        paths = self.writer.rotate()
        self._counter = self.writer.counter
        self._journaled = self.writer.journaled
        return paths

    def ticker(self, period: float = 1.0) -> Iterator[Any]:
        """A scheduler micro-thread that polls every ``period`` seconds until close.

        It keeps a scheduler busy for as long as the recorder is open, so spawn
        it only in houses that run until stopped.
        """
        from flowcast.runtime.scheduler import sleep

        while not self.closed:
            yield sleep(period)
            self.poll()

    def close(self) -> list[Path]:
        """Flush, publish the open segment, stop watching shares."""
        if self.closed:
            return []
        self.flush()
        self.closed = True
        for share in self._watched:
            try:
                share.watchers.remove(self._on_share)
            except ValueError:
                pass
        self._watched.clear()
        for listeners in (*self._casts, *self._causals):
            listeners.detach()
        self._casts.clear()
        self._causals.clear()
        self.writer.close()
        return list(self.writer.published)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

