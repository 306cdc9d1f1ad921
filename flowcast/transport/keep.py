"""The keep: local long-term keys and the remote estates this one trusts.

Layout (directory 0700, every file 0600, written atomically)::

    KEEP/local.json                 this estate: name, role, mode, secret keys
    KEEP/remotes/<fingerprint>.json one remote: name, role, mode, keys, status

Remotes are keyed by key fingerprint (hex), never by a name from the wire:
names and roles are validated for display and routing only and can never
become paths.  Acceptance policies decide what a join from an unknown key
does: ``never`` leaves it pending for an operator, ``once`` and ``always``
accept it.  A pending record is a request: it binds no name.  Accepting a
record binds its name to its key for good, under every policy (routing
authorizes by estate name; RAET's ``auto`` would take a changed key,
flowcast cannot): another key presenting it is refused, and so is the key
presenting another name.  Moving a name is an operator's act,
:meth:`Keep.rotate`, and so is a rename, :meth:`Keep.rename`
(docs/protocol.md section 3).

Every per-join look-up goes through an index (fingerprint, name, X25519
key, pending records and strays, the only evictable ones), never through all records: a flood of
joins costs each join the same whatever the keep holds.  A keep given a
:class:`~flowcast.transport.keepwriter.KeepWriter` hands its file writes to
it (off the stack's thread); ``ticket`` then says which write a caller must
see durable before it tells anyone.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from typing import TYPE_CHECKING, Any

from flowcast.transport import keeplook
from flowcast.transport.keeprecord import (
    Acceptance,
    KeepError,
    LocalIdentity,
    RemoteRecord,
    Status,
    Verdict,
    validate_name,
)
from flowcast.transport.crypto import LongTermKeys, fingerprint
from flowcast.runtime.durable import atomic_write

if TYPE_CHECKING:
    from flowcast.transport.keepwriter import KeepWriter

__all__ = [
    "Acceptance",
    "Status",
    "KeepError",
    "Keep",
    "RemoteRecord",
    "Verdict",
    "validate_name",
    "MAX_PENDING",
]

MAX_PENDING = 1000


def _pinned(record: "RemoteRecord | None", name: str, holder: "RemoteRecord", fp: str) -> Verdict:
    reason = f"the name is pinned to key {holder.fingerprint}; a changed key is refused under every policy (an operator moves it: flowcast keys rotate)"
    return Verdict(Status.REJECTED, record, reason, [f"key-changed {name} {fp}"])


class Keep:
    """Persistent (``path``) or in-memory (``path=None``) key store."""

    def __init__(self, path: str | os.PathLike | None, *, max_remotes: int = MAX_PENDING, writer: "KeepWriter | None" = None) -> None:
        self.path = Path(path) if path is not None else None
        #: Joins from the wire never grow the keep past this (operators can add more).
        self.max_remotes = max_remotes
        self._remotes: dict[str, RemoteRecord] = {}
        # Indexes (see _index): name -> fingerprint of the accepted record
        # bound to it (a pending record binds nothing); X25519 key -> accepted fingerprints; pending
        # fingerprints; strays (pending records joins made), least recently
        # joined first: the only records a join may evict.
        self._by_name: dict[str, str] = {}
        self._by_pubkey: dict[bytes, dict[str, None]] = {}
        self._pending: dict[str, None] = {}
        self._strays: dict[str, None] = {}
        self._rechecked: dict[str, float] = {}  # name -> when its rotation was last looked for on disk
        self._key_looked: dict[str, float] = {}  # fingerprint -> when an allow or a session last looked (keeplook.look_key)
        #: Joins refused because the keep was full of records it may not evict.
        self.full_refusals = 0
        #: Joins of an accepted key presenting another name, refused (an operator renames).
        self.rename_refusals = 0
        self._local: LocalIdentity | None = None
        self._next_uid = 2  # 1 is the local estate
        #: Where file writes go: None writes at once (the caller waits for the disk).
        self.writer = writer
        #: The writer's ticket of the newest write handed to it (0: none).
        self.ticket = 0
        self._tickets: dict[str, int] = {}  # fingerprint -> ticket of its newest queued write
        self._prune_at = 2 * max_remotes + 64
        if self.path is not None:
            self._open_dir()
            self._load()

    # -- indexes -------------------------------------------------------

    def _index(self, record: RemoteRecord) -> None:
        fp = record.fingerprint
        if record.status is Status.ACCEPTED:
            self._by_name.setdefault(record.name, fp)  # the first binding stands
        if record.status is Status.ACCEPTED:
            self._by_pubkey.setdefault(record.pubkey, {})[fp] = None
        elif record.status is Status.PENDING:
            self._pending[fp] = None
        if record.stray:
            self._strays[fp] = None

    def _unindex(self, record: RemoteRecord) -> None:
        fp = record.fingerprint
        if self._by_name.get(record.name) == fp:
            del self._by_name[record.name]
        held = self._by_pubkey.get(record.pubkey)
        if held is not None:
            held.pop(fp, None)
            if not held:
                del self._by_pubkey[record.pubkey]
        self._pending.pop(fp, None)
        self._strays.pop(fp, None)

    def _reindex(self, record: RemoteRecord, **changes: Any) -> RemoteRecord:
        """Change fields of ``record`` the indexes are keyed on (name, status, note), indexes kept true.

        A record must leave the indexes before such a change and enter them
        again after it: eight hand-written copies of that pair could each
        drop half of it, and a missed ``_unindex`` leaves a name bound to a
        key that no longer holds it.  A field RemoteRecord lacks is refused:
        a dataclass would otherwise grow it silently.
        """
        unknown = changes.keys() - RemoteRecord.__dataclass_fields__.keys()
        if unknown:
            raise TypeError(f"RemoteRecord has no field {', '.join(sorted(unknown))}")
        self._unindex(record)
        for name, value in changes.items():
            setattr(record, name, value)
        self._index(record)
        return record

    def _note_ticket(self, fp: str) -> None:
        tickets = self._tickets
        tickets[fp] = self.ticket
        if len(tickets) > self._prune_at and self.writer is not None:
            # What is durable goes; the next look waits until the map has
            # doubled again, so a writer far behind costs O(1) per write.
            durable = self.writer.durable
            self._tickets = {f: t for f, t in tickets.items() if t > durable}
            self._prune_at = max(2 * len(self._tickets), 2 * self.max_remotes + 64)

    def unwritten(self, fp: str) -> int:
        """The ticket ``fp``'s record waits for to be durable, or 0 if it is on disk."""
        ticket = self._tickets.get(fp, 0)
        if ticket and self.writer is not None and ticket <= self.writer.durable:
            del self._tickets[fp]
            return 0
        return ticket

    def bound(self, name: str) -> RemoteRecord | None:
        """The accepted record ``name`` is bound to, if any (pending records bind nothing)."""
        fp = self._by_name.get(name)
        return self._remotes.get(fp) if fp is not None else None

    # -- files ---------------------------------------------------------

    def _open_dir(self) -> None:
        assert self.path is not None
        for folder in (self.path, self.path / "remotes"):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(folder, 0o700)

    def _write(self, target: Path, data: dict) -> None:
        atomic_write(target, json.dumps(data, indent=1, sort_keys=True).encode(), mode=0o600)

    def _remote_file(self, fp: str) -> Path:
        assert self.path is not None
        if not re.fullmatch(r"[0-9a-f]{32}", fp):
            raise KeepError(f"not a fingerprint: {fp[:40]!r}")
        return self.path / "remotes" / f"{fp}.json"

    def _load(self) -> None:
        assert self.path is not None
        local = self.path / "local.json"
        if local.exists():
            data = json.loads(local.read_text())
            self._local = LocalIdentity(
                validate_name(data["name"]),
                validate_name(data["role"], "role"),
                int(data.get("mode", 0)),
                LongTermKeys(bytes.fromhex(data["sigseed"]), bytes.fromhex(data["prikey"])),
            )
        loaded = []
        for file in sorted((self.path / "remotes").glob("*.json")):
            try:
                record = RemoteRecord.from_json(json.loads(file.read_text()))
            except (KeyError, ValueError, TypeError):
                continue  # a damaged record is ignored, never trusted
            if file.stem != record.fingerprint:
                continue
            loaded.append(record)
        keeplook.resolve_rotations(loaded)
        # In uid order: the oldest record keeps a name two old records share
        # (a keep written before names were bound), and eviction stays oldest-first.
        for record in sorted(loaded, key=lambda r: r.uid):
            self._remotes[record.fingerprint] = record
            self._index(record)
            self._next_uid = max(self._next_uid, record.uid + 1)

    def _save(self, record: RemoteRecord) -> None:
        if self.path is None:
            return
        target = self._remote_file(record.fingerprint)
        sync = not record.stray  # a stray is acknowledged to nobody as durable: no fsync
        data = json.dumps(record.to_json(), indent=1, sort_keys=True).encode()
        if self.writer is not None:
            ticket = self.writer.submit(target, data, sync=sync)
            if sync:
                self.ticket = ticket
                self._note_ticket(record.fingerprint)
        else:
            atomic_write(target, data, mode=0o600, sync=sync)

    def _unlink(self, fp: str, sync: bool = True) -> None:
        if self.path is None:
            return
        target = self._remote_file(fp)
        if self.writer is not None:
            ticket = self.writer.submit(target, None, sync=sync)
            if sync:
                self.ticket = ticket
                self._note_ticket(fp)
            return
        try:
            os.unlink(target)
        except FileNotFoundError:
            pass

    # -- local ---------------------------------------------------------

    def local(self) -> LocalIdentity | None:
        return self._local

    def create_local(self, name: str, role: str | None = None, mode: int = 0, *, replace: bool = False) -> LocalIdentity:
        """New long-term keys for this estate (refuses to overwrite unless ``replace``)."""
        if self._local is not None and not replace:
            raise KeepError("this keep already has local keys")
        identity = LocalIdentity(validate_name(name), validate_name(role or name, "role"), int(mode), LongTermKeys.generate())
        if self.path is not None:
            self._write(
                self.path / "local.json",
                {
                    "name": identity.name,
                    "role": identity.role,
                    "mode": identity.mode,
                    "sigseed": identity.keys.sigseed.hex(),
                    "prikey": identity.keys.prikey.hex(),
                },
            )
        self._local = identity
        return identity

    def ensure_local(self, name: str, role: str | None = None, mode: int = 0) -> LocalIdentity:
        return self._local if self._local is not None else self.create_local(name, role, mode)

    # -- remotes -------------------------------------------------------

    def remotes(self) -> list[RemoteRecord]:
        return list(self._remotes.values())

    def get(self, fp: str) -> RemoteRecord | None:
        return self._remotes.get(fp)

    def find(self, text: str) -> RemoteRecord:
        """A remote by fingerprint, fingerprint prefix (≥6) or unique name (operators: scans).

        A name matches every pending request that carries it as well as the
        accepted record bound to it: with more than one, the operator must
        give the fingerprint (accepting "billing" must never pick a key).
        Rejected records match a name only when nothing else does.
        """
        if text in self._remotes:
            return self._remotes[text]
        hits = [r for f, r in self._remotes.items() if (len(text) >= 6 and f.startswith(text)) or r.name == text]
        live = [r for r in hits if r.status is not Status.REJECTED]
        if len(live) == 1 or (len(hits) == 1 and not live):
            return (live or hits)[0]
        if not hits:
            raise KeepError(f"no remote matches {text[:64]!r}")
        listed = ", ".join(f"{r.fingerprint} ({r.status.value})" for r in (live or hits)[:8])
        raise KeepError(f"more than one remote matches {text[:64]!r}: give the fingerprint ({listed})")

    def accepted_by_pubkey(self, pubkey: bytes) -> RemoteRecord | None:
        held = self._by_pubkey.get(pubkey)
        return self._remotes[next(iter(held))] if held else None

    def _check_binding(self, record: RemoteRecord) -> None:
        holder = self.bound(record.name)
        if record.status is not Status.REJECTED and holder is not None and holder.fingerprint != record.fingerprint:
            raise KeepError(
                f"the name {record.name!r} is bound to key {holder.fingerprint}: "
                f"move it with 'flowcast keys rotate {record.name} VERKEY PUBKEY'"
            )

    def add(self, record: RemoteRecord) -> RemoteRecord:
        """Store a remote as given (operators and tests; joins use :meth:`admit`).

        Refuses (KeepError) a name bound to another key: that is :meth:`rotate`.
        """
        validate_name(record.name)
        validate_name(record.role, "role")
        self._check_binding(record)
        if not record.uid:
            record.uid = self._next_uid
            self._next_uid += 1
        old = self._remotes.get(record.fingerprint)
        if old is not None:
            self._unindex(old)
        self._remotes[record.fingerprint] = record
        self._index(record)
        self._save(record)
        return record

    def set_status(self, fp: str, status: Status) -> RemoteRecord:
        record = self.find(fp)
        if status is not Status.REJECTED:
            self._check_binding(RemoteRecord(record.name, record.role, record.mode, record.verkey, record.pubkey, status))
        self._reindex(record, status=status)
        self._save(record)
        return record

    def forget(self, fp: str) -> RemoteRecord:
        record = self.find(fp)
        self._unindex(record)
        del self._remotes[record.fingerprint]
        self._unlink(record.fingerprint, sync=not record.stray)
        return record

    def rotate(self, name: str, verkey: bytes, pubkey: bytes) -> tuple[RemoteRecord, RemoteRecord]:
        """Bind ``name`` to new keys (an operator's act); returns (old, new).

        The only way a bound name moves to another key.  The new record
        (the old one's role and mode) is written first, then the old one as
        REJECTED "rotated to NEW": the mark a running stack reads before it
        accepts or rewrites the old key, and a restart resolves by (keeplook).
        """
        name = validate_name(name)
        if len(verkey) != 32 or len(pubkey) != 32:
            raise KeepError("keys must be 32 bytes each (64 hex digits)")
        old = self.bound(name)
        if old is None:
            raise KeepError(f"no accepted remote is named {name!r} (accept a pending one by fingerprint)")
        fp = fingerprint(verkey, pubkey)
        if fp == old.fingerprint:
            raise KeepError(f"{name!r} is already bound to key {fp}")
        if fp in self._remotes:
            self.forget(fp)  # a record of the new key under another name goes: one key, one name
        self._reindex(old, status=Status.REJECTED, note=f"{keeplook.ROTATED_TO}{fp}")
        new = self.add(RemoteRecord(name, old.role, old.mode, bytes(verkey), bytes(pubkey), Status.ACCEPTED, note=f"{keeplook.ROTATED_FROM}{old.fingerprint}"))
        self._save(old)
        return old, new

    def rename(self, text: str, name: str) -> RemoteRecord:
        """Give a remote another name (an operator's act: a join cannot rename an accepted key).

        Refused when ``name`` is bound to another key; a running stack picks it up (keeplook).
        """
        record = self.find(text)
        name = validate_name(name)
        holder = self.bound(name)
        if holder is not None and holder is not record:
            raise KeepError(f"the name {name!r} is bound to key {holder.fingerprint}")
        self._reindex(record, name=name)
        self._save(record)
        return record

    def admit(
        self,
        name: object,
        role: object,
        mode: object,
        verkey: bytes,
        pubkey: bytes,
        policy: Acceptance,
        stamp: float | None = None,
        now: float | None = None,
    ) -> Verdict:
        """Apply ``policy`` to a join's (already signature-checked) presentation.

        ``stamp`` orders JOINs of one key: one not newer than the last seen
        changes nothing (a replayed JOIN cannot roll a name or role back).
        With ``now`` (a running stack's clock), a bound name presented with
        another key first looks for an operator's rotation on disk (see
        keeplook.pick_up_rotation); the record it replaces is in ``evicted``.
        """
        rotated = keeplook.pick_up_rotation(self, name, verkey, pubkey, now) if now is not None else None
        verdict = self._admit(name, role, mode, verkey, pubkey, policy, stamp, now)
        if rotated is not None:
            verdict.evicted.append(rotated.fingerprint)
            verdict.events.append(f"rotated {rotated.name} {rotated.fingerprint} {fingerprint(verkey, pubkey)}")
        return verdict

    def _admit(
        self, name: object, role: object, mode: object, verkey: bytes, pubkey: bytes, policy: Acceptance, stamp: float | None, now: float | None = None
    ) -> Verdict:
        try:
            name = validate_name(name)
            role = validate_name(role, "role")
        except KeepError as error:
            return Verdict(Status.REJECTED, None, str(error))
        if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode < 1 << 16:
            return Verdict(Status.REJECTED, None, "mode must be an integer 0..65535")
        if stamp is not None and (not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or not math.isfinite(stamp) or stamp < 0):
            return Verdict(Status.REJECTED, None, "stamp must be a finite, non-negative time")
        if len(verkey) != 32 or len(pubkey) != 32:
            return Verdict(Status.REJECTED, None, "keys must be 32 bytes")
        fp = fingerprint(verkey, pubkey)
        known = self._remotes.get(fp)
        # A join proves possession of its Ed25519 key only.  A record that
        # pairs it with someone else's X25519 key is harmless: sessions are
        # looked up by both keys, and only the X25519 secret can vouch.
        if known is not None:
            return self._admit_known(known, name, role, mode, policy, stamp, now)
        holder = self.bound(name)
        if holder is not None:
            # Under every policy: the policy's estate match is an authority,
            # so a name never moves to a new key by itself (see rotate()).
            return _pinned(None, name, holder, fp)
        evicted: list[str] = []
        status = Status.PENDING if policy is Acceptance.NEVER else Status.ACCEPTED
        if len(self._remotes) >= self.max_remotes or (status is Status.PENDING and len(self._pending) >= MAX_PENDING):
            # Full.  Only a stray (a pending request a join made: it binds no
            # name, it is an operator's to-do) may go, the least recently
            # joined first, so a flood of strangers churns among itself and
            # frees nothing bound.  An accepted record is never evicted: its
            # name would be free for the next key to take.  Without a stray
            # to evict, the new key is refused (counted).
            if not self._strays:
                self.full_refusals += 1
                return Verdict(Status.REJECTED, None, "the keep is full: an operator must forget remotes first", [f"keep-full {name} {fp}"])
            oldest = next(iter(self._strays))
            self.forget(oldest)
            evicted.append(oldest)
        record = self.add(RemoteRecord(name, role, mode, bytes(verkey), bytes(pubkey), status, stamp=stamp or 0.0, origin="wire"))
        return Verdict(status, record, "new key", [f"{status.value} {name} {fp}"], evicted)

    def _admit_known(
        self, known: RemoteRecord, name: str, role: str, mode: int, policy: Acceptance, stamp: float | None, now: float | None
    ) -> Verdict:
        """A join from a key the keep holds: ``stamp`` orders its joins (a stale one changes nothing)."""
        fp = known.fingerprint
        stale = stamp is not None and stamp <= known.stamp
        if known.status is Status.ACCEPTED and (not stale or now is not None):
            # An operator may have rotated, rejected or renamed it on disk:
            # look before a write (which would undo that), else once a second.
            found = keeplook.recheck(self, known, name, now or 0.0, force=not stale)
            if found is not None:
                return found
        if known.status is Status.REJECTED:
            return Verdict(Status.REJECTED, known, "this key was rejected by an operator")
        if known.status is Status.ACCEPTED:
            if known.name != name:
                # Under every policy: the old name stays bound to this key
                # and the new one is not taken (flowcast keys rename).
                self.rename_refusals += 1
                return Verdict(
                    Status.REJECTED, known,
                    f"this key is bound to the name {known.name!r}; a rename is an operator's act (flowcast keys rename)",
                    [f"rename-refused {known.name} {name} {fp}"],
                )
            if stale:
                return Verdict(known.status, known, "known key (stale join: nothing changed)")
        elif not stale:
            self._reindex(known, name=name)  # a pending request may change what it asks for
        if known.status is Status.PENDING and policy is Acceptance.ALWAYS:
            holder = self.bound(known.name)
            if holder is not None:
                return _pinned(known, known.name, holder, fp)
            self._reindex(known, status=Status.ACCEPTED)  # saved below before anyone is told
        elif stale:
            return Verdict(known.status, known, "known key (stale join: nothing changed)")
        if not stale:
            if stamp is not None:
                known.stamp = stamp
            known.role, known.mode = role, mode
        self._save(known)
        return Verdict(known.status, known, "known key")

    def mark_allowed(self, fp: str, when: float) -> None:
        """Note that ``fp`` had a session (such records are never evicted)."""
        record = self._remotes.get(fp)
        if record is not None and not record.allowed:
            record.allowed = when
            self._save(record)
