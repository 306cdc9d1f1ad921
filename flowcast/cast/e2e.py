"""End to end over CAST: contact requests, acceptance, and sealed messages between users of two estates.

A layer on top of :class:`~flowcast.cast.service.CastService`, in the
house where the users live.  The estates store and forward; they see a
name, an id, the publisher, the recipients and sizes, never content.

Names (the publishing estate's prefix, the user, the id in hex)::

    <estate>/contacts/<user>/<id>    signed contact cards: request, accept
    <estate>/messages/<user>/<id>    sealed boxes, recipients [peer]

Why a contact must be accepted before content is shown: spam costs the
sender nothing, so the receiver decides whom it hears from, and the
acceptance is also where the two learn each other's keys.  Content from a
sender not (yet) accepted is *held* in the contacts store, counted and
listable, and handed over in order on acceptance; content that does not
open is refused with a reason and counted.  Nothing is dropped silently,
nothing unverified reaches the application.

Keys are trusted on first use: the first card from ``alice@abc`` binds her
keys, and a later card with other keys is refused (``key_changed``).  The
estate abc could substitute keys in alice's very first request; comparing
fingerprints out of band (``fingerprint()``) is the user's defence.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections import Counter, deque
from hashlib import blake2b
from pathlib import Path
from typing import Any

from flowcast.cast.contacts import Contact, Contacts, Held
from flowcast.cast.identity import IdentityError, UserKeys, check_address, check_user
from flowcast.cast.ids import new_id
from flowcast.cast.sealing import CARD_KINDS, SealError, card, open_box, read_card, read_outer, seal
from flowcast.errors import Error

__all__ = ["ContactError", "EndToEnd", "User", "fingerprint", "CONTACTS", "MESSAGES"]

CONTACTS = "contacts"
MESSAGES = "messages"
log = logging.getLogger("flowcast.cast")
#: Content held per (user, sender) before it is refused as ``held_full``: spam may cost a count, not a disk.
MAX_HELD = 1000


class ContactError(ValueError, Error):
    """A contact operation the state does not allow (``reason``: not_accepted, no_request, ...)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def fingerprint(verify: bytes, box: bytes) -> str:
    """A short hex digest of a user's two public keys, to compare out of band."""
    return blake2b(verify + box, digest_size=10).hexdigest()


