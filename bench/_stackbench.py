"""Two-process measurements of flowcast's own stacks (road and lane).

Shared by ``bench/road.py`` and ``bench/lane.py`` (run those; they print
one line per figure, or one JSON object with ``--json``; this module is
not a benchmark of its own).  The receiving stack
runs in a spawned child; the sending one here.  Like ``bench/peers.py``,
throughput is counted at the receiver, from the moment the sender started
(``time.monotonic`` is one clock for all processes) to the moment the last
message was delivered, and the sender must also see every message reported
delivered (road) or sent (lane).  Every loop is bounded by count and time.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import select
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flowcast.runtime.spin import Spin  # noqa: E402

GRACE = 10.0
ECHO_WARMUP = 100  # echo round trips made before the measured ones


def tune_malloc() -> bool:
    """Keep freed memory in the heap instead of returning it to the OS at once.

    glibc trims the heap top and maps large blocks afresh, so each 64 KiB
    buffer (datagram, ciphertext, joined message) costs page faults.  This
    is process-wide allocator tuning a deployment can apply (it is what
    ``MALLOC_TRIM_THRESHOLD_``/``MALLOC_MMAP_THRESHOLD_`` do); figures that
    use it say so.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
        ok &= libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
        ok &= libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (its maximum)
        return bool(ok)
    except (OSError, AttributeError):
        return False


def _make(kind: str, name: str, peer: str, options: dict[str, Any], rundir: str | None) -> Any:
    if kind == "road":
        from flowcast.transport.keep import Keep
        from flowcast.transport.ports import UdpPort
        from flowcast.transport.road import RoadStack

        keep = Keep(None)
        keep.ensure_local(name)
        gro = options.pop("_gro", False)  # an estate's road bound to loopback has none (routing.wiring)
        return RoadStack(UdpPort("127.0.0.1", 0, gro=gro), keep, policy="always", **options)
    from flowcast.transport.lane import LaneStack
    from flowcast.transport.lanekeys import LaneKeys
    from flowcast.transport.ports import UxdPort

    secret = options.pop("_lane_secret", None)  # authenticated, as an estate's lane: each side derives its own keys
    keys = LaneKeys.derive(secret, name, [name, peer]) if secret else None
    return LaneStack(UxdPort(rundir, name), name, {peer: os.path.join(rundir, peer)}, keys=keys, **options)


#: This process's waiting policy: the scheduler's (flowcast.runtime.spin), so a figure is a house's.
_SPIN = Spin()


def _wait(stack: Any, timeout: float) -> None:
    """Block until the port is readable (or writable, if output is queued) or a timer is due,
    spinning first while traffic is dense, as a house's scheduler does."""
    deadline = stack.next_deadline()
    if deadline is not None:
        timeout = min(timeout, max(0.0, deadline - stack.clock.now()))
    readers = [stack.port.fileno()]
    writers = [stack.port.writable_fileno()] if stack._outq else []

    def poll(wait: float | None) -> bool:
        ready = select.select(readers, writers, [], wait)
        return bool(ready[0] or ready[1])

    _SPIN.wait(poll, timeout)


def _child(conn: Any, kind: str, mode: str, count: int, budget: float, options: dict[str, Any], rundir: str | None) -> None:
    gc.disable()
    try:
        if options.pop("_tune_malloc", False):
            tune_malloc()
        stack = _make(kind, "beta", "alpha", options, rundir)
        conn.send(("ready", stack.address))
        end = time.monotonic() + budget + GRACE
        if kind == "road":
            while not stack.remotes and time.monotonic() < end:
                stack.service()
                _wait(stack, 0.05)
        got = 0
        nbytes = 0
        last = None
        receive_many = stack.receive_many
        cpu0 = time.process_time()
        if mode == "echo":
            count += ECHO_WARMUP
            while got < count and time.monotonic() < end:
                stack.service()
                for message in receive_many():
                    stack.send_bytes(message.data, "alpha")
                    got += 1
                stack.flush()
                if got < count:
                    _wait(stack, 0.05)
            for _ in range(100):  # let the last replies and acks go
                stack.service()
                _wait(stack, 0.01)
            conn.send(("done", {"echoed": got}))
            return
        while got < count and time.monotonic() < end:
            stack.service()
            batch = receive_many()
            if batch:
                got += len(batch)
                for message in batch:
                    nbytes += len(message.data)
                last = time.monotonic()
            else:
                _wait(stack, 0.05)
        cpu = time.process_time() - cpu0
        linger = time.monotonic() + 1.0
        while time.monotonic() < linger:  # final acks so the sender sees delivery
            stack.service()
            _wait(stack, 0.02)
        conn.send(("done", {"received": got, "bytes": nbytes, "last": last, "cpu": cpu}))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=4)))


def _expect(conn: Any, kind: str, timeout: float) -> Any:
    if not conn.poll(timeout):
        raise RuntimeError(f"receiver gave no {kind!r} within {timeout:.0f} s")
    message = conn.recv()
    if message[0] == "error":
        raise RuntimeError(f"receiver failed: {message[1]}\n{message[2]}")
    return message[1]


