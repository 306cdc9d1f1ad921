"""The chaos relay: a real UDP hop that loses, duplicates, reorders, delays
and corrupts datagrams between two estates on one machine.

The simulated network proves a stack against faults on virtual time; this
proves the *real* stack -- real sockets, real clock, real processes --
against the same faults with the same meaning (both use
:class:`~flowcast.transport.ports.faults.Impairer`).

Topology: a client estate sends to ``--listen``; the relay forwards each
datagram to ``--forward`` from an *upstream* socket of that client's own,
so the server sees one distinct address per client and its replies find
their way back: whatever arrives at a client's upstream socket from the
forward address is relayed to that client from the listen socket.  Faults
apply in both directions, each direction of each client being its own FIFO
link.  Datagrams reaching an upstream socket from anyone but the forward
address are dropped (``stray``).

Run it as ``flowcast chaos ...`` or ``python -m flowcast.transport.chaos
...``; it prints ``listening on HOST:PORT`` once bound and its counts on
exit (SIGINT, SIGTERM, or ``--duration``).  Tests use :class:`ChaosRelay`
in-process, on a thread of its own (:meth:`ChaosRelay.start`).
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import signal
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.ports.faults import Conditions, Impairer
from flowcast.transport.ports.udp import UdpPort

__all__ = ["ChaosRelay", "main", "parse_endpoint"]

_BATCH = 256  # datagrams read per wake-up before others get a turn


class ChaosRelay:
    """A UDP relay with faults; one scheduler micro-world of its own.

    ``delay`` is seconds, a number or ``(min, max)``.  At most
    ``max_clients`` clients are relayed at once (the least recently heard
    is dropped to make room), and a client silent for ``idle`` seconds is
    forgotten, so a flood of source addresses cannot exhaust descriptors.
    """

    def __init__(
        self,
        listen: tuple[str, int],
        forward: tuple[str, int],
        *,
        loss: float = 0.0,
        duplicate: float = 0.0,
        reorder: float = 0.0,
        corrupt: float = 0.0,
        delay: float | tuple[float, float] = 0.0,
        reorder_window: float | None = None,
        seed: int | None = None,
        max_clients: int = 256,
        idle: float = 120.0,
        scheduler: Scheduler | None = None,
    ) -> None:
        low, high = (delay, delay) if isinstance(delay, (int, float)) else delay
        window = reorder_window if reorder_window is not None else max(0.001, 2.0 * high)
        self.conditions = Conditions(loss, duplicate, reorder, (float(low), float(high)), corrupt, window)
        self._own_scheduler = scheduler is None
        self.scheduler = scheduler if scheduler is not None else Scheduler(RealClock())
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**32)
        #: ``received``/``forwarded`` per direction (``up``: client to
        #: server, ``down``: back), fault counts as in the simulated network,
        #: ``stray``, ``blocked`` (the OS refused a send: dropped), ``clients``.
        self.counts: Counter[str] = Counter()
        self._impair = Impairer(random.Random(self.seed), self.counts)
        self._forward = (str(ipaddress.ip_address(forward[0])), int(forward[1]))
        target = ipaddress.ip_address(forward[0])
        if target.version == 6:
            self._upstream_host = "::1" if target.is_loopback else "::"
        else:
            self._upstream_host = "127.0.0.1" if target.is_loopback else "0.0.0.0"
        try:
            self._listen = UdpPort(listen[0], listen[1], scheduler=self.scheduler)
        except BaseException:
            if self._own_scheduler:
                self.scheduler.close()
            raise
        self._clients: OrderedDict[Any, UdpPort] = OrderedDict()
        self._heard: dict[Any, float] = {}
        self._max_clients = max_clients
        self._idle = idle
        self._thread: threading.Thread | None = None
        self._sweeper: Any = None
        self._progress = threading.Condition()
        #: What ended a :meth:`start` thread abnormally, if anything did.
        self.error: BaseException | None = None
        self._started = False
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        """Where clients send (the actual port if ``listen`` asked for 0)."""
        return self._listen.address[:2]

    def upstream_address(self, client: Any) -> tuple[str, int] | None:
        """The address the server sees for ``client``, if it has one now."""
        port = self._clients.get(client)
        return port.address[:2] if port is not None else None

    # -- running ---------------------------------------------------------------

    def open(self) -> None:
        """Register with the scheduler; the caller runs it."""
        if self._started:
            return
        self._started = True
        self._listen.on_readable(self._from_client)
        self._sweeper = self.scheduler.call_later(self._idle / 2, self._sweep)

    def run(self, duration: float | None = None) -> None:
        """Relay until :meth:`stop` (or for ``duration`` seconds)."""
        self.open()
        self.scheduler.enable_wakeup()
        until = None if duration is None else self.scheduler.clock.now() + duration
        self.scheduler.run(until=until)

    def start(self) -> "ChaosRelay":
        """Relay on a background thread (for tests); :meth:`close` ends it."""
        self.open()
        self.scheduler.enable_wakeup()
        self._thread = threading.Thread(target=self._run_thread, name="chaos-relay", daemon=True)
        self._thread.start()
        return self

    def _run_thread(self) -> None:
        try:
            self.scheduler.run()
        except BaseException as error:  # noqa: BLE001 - kept for the owner to see
            self.error = error

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Block until ``predicate()`` holds (checked after each batch the
        relay thread handles) or ``timeout`` passes; True if it held."""
        with self._progress:
            return self._progress.wait_for(predicate, timeout)

    def _notify(self) -> None:
        if self._thread is not None:
            with self._progress:
                self._progress.notify_all()

    def stop(self) -> None:
        """Make :meth:`run` return; safe from a signal handler or another thread."""
        self.scheduler.stop()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop()
        if self._thread is not None:
            # A stop that lands before the thread entered run() is lost
            # (run() starts by clearing it): repeat it until the thread ends.
            deadline = time.monotonic() + 10.0
            while self._thread.is_alive() and time.monotonic() < deadline:
                self.stop()
                self._thread.join(timeout=0.05)
        if self._sweeper is not None:
            self._sweeper.cancel()
        for port in self._clients.values():
            port.close()
        self._clients.clear()
        self._listen.close()
        if self._own_scheduler:
            self.scheduler.close()

    def __enter__(self) -> "ChaosRelay":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def overflow(self) -> int:
        """Datagrams the kernel dropped at the relay's sockets (it fell behind)."""
        ports = [self._listen, *self._clients.values()]
        return sum(port.kernel_drops() or 0 for port in ports if not port.closed)

    def summary(self) -> str:
        keys = (
            "up_received", "up_forwarded", "down_received", "down_forwarded",
            "lost", "duplicated", "reordered", "corrupted", "stray", "blocked", "clients",
        )  # fmt: skip
        counts = " ".join(f"{key}={self.counts[key]}" for key in keys)
        return f"{counts} overflow={self.overflow()}"

    # -- relaying --------------------------------------------------------------

    def _from_client(self) -> None:
        batch = self._listen.receive_many(_BATCH)
        if not batch:
            return
        now = self.scheduler.clock.now()
        for data, client in batch:
            upstream = self._upstream(client, now)
            for when, copy in self._impair(self.conditions, data, now, ("up", client)):
                self._emit(when, now, upstream, copy, self._forward, "up_forwarded")
        # Counted last: a reader on another thread that sees the datagrams
        # received also sees every fate decided for them.
        self.counts["up_received"] += len(batch)
        self._notify()

    def _from_server(self, client: Any, upstream: UdpPort) -> None:
        batch = upstream.receive_many(_BATCH)
        if not batch:
            return
        now = self.scheduler.clock.now()
        self._heard[client] = now
        stray = 0
        for data, source in batch:
            if source[:2] != self._forward:
                stray += 1
                continue
            for when, copy in self._impair(self.conditions, data, now, ("down", client)):
                self._emit(when, now, self._listen, copy, client, "down_forwarded")
        self.counts["stray"] += stray
        self.counts["down_received"] += len(batch) - stray
        self._notify()

    def _emit(self, when: float, now: float, port: UdpPort, data: bytes, to: Any, counter: str) -> None:
        if when <= now:
            self._send(port, data, to, counter)
        else:
            self.scheduler.call_at(when, self._send_held, port, data, to, counter)

    def _send_held(self, port: UdpPort, data: bytes, to: Any, counter: str) -> None:
        self._send(port, data, to, counter)
        self._notify()

    def _send(self, port: UdpPort, data: bytes, to: Any, counter: str) -> None:
        if port.closed:
            self.counts["blocked"] += 1
            return
        # A router with a full queue drops; so does the relay.
        try:
            sent = port.send(data, to)
        except ValueError:  # an IPv6 jumbo for an IPv4 hop: too big to relay
            self.counts["oversized"] += 1
            return
        if sent:
            self.counts[counter] += 1
        else:
            self.counts["blocked"] += 1

    def _upstream(self, client: Any, now: float) -> UdpPort:
        port = self._clients.get(client)
        if port is None:
            if len(self._clients) >= self._max_clients:
                self._drop_client(next(iter(self._clients)))
            port = UdpPort(self._upstream_host, 0, scheduler=self.scheduler)
            port.on_readable(lambda: self._from_server(client, port))
            self._clients[client] = port
            self.counts["clients"] += 1
        else:
            self._clients.move_to_end(client)
        self._heard[client] = now
        return port

    def _drop_client(self, client: Any) -> None:
        port = self._clients.pop(client)
        self._heard.pop(client, None)
        self._impair.forget(("up", client))
        self._impair.forget(("down", client))
        port.close()

    def _sweep(self) -> None:
        cutoff = self.scheduler.clock.now() - self._idle
        for client in [c for c, t in self._heard.items() if t < cutoff]:
            self._drop_client(client)
        if not self._closed:
            self._sweeper = self.scheduler.call_later(self._idle / 2, self._sweep)


