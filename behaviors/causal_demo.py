"""The causal example's collaborative log (houses/causal-{alpha,beta,gamma}.yaml, flows/causal-log.flo).

Loaded by ``flows/causal-log.flo``::

    do causal subscribe to got with topic "log" valid "causal demo valid"
    do causal demo writer with me "alpha" posts 10 rate 4.0 file "houses/run/causal-alpha/log.jsonl" from got to outbox

Each estate posts ``posts`` lines to the topic ``log`` and answers every
post of the other estates once; an answer names the post it answers as a
dep, so no estate can deliver it before that post.  Every delivery is
recorded as one JSON line, from a watcher on the deliveries queue (in the
turn it lands), so ``flowcast demo causal`` can check the order each
estate delivered in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flowcast.behaving import Io, behaviour

#: Relative paths are taken from the folder holding behaviors/ and houses/.
ROOT = Path(__file__).resolve().parent.parent
#: What predicate 2 accepts: a JSON object with who wrote it and the text, small enough to read.
MAX_TEXT = 280


@behaviour("causal.demo.valid")
def valid(io: Io, msg: Any) -> bool | str:
    """Predicate 2 of the example: the content is a JSON object ``{"from", "text"}`` with at most 280 characters of text."""
    try:
        body = json.loads(msg.content)
    except ValueError:
        return "not JSON"
    if not isinstance(body, dict) or not isinstance(body.get("from"), str) or not isinstance(body.get("text"), str):
        return "not a log line"
    return len(body["text"]) <= MAX_TEXT or "text too long"


@behaviour("causal.demo.writer")
class Writer:
    """Post ``posts`` lines, ``rate`` a second, into the output queue; answer each other estate's post once; record deliveries."""

    def __init__(self, io: Io, me: str, file: str, posts: int = 10, rate: float = 4.0) -> None:
        if io.input is None or not hasattr(io.input, "queue") or io.output is None:
            raise ValueError("causal demo writer needs 'from DELIVERIES to OUTBOX'")
        self.io = io
        self.me = me
        self.posts = posts
        self.every = 1.0 / rate
        self.path = Path(file) if Path(file).is_absolute() else ROOT / file
        self.written = 0
        self.next_at: float | None = None
        self.delivered = 0

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
                body = json.loads(item["content"])
                line = {"hash": item["hash"], "publisher": item["publisher"], "deps": item["deps"], "tags": item["tags"],
                        "from": body["from"], "text": body["text"], "answers": body.get("answers"), "lag": round(item["lag"], 4)}
                out.write(json.dumps(line) + "\n")
                self.delivered += 1
                if body["from"] != self.me and "post" in item["tags"]:
                    text = f"{self.me} read {body['from']}'s post {body['n']}"
                    self.io.output.push({"content": json.dumps({"from": self.me, "text": text, "answers": item["hash"]}),
                                         "deps": [item], "tags": ["reply"]})
                if self.delivered % 15 == 0:
                    print(f"{self.me}: {self.delivered} delivered, the latest: {body['text']!r}", flush=True)

    def __call__(self) -> None:
        now = self.io.now
        if self.next_at is None:
            self.next_at = now
        while self.written < self.posts and now >= self.next_at:
            text = f"{self.me} post {self.written}"
            self.io.output.push({"content": json.dumps({"from": self.me, "n": self.written, "text": text}), "tags": ["post"]})
            self.written += 1
            self.next_at += self.every

    def exit(self) -> None:
        if self._landed in self.io.input.watchers:
            self.io.input.watchers.remove(self._landed)
