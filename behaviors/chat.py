"""Chat between estates: each posts its script's lines to the others' inboxes.

Loaded by ``flows/chat.flo``, which every ``houses/chat-*.yaml`` runs in its
manor (a chat house talks on roads, so it is the manor)::

    do chat room with members "chat-ann chat-bob chat-carol" to .chat.room
    do chat listen with inbox "chat.inbox" from .chat.room to .chat.heard
    do chat talk with script "flows/chat-{name}.txt" every 1.0 from .chat.room to .chat.said
    do chat over from .chat.heard

An estate's short *name* is its name after the first ``-`` (``chat-ann`` is
``ann``); lines are printed as ``[bob] hello ann``.  A line travels as a
routed message tagged ``line`` with data ``{n, text}``; after its last line
an estate sends ``over`` with data ``{lines: N}``, so the others know when
they have heard everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowcast.behaving import Io, behaviour
from flowcast.routing import Route, presence_share

#: Relative script paths are taken from the folder holding behaviors/ and flows/.
ROOT = Path(__file__).resolve().parent.parent


def _router(io: Io) -> Any:
    router = getattr(io.house, "router", None)
    if router is None:
        raise ValueError("chat behaviours run in a house started from an estate layout (no router here)")
    return router


def short(estate: str) -> str:
    """``chat-ann`` -> ``ann``."""
    return estate.partition("-")[2] or estate


@behaviour("chat.room")
def room(io: Io, members: str, channel: str = "main") -> None:
    """Set the output's ``ready`` once every other member's road presence is ``alive``.

    ``members`` lists the room's estates, space-separated; this estate's own
    name may be among them.  The output's ``others`` field lists the rest
    (for ``chat talk`` and ``chat listen``).  Run in the manor: it reads
    the presence share of road ``channel``.
    """
    share = io.output
    if share is None:
        raise ValueError("chat room needs an output share: 'do chat room ... to SHARE'")
    me = _router(io).estate
    others = [name for name in members.split() if name != me]
    presence = io.store.share(presence_share(channel))
    ready = all(presence.get(name) == "alive" for name in others)
    if share.get("others") != others or share.get("ready") != ready:
        share.update(others=others, ready=ready)


@behaviour("chat.talk")
class Talk:
    """Send one line of this estate's script every ``every`` seconds to every other member.

    ``script`` is a text file, one line per message (blank lines and lines
    starting with ``#`` are skipped); ``{name}`` in it is this estate's short
    name, and a relative path is taken from the project folder (the one
    holding ``behaviors/``).  Members come from the input share's ``others``
    (``chat room``).  The output share counts ``sent`` lines and gets
    ``done`` after the last one, when ``over`` has gone to everyone.
    """

    def __init__(self, io: Io, script: str, every: float = 1.0, inbox: str = "chat.inbox") -> None:
        if io.input is None or io.output is None:
            raise ValueError("chat talk needs 'from ROOM to SHARE'")
        self.io = io
        self.script = script
        self.every = every
        self.inbox = inbox
        self.lines: list[str] | None = None
        self.sent = 0
        self.last: float | None = None

    def _load(self, name: str) -> list[str]:
        path = Path(self.script.format(name=name))
        if not path.is_absolute():
            path = ROOT / path
        text = path.read_text(encoding="utf-8")
        return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]

    def __call__(self) -> None:
        io, out = self.io, self.io.output
        if out.get("done"):
            return
        router = _router(io)
        if self.lines is None:
            self.lines = self._load(short(router.estate))
        if self.last is not None and io.now - self.last < self.every - 1e-9:
            return
        self.last = io.now
        others = io.input.get("others") or []
        if self.sent < len(self.lines):
            self.sent += 1
            line = {"n": self.sent, "text": self.lines[self.sent - 1]}
            for estate in others:
                router.send(Route.make(self.inbox, estate=estate), line, src=out.name, tag="line")
            out.update(sent=self.sent)
            return
        for estate in others:
            router.send(Route.make(self.inbox, estate=estate), {"lines": self.sent}, src=out.name, tag="over")
        out.update(done=True)


@behaviour("chat.listen")
class Listen:
    """Print every line that lands in the queue share ``inbox`` as ``[sender] text``.

    The queue is made here, when the flow is built, so nothing that arrives
    early is refused.  The output share counts ``heard`` lines, lists the
    members that said ``over`` and gets ``done`` once every member in the
    input share's ``others`` (``chat room``) has.
    """

    def __init__(self, io: Io, inbox: str = "chat.inbox") -> None:
        if io.input is None or io.output is None:
            raise ValueError("chat listen needs 'from ROOM to SHARE'")
        self.io = io
        self.inbox = io.store.queue(inbox)
        self.heard = 0
        self.over: list[str] = []

    def __call__(self) -> None:
        io, queue = self.io, self.inbox.queue
        changed = False
        while queue:
            message = queue.popleft()
            try:
                sender = message["route"]["src"][2]
                tag, data = message["tag"], message["data"]
            except (KeyError, IndexError, TypeError):
                continue
            if tag == "line" and isinstance(data, dict):
                self.heard += 1
                print(f"[{short(sender)}] {data.get('text')}", flush=True)
                changed = True
            elif tag == "over" and sender not in self.over:
                self.over.append(sender)
                changed = True
        others = io.input.get("others")
        done = bool(others) and all(name in self.over for name in others)
        if changed or done != bool(io.output.get("done")):
            io.output.update(heard=self.heard, over=list(self.over), done=done)


@behaviour("chat.over")
def over(io: Io) -> None:
    """Print ``ann: chat over, heard N lines`` from the input share (``chat listen``'s)."""
    if io.input is None:
        raise ValueError("chat over needs 'from SHARE' (chat listen's output)")
    heard = io.input.get("heard") or 0
    print(f"{short(_router(io).estate)}: chat over, heard {heard} lines", flush=True)