def measure(kind: str, mode: str, size: int, count: int, budget: float, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One figure: ``mode`` is ``stream`` (one way) or ``echo`` (round trips).

    The cyclic GC is off in both processes while measuring, as in
    ``_common.timed``: a collection is noise, not a property of the stack
    (the stacks make no reference cycles per message).
    """
    gc.disable()
    options = dict(options or {})
    if options.get("_tune_malloc"):
        tune_malloc()
    try:
        return _measure(kind, mode, size, count, budget, options)
    finally:
        gc.enable()


def _measure(kind: str, mode: str, size: int, count: int, budget: float, options: dict[str, Any]) -> dict[str, Any]:
    rundir = tempfile.mkdtemp(prefix="fcbench-") if kind == "lane" else None
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, kind, mode, count, budget, dict(options), rundir), daemon=True)
    proc.start()
    child.close()
    stack = None
    tuned = options.pop("_tune_malloc", False)
    try:
        address = _expect(parent, "ready", 30)
        stack = _make(kind, "alpha", "beta", options, rundir)
        if kind == "road":
            stack.join(address)
            end = time.monotonic() + 10
            while not stack.is_allowed("beta") and time.monotonic() < end:
                stack.service()
                _wait(stack, 0.05)
            if not stack.is_allowed("beta"):
                raise RuntimeError("no session within 10 s")
        payload = os.urandom(size)
        send = stack.send_bytes
        service = stack.service
        if mode == "echo":
            times = []
            inbox = stack.inbox
            stop = time.monotonic() + budget
            # The first WARMUP round trips are not counted: a running house is
            # warm (first-use allocations, the peer's first wake-ups).
            for n in range(count + ECHO_WARMUP):
                if time.monotonic() > stop:
                    break
                t0 = time.perf_counter()
                send(payload, "beta")
                stack.flush()
                limit = time.monotonic() + 2.0
                while not inbox and time.monotonic() < limit:
                    _wait(stack, 0.05)
                    service()
                if not inbox:
                    break
                stack.receive()
                if n >= ECHO_WARMUP:
                    times.append(time.perf_counter() - t0)
            _expect(parent, "done", budget + GRACE)
            if not times:
                return {"value": None, "note": "no round trip completed"}
            return {
                "value": statistics.median(times) * 1e6,
                "note": f"{len(times)} round trips; p90 {sorted(times)[int(len(times) * 0.9)] * 1e6:.0f} us, "
                f"p99 {sorted(times)[int(len(times) * 0.99)] * 1e6:.0f} us",
            }
        outs = []  # every 256th message and the last: a stream completes in order
        high_water = max(64, (16 << 20) // (size + 32))
        chunk = max(1, min(512, high_water // 4))  # service often: a Unix datagram queue holds only 10
        start = time.monotonic()
        cpu0 = time.process_time()
        stop = start + budget
        sent = 0
        while sent < count and time.monotonic() < stop:
            n = min(chunk, count - sent)
            for _ in range(n - 1):
                send(payload, "beta")
            outs.append(send(payload, "beta"))
            sent += n
            service()
            while stack.pending() > high_water and time.monotonic() < stop + GRACE:
                _wait(stack, 0.01)
                service()
        end = time.monotonic() + GRACE
        while stack.pending() and time.monotonic() < end:
            _wait(stack, 0.01)
            service()
        cpu = time.process_time() - cpu0
        done = _expect(parent, "done", budget + 2 * GRACE)
        ok = sent if all(o.state in ("delivered", "sent") for o in outs) else 0
        if done["received"] != sent or done["last"] is None:
            return {"value": None, "note": f"receiver got {done['received']} of {sent}"}
        elapsed = done["last"] - start
        note = f"{sent:,} msgs in {elapsed:.2f} s; {ok:,} reported {'delivered' if kind == 'road' else 'sent'}"
        # CPU per message on each side: what the figure would be on idle cores
        note += f"; CPU {cpu * 1e6 / sent:.2f} us/msg sending, {done['cpu'] * 1e6 / sent:.2f} us/msg receiving"
        if kind == "road":
            link = stack.remote("beta").session.link
            note += f"; {link.counts['resent']} segments resent"
        if tuned:
            note += "; malloc tuned (trim/mmap thresholds) in both processes"
        return {"msgs": sent / elapsed, "mbps": done["bytes"] / elapsed / 1e6, "note": note, "ok": ok == sent}
    finally:
        if stack is not None:
            stack.close()
        parent.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
        if rundir is not None:
            shutil.rmtree(rundir, ignore_errors=True)


def best(repeats: int, run: Any, key: str, lower: bool = False) -> dict[str, Any]:
    """Best of ``repeats`` runs by ``key`` (a failed run has value None)."""
    chosen = None
    for _ in range(max(1, repeats)):
        try:
            result = run()
        except Exception as error:  # noqa: BLE001 - a failed run is a figure of n/a, not a crash
            result = {key: None, "note": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
        value = result.get(key)
        if chosen is None or chosen.get(key) is None:
            chosen = result
        elif value is not None and ((value < chosen[key]) if lower else (value > chosen[key])):
            chosen = result
    return chosen  # type: ignore[return-value]


def ratios(value: float | None, peers: dict[str, Any], names: dict[str, str], lower: bool = False) -> dict[str, float]:
    """``{label: value / peer}`` for each peer figure that exists (for times: peer / value)."""
    out = {}
    for label, name in names.items():
        peer = peers.get(name, {}).get("value")
        if value and peer:
            out[f"x {label}"] = (peer / value) if lower else (value / peer)
    return out