class EndToEnd:
    """The end-to-end users of one house: ``cast`` is the house's CastService, ``home`` the estate dir.

    Messages for the house's users arrive through subscriptions made by
    :meth:`follow` into the queue share ``into``; each user's opened
    messages go to the queue share ``mail.<user>``.
    """

    def __init__(self, cast: Any, home: str | os.PathLike[str], *, into: str = "e2e.in", max_held: int = MAX_HELD) -> None:
        self.cast = cast
        self.home = Path(home)
        router = cast.router
        self.estate: str = router.estate
        self.store = router.store
        self.clock = router.scheduler.clock.now
        self.contacts = Contacts(self.home / "cast" / "contacts.sqlite3")
        self.into = into
        self.max_held = max_held
        self.users: dict[str, UserKeys] = {}
        self.counts: Counter[str] = Counter()
        #: The latest refusals, newest last: {reason, detail, name, id}.
        self.refusals: deque[dict[str, Any]] = deque(maxlen=256)
        self.gaps: list[tuple[int, int]] = []
        self.follows: list[Any] = []
        self.store.queue(into).watchers.append(self._on_arrivals)

    # -- users and peers ------------------------------------------------------------------

    def user(self, name: str) -> "User":
        """The local user ``name``, keys loaded or made (0600 under the estate dir)."""
        return User(self, self._keys(name, create=True))

    def follow(self, estate: str, **options: Any) -> list[Any]:
        """Subscribe to ``estate``'s contact cards and messages, for every user of this house."""
        subs = [self.cast.subscribe(f"{estate}/{kind}/**", estate=estate, into=self.into, **options) for kind in (CONTACTS, MESSAGES)]
        self.follows.extend(subs)
        return subs

    def request(self, user: str, peer: str) -> Any:
        """Ask ``peer`` (user@estate) to accept ``user``: a signed card with the user's keys; the publish ticket."""
        keys, peer = self._me(user), _peer(peer)
        found = self.contacts.get(keys.user, peer)
        if found is not None and found.state == "pending":
            return self.accept(user, peer)  # they asked first: asking back is agreeing
        if found is not None and found.state == "accepted":
            raise ContactError(f"{keys.address} and {peer} are contacts already", "already_contacts")
        self.contacts.put(keys.user, peer, "requested", None, None, self.clock())
        self.counts["requests_sent"] += 1
        return self._publish_card("request", keys, peer)

    def accept(self, user: str, peer: str) -> Any:
        """Accept ``peer``'s request: they get ``user``'s keys, and what they sent so far is delivered, in order."""
        keys, peer = self._me(user), _peer(peer)
        found = self.contacts.get(keys.user, peer)
        if found is None or found.state not in ("pending", "accepted") or found.verify is None:
            raise ContactError(f"{peer} has not asked {keys.address} (nothing pending to accept)", "no_request")
        self.contacts.put(keys.user, peer, "accepted", found.verify, found.box, self.clock())
        self.counts["accepted"] += 1
        ticket = self._publish_card("accept", keys, peer)
        self._release(keys, peer)
        return ticket

    def refuse(self, user: str, peer: str) -> int:
        """Refuse ``peer``: their held content is discarded (the count is returned) and later content refused.

        Nothing is sent back: a spammer learns nothing from a refusal.
        """
        keys, peer = self._me(user), _peer(peer)
        found = self.contacts.get(keys.user, peer)
        self.contacts.put(keys.user, peer, "refused", found.verify if found else None, found.box if found else None, self.clock())
        held = self.contacts.held(keys.user, peer)
        if held:
            self.contacts.release(keys.user, peer, held[-1].n)
        self.counts["refused_contacts"] += 1
        self.counts["discarded"] += len(held)
        return len(held)

    def send(self, user: str, peer: str, body: bytes) -> Any:
        """Seal ``body`` for ``peer`` and publish it (recipients ``[peer]``); the publish ticket."""
        keys, peer = self._me(user), _peer(peer)
        found = self.contacts.get(keys.user, peer)
        if found is None or found.state != "accepted" or found.box is None:
            raise ContactError(f"{peer} has not accepted {keys.address}: send a contact request first", "not_accepted")
        if body.__class__ is not bytes:
            raise TypeError(f"a message body is bytes, not {type(body).__name__}")
        id = new_id()
        name = f"{self.estate}/{MESSAGES}/{keys.user}/{id.hex()}"
        ticket = self.cast.publish(name, seal(keys, peer, found.box, name, id, body), id=id, publisher=keys.user, recipients=[peer])
        self.counts["sent"] += 1
        return ticket

    def pending(self, user: str) -> list[Contact]:
        """Requests waiting for ``user`` to accept or refuse."""
        return self.contacts.list(check_user(user), "pending")

    def held(self, user: str, peer: str | None = None) -> list[Held]:
        """Content waiting for ``user`` to accept its sender (still sealed), in the order it came."""
        return self.contacts.held(check_user(user), _peer(peer) if peer is not None else None)

    def status(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "refusals": len(self.refusals), "gaps": list(self.gaps),
                "users": {u: {"pending": len(self.pending(u)), "held": len(self.held(u))} for u in sorted(self.users)}}

    def close(self) -> None:
        """Stop taking arrivals (a new EndToEnd on the same estate dir takes over) and close the store."""
        watchers = self.store.queue(self.into).watchers
        if self._on_arrivals in watchers:
            watchers.remove(self._on_arrivals)
        self.contacts.close()

    # -- arrivals -------------------------------------------------------------------------

    def _on_arrivals(self, queue: Any) -> None:
        """Take what CAST delivered, oldest first; an item leaves the queue only once it is dealt with.

        The CAST inbox has already recorded it as delivered, so an item
        this layer failed to store (the contacts file could not be written)
        stays at the head of the queue and is tried again on the next
        arrival, never lost.
        """
        while queue.queue:
            item = queue.queue[0]
            if item.get("tag") == "cast":
                try:
                    self._take(item)
                except SealError as error:
                    self._refused(error.reason, str(error), item)
                except sqlite3.Error:
                    log.warning("CAST e2e %s: the contacts store failed; %s waits in %r", self.contacts.path, item.get("name"), self.into, exc_info=True)
                    self.counts["store_failed"] += 1
                    return
            elif item.get("tag") == "cast.gap":
                data = item.get("data") or {}
                self.gaps.append((data.get("from"), data.get("upto")))
                self.counts["gaps"] += 1
            queue.queue.popleft()

    def _take(self, item: dict[str, Any]) -> None:
        name, id, publisher = item.get("name"), item.get("id"), item.get("publisher")
        outer = read_outer(item.get("data"))
        parts = name.split("/") if isinstance(name, str) else []
        kind = CONTACTS if outer["k"] in CARD_KINDS else MESSAGES
        if len(parts) != 4 or parts[1] != kind or parts[2] != publisher or outer["from"] != f"{publisher}@{parts[0]}":
            raise SealError(f"{outer['from']!r} is not who published {str(name)[:60]!r} (publisher {str(publisher)[:40]!r})", "forged_sender")
        user, estate = check_address(outer["to"])
        keys = self._keys(user, create=False) if estate == self.estate else None
        if keys is None:
            raise SealError(f"{outer['to']!r} is no user of this house", "not_here")
        peer = outer["from"]
        if kind == CONTACTS:
            self._card(keys, read_card(outer, name, id))
            return
        found = self.contacts.get(keys.user, peer)
        if found is not None and found.state == "refused":
            raise SealError(f"{keys.address} refused {peer}", "contact_refused")
        if found is None or found.state != "accepted":
            if self.contacts.count_held(keys.user, peer) >= self.max_held:
                raise SealError(f"{self.max_held} messages from {peer} already wait for {keys.address} to accept", "held_full")
            self.contacts.hold(keys.user, peer, name, id, float(item.get("stamp") or self.clock()), item["data"])
            self.counts["held"] += 1
            return
        self._deliver(keys, open_box(outer, keys, found.box, name, id), name, id, item.get("stamp"))

    def _card(self, keys: UserKeys, got: Any) -> None:
        peer = got.sender
        found = self.contacts.get(keys.user, peer)
        if found is not None and found.verify is not None and (found.verify, found.box) != (got.verify, got.box):
            raise SealError(f"{peer} came with other keys than the ones {keys.address} holds", "key_changed")
        state = found.state if found is not None else None
        if got.kind == "request":
            if state == "refused":
                raise SealError(f"{keys.address} refused {peer}", "contact_refused")
            if state == "accepted":
                self.counts["repeat_cards"] += 1
            elif state == "requested":  # both asked: both agreed
                self.contacts.put(keys.user, peer, "pending", got.verify, got.box, self.clock())
                self.counts["requests"] += 1
                self.accept(keys.user, peer)
            else:
                self.contacts.put(keys.user, peer, "pending", got.verify, got.box, self.clock())
                self.counts["requests"] += 1
            return
        if state == "accepted":
            self.counts["repeat_cards"] += 1
        elif state == "requested":
            self.contacts.put(keys.user, peer, "accepted", got.verify, got.box, self.clock())
            self.counts["accepted_by_peer"] += 1
            self._release(keys, peer)
        else:
            raise SealError(f"{peer} accepted a request {keys.address} never made", "unsolicited")

    def _release(self, keys: UserKeys, peer: str) -> None:
        """Held content of ``peer``, in the order it came: opened and delivered, or refused with its reason."""
        found = self.contacts.get(keys.user, peer)
        held = self.contacts.held(keys.user, peer)
        if not held:
            return
        # forgotten on disk before it is handed over, as CAST's inbox commits before it pushes:
        # a crash in between loses no more than the application's own queue would, and repeats nothing
        self.contacts.release(keys.user, peer, held[-1].n)
        self.counts["released"] += len(held)
        for h in held:
            try:
                self._deliver(keys, open_box(read_outer(h.data), keys, found.box, h.name, h.id), h.name, h.id, h.stamp)
            except SealError as error:
                self._refused(error.reason, str(error), {"name": h.name, "id": h.id})

    def _deliver(self, keys: UserKeys, sealed: Any, name: str, id: bytes, stamp: Any) -> None:
        self.store.queue(f"mail.{keys.user}").push(
            {"from": sealed.sender, "to": sealed.to, "name": name, "id": id, "stamp": stamp, "body": sealed.body})
        self.counts["delivered"] += 1

    def _refused(self, reason: str, detail: str, item: dict[str, Any]) -> None:
        self.counts[f"refused_{reason}"] += 1
        self.refusals.append({"reason": reason, "detail": detail[:300], "name": item.get("name"), "id": item.get("id")})

    # -- helpers --------------------------------------------------------------------------

    def _keys(self, user: str, create: bool = False) -> UserKeys | None:
        """A local user's keys; None (create False) for a user this house has never had."""
        keys = self.users.get(user)
        if keys is None:
            try:
                check_user(user)
            except IdentityError as error:
                raise ContactError(str(error), "bad_address") from None
            if not create and not UserKeys.path(self.home, user).exists():
                return None
            keys = self.users[user] = UserKeys.load_or_create(self.home, user, self.estate)
        return keys

    def _me(self, user: str) -> UserKeys:
        """A local user who acts: known here (``user()`` made their keys), or ContactError."""
        keys = self._keys(user)
        if keys is None:
            raise ContactError(f"{str(user)[:40]!r} is no user of this house: EndToEnd.user(name) makes one", "no_user")
        return keys

    def _publish_card(self, kind: str, keys: UserKeys, peer: str) -> Any:
        id = new_id()
        name = f"{self.estate}/{CONTACTS}/{keys.user}/{id.hex()}"
        return self.cast.publish(name, card(kind, keys, peer, name, id), id=id, publisher=keys.user, recipients=[peer])


