"""The keep writer outlives a transient write failure, and says so when it cannot."""

from __future__ import annotations

import errno

import pytest

from flowcast.transport.keepwriter import KeepWriter


def _failing(writer: KeepWriter, times: int | None) -> list[int]:
    """Make ``writer``'s first ``times`` batch writes (all, if None) fail as a full disk would."""
    calls: list[int] = []
    real = writer._write

    def write(batch):
        calls.append(len(batch))
        if times is None or len(calls) <= times:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(batch)

    writer._write = write  # type: ignore[method-assign]
    return calls


def test_a_transient_write_failure_is_retried_and_the_writer_goes_on(tmp_path):
    """Was a finding: one OSError stopped the writer thread for good -- room() 0 forever,
    every later join dropped as keep_busy, and submit() queued writes nobody took."""
    writer = KeepWriter(limit=100)
    writer.backoff, writer.backoff_max = 0.001, 0.004  # read at each failure
    calls = _failing(writer, 2)
    try:
        first = writer.submit(tmp_path / "a.json", b"{}")
        assert writer.wait(first)  # on disk after two failed attempts
        assert writer.failures == 2 and len(calls) == 3 and writer.error is None
        assert (tmp_path / "a.json").read_bytes() == b"{}"
        later = [writer.submit(tmp_path / f"r{n}.json", b"{}") for n in range(20)]
        assert writer.wait(later[-1]) and writer.room() == 100
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a.json"] + [f"r{n}.json" for n in range(20)])
    finally:
        writer.close()


def test_a_writer_that_fails_every_retry_stops_and_refuses_more_work(tmp_path):
    writer = KeepWriter(limit=100)
    writer.retries, writer.backoff, writer.backoff_max = 3, 0.001, 0.002  # read at each failure
    calls = _failing(writer, None)
    try:
        ticket = writer.submit(tmp_path / "a.json", b"{}")
        assert not writer.wait(ticket)  # returns once the writer gave up, not at the timeout
        assert isinstance(writer.error, OSError) and writer.failures == 4 and len(calls) == 4
        assert writer.durable == 0 and writer.room() == 0 and writer.pending == 0
        with pytest.raises(RuntimeError, match="failed for good after 4 attempts"):
            writer.submit(tmp_path / "b.json", b"{}")
        assert not (tmp_path / "a.json").exists()
    finally:
        writer.close()
