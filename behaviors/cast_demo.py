"""The CAST example's two ends (houses/cast-abc.yaml, houses/cast-xyz.yaml).

Loaded by ``flows/cast-alice.flo`` and ``flows/cast-bob.flo``::

    do cast demo alice with count 60 rate 10.0 from acks to outbox
    do cast demo record with who "bob" file "houses/run/xyz/bob.jsonl" from inbox

alice writes numbered lines to bob into the queue ``cast publish`` drains,
and says how many the cache acknowledged (on disk).  A receiver records
each delivery as one JSON line, from a watcher on its queue share: the
line is written in the same turn the inbox commits the delivery, so a
stop of the house between the two cannot lose one (``flowcast demo
cast`` checks the file: everything once, in order).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flowcast.behaving import Io, behaviour

#: Relative paths are taken from the folder holding behaviors/ and houses/.
ROOT = Path(__file__).resolve().parent.parent


@behaviour("cast.demo.alice")
class Alice:
    """Push ``count`` lines into the output queue, ``rate`` a second; report acknowledgements from the input queue."""

    def __init__(self, io: Io, count: int = 60, rate: float = 10.0) -> None:
        if io.input is None or io.output is None:
            raise ValueError("cast demo alice needs 'from ACKS to OUTBOX'")
        self.io = io
        self.count = count
        self.every = 1.0 / rate
        self.written = 0
        self.acked = 0
        self.next_at: float | None = None

    def __call__(self) -> None:
        now = self.io.now
        if self.next_at is None:
            self.next_at = now
        while self.written < self.count and now >= self.next_at:
            self.io.output.push(f"hello bob, line {self.written}")
            self.written += 1
            self.next_at += self.every
        acks = self.io.input.queue
        while acks:
            acks.popleft()
            self.acked += 1
            if self.acked % 10 == 0 or self.acked == self.count:
                print(f"alice: {self.acked} of {self.count} lines on disk in abc's cache", flush=True)


@behaviour("cast.demo.record")
class Record:
    """Append each message landing in the input queue to ``file`` (JSON lines) as it lands."""

    def __init__(self, io: Io, who: str, file: str) -> None:
        if io.input is None or not hasattr(io.input, "queue"):
            raise ValueError("cast demo record needs 'from QUEUE'")
        self.io = io
        self.who = who
        self.path = Path(file) if Path(file).is_absolute() else ROOT / file
        self.count = 0

    def enter(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.io.input.watchers.append(self._landed)
        self._landed(self.io.input)  # what came before the frame was entered

    def _landed(self, share: Any) -> None:
        queue = share.queue
        if not queue:
            return
        with self.path.open("a", encoding="utf-8") as out:
            while queue:
                item = queue.popleft()
                data = item.get("data")
                if item.get("tag") == "cast.gap":
                    line = {"gap": data}
                else:
                    line = {"seq": item.get("seq"), "id": item["id"].hex(), "text": data.decode("utf-8", "replace")}
                    self.count += 1
                    if self.count % 10 == 1:
                        print(f"{self.who}: got {line['text']!r} (seq {line['seq']})", flush=True)
                out.write(json.dumps(line) + "\n")

    def __call__(self) -> None:
        return None

    def exit(self) -> None:
        if self._landed in self.io.input.watchers:
            self.io.input.watchers.remove(self._landed)