class User:
    """One local user's face of :class:`EndToEnd`: ``alice.request("bob@xyz")``, ``alice.send(...)``."""

    def __init__(self, e2e: EndToEnd, keys: UserKeys) -> None:
        self.e2e = e2e
        self.keys = keys
        self.mailbox = f"mail.{keys.user}"

    @property
    def address(self) -> str:
        return self.keys.address

    @property
    def fingerprint(self) -> str:
        return fingerprint(bytes(self.keys.verify_key), bytes(self.keys.public_key))

    def request(self, peer: str) -> Any:
        return self.e2e.request(self.keys.user, peer)

    def accept(self, peer: str) -> Any:
        return self.e2e.accept(self.keys.user, peer)

    def refuse(self, peer: str) -> int:
        return self.e2e.refuse(self.keys.user, peer)

    def send(self, peer: str, body: bytes) -> Any:
        return self.e2e.send(self.keys.user, peer, body)

    def pending(self) -> list[Contact]:
        return self.e2e.pending(self.keys.user)

    def held(self, peer: str | None = None) -> list[Held]:
        return self.e2e.held(self.keys.user, peer)

    def contact(self, peer: str) -> Contact | None:
        return self.e2e.contacts.get(self.keys.user, _peer(peer))


def _peer(peer: str) -> str:
    try:
        check_address(peer)
    except IdentityError as error:
        raise ContactError(str(error), "bad_address") from None
    return peer