# -- command line ---------------------------------------------------------------


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6HOST]:PORT`` with a numeric host."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a numeric HOST:PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return host, number


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a probability is between 0 and 1, got {value}")
    return value


def _delay_ms(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    try:
        pair = (float(low) / 1000.0, float(high or low) / 1000.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MS or MIN-MAX milliseconds, got {text!r}") from None
    if not 0.0 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"delay must be 0 <= MIN <= MAX, got {text!r}")
    return pair


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flowcast chaos",
        description="Relay UDP between two estates, committing faults on purpose.",
    )
    p.add_argument("--listen", type=parse_endpoint, required=True, help="HOST:PORT clients send to (port 0: any)")
    p.add_argument("--forward", type=parse_endpoint, required=True, help="HOST:PORT of the server estate")
    p.add_argument("--loss", type=_probability, default=0.0, help="probability a datagram is dropped")
    p.add_argument("--dup", type=_probability, default=0.0, help="probability a datagram is sent twice")
    p.add_argument("--reorder", type=_probability, default=0.0, help="probability a datagram is held back")
    p.add_argument("--corrupt", type=_probability, default=0.0, help="probability of 1-3 flipped bits")
    p.add_argument("--delay", type=_delay_ms, default=(0.0, 0.0), help="one-way delay, MS or MIN-MAX")
    p.add_argument("--reorder-window", type=float, default=None, help="most extra delay of a held-back datagram, MS")
    p.add_argument("--seed", type=int, default=None, help="seed of the fault choices (default: random, printed)")
    p.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    window = None if args.reorder_window is None else args.reorder_window / 1000.0
    try:
        relay = ChaosRelay(
            args.listen,
            args.forward,
            loss=args.loss,
            duplicate=args.dup,
            reorder=args.reorder,
            corrupt=args.corrupt,
            delay=args.delay,
            reorder_window=window,
            seed=args.seed,
        )
    except (OSError, ValueError) as error:
        print(f"flowcast chaos: {error}", file=sys.stderr)
        return 1
    host, port = relay.address
    shown = f"[{host}]" if ":" in host else host
    fhost, fport = args.forward
    print(
        f"chaos: listening on {shown}:{port} forwarding to {fhost}:{fport} seed={relay.seed}",
        flush=True,
    )

    def on_signal(signum: int, _stack: Any) -> None:  # the interrupted stack, unused
        relay.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        relay.run(args.duration)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print(f"chaos: {relay.summary()}", flush=True)
        relay.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
