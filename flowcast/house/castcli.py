"""``flowcast cast ls | stats | tail``: an estate's CAST as its files show it, safe while it runs.

And ``flowcast cast accept-loss``, the one command here that writes: with
the estate stopped, an operator accepts that its cache lost committed
messages (a WAL cut short, an older copy restored: what its high-water
mark shows, cachemark.py), so the estate starts again and serves what is
left, the loss said to its subscribers as a gap.  Never automatic: only
the operator can know whether the lost messages can be had elsewhere.

Nothing here writes: the cache is opened through SQLite's read-only URI
(the running house stays its only writer), each inbox likewise, and the
leases the publisher holds come from the status file its house rewrites
every second.  ``tail`` polls the read-only cache (every ``--every``
seconds, 0.2 by default): a reader in another process has no cheaper way
to hear about new rows, and a CLI tail can afford a fifth of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from flowcast.cast import Cache, CacheError, CacheLost, check_pattern
from flowcast.cast.inbox import check_inbox
from flowcast.cast.names import CastNameError
from flowcast.errors import DamagedFile
from flowcast.house.estate import status_dir
from flowcast.house.layout import EstateLayout, load_layout

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowcast cast", description="An estate's CAST as its files show it: read-only, safe while the estate runs.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("ls", "subscriptions, leases, cursors and lag"), ("stats", "messages, bytes, oldest, per-subscriber lag")):
        q = sub.add_parser(name, help=text)
        q.add_argument("layout", type=Path, help="the estate's layout (houses/ESTATE.yaml)")
        q.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    q = sub.add_parser("accept-loss", help="with the estate stopped: serve a cache that lost committed messages as it is")
    q.add_argument("layout", type=Path)
    q = sub.add_parser("tail", help="follow new messages matching a pattern")
    q.add_argument("layout", type=Path)
    q.add_argument("pattern", help="a CAST pattern, e.g. abc/messages/**")
    q.add_argument("--json", action="store_true", help="one JSON object a line")
    q.add_argument("--from-start", action="store_true", help="print what the cache holds first, then follow")
    q.add_argument("--count", type=int, default=0, help="stop after this many messages (0: never)")
    q.add_argument("--timeout", type=float, default=0.0, help="stop after this many seconds (0: never)")
    q.add_argument("--every", type=float, default=0.2, help="seconds between looks at the cache (default 0.2)")
    return p


def _cache(layout: EstateLayout) -> Cache | None:
    spec = layout.cast
    if spec is None or not spec.cache_path.exists():
        return None
    return Cache.open(spec.cache_path, estate=layout.estate, readonly=True, check=False,
                      retention=spec.config.retention, max_bytes=spec.config.max_bytes)


def _statuses(layout: EstateLayout) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(status_dir(layout).glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a house that is starting or gone: nothing to show for it
    return out


def _inboxes(layout: EstateLayout) -> dict[str, list[dict[str, Any]]]:
    """Each yard's subscriptions as its inbox keeps them: the key (estate, pattern, split, queue) and the cursor."""
    out: dict[str, list[dict[str, Any]]] = {}
    spec = layout.cast
    if spec is None:
        return out
    for path in sorted(spec.dir.glob("inbox-*.sqlite3")):
        check_inbox(path)  # an empty or damaged one is refused (DamagedFile), not listed as holding nothing
        try:
            db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                rows = db.execute("SELECT sid, key, cursor FROM subs").fetchall()
            finally:
                db.close()
        except sqlite3.Error as error:
            out[path.stem[6:]] = [{"error": str(error)}]
            continue
        out[path.stem[6:]] = [{"sid": bytes(sid).hex(), "key": key, "cursor": cursor} for sid, key, cursor in rows]
    return out


def _held(statuses: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The leases the publisher holds (from its house's status file), each with the yard holding it and the file's age.

    ``as_of`` is seconds since the house wrote it: a house that stopped
    leaves its last file behind, and an old one says so.
    """
    now = time.time()
    out = []
    for yard, status in statuses.items():
        updated = status.get("updated")
        age = round(now - updated, 1) if isinstance(updated, (int, float)) else None
        out.extend({"yard": yard, "as_of": age, **lease} for lease in (status.get("cast") or {}).get("held", []))
    return out


def _damaged(command: str, error: DamagedFile) -> int:
    """A damaged file met by the CLI: one line naming it, exit 3 (what a house that meets it does)."""
    print(f"flowcast cast {command}: {error}", file=sys.stderr)
    return 3


def cmd_ls(layout: EstateLayout, as_json: bool) -> int:
    statuses = _statuses(layout)
    held = _held(statuses)
    subscribed = {yard: (status.get("cast") or {}).get("subscriptions", []) for yard, status in statuses.items()}
    try:
        cache = _cache(layout)  # the cursors listed below mean nothing against a damaged cache
        if cache is not None:
            cache.close()
        inboxes = _inboxes(layout)
    except DamagedFile as error:
        return _damaged("ls", error)
    except CacheError as error:
        print(f"flowcast cast ls: {error}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps({"estate": layout.estate, "held": held, "subscriptions": subscribed, "inboxes": inboxes}, default=str))
        return 0
    print(f"estate {layout.estate}: CAST {'in house ' + layout.cast.house if layout.cast else 'not configured'}")
    print(f"leases held for remote subscribers: {len(held)}")
    for lease in held:
        print(f"  {lease['estate']:<16} {lease['pattern']:<32} split {lease.get('split') or '-'}  lease left {lease['lease_left']:.0f} s"
              f"  cursor {lease['cursor']}  sent {lease['sent']}  lag {lease['lag']}"
              + (f"  (as of {lease['as_of']:.0f} s ago)" if lease.get("as_of") is not None and lease["as_of"] > 5 else ""))
    print("subscriptions of this estate's houses:")
    for yard, subs in sorted(subscribed.items()):
        for sub in subs:
            print(f"  {yard:<10} {sub['estate']}:{sub['pattern']:<32} into {sub['into']}  {sub['state']}  cursor {sub['cursor']}"
                  f"  delivered {sub['delivered']}  duplicates {sub['duplicates']}  gaps {sub['gaps']}")
    print("cursors kept in the inboxes (what a restarted subscription resumes from):")
    for yard, rows in sorted(inboxes.items()):
        for row in rows:
            print(f"  {yard:<10} {row.get('key', row.get('error'))}  cursor {row.get('cursor', '?')}")
    return 0


def cmd_stats(layout: EstateLayout, as_json: bool) -> int:
    try:
        cache = _cache(layout)
    except DamagedFile as error:
        return _damaged("stats", error)
    except CacheError as error:
        print(f"flowcast cast stats: {error}", file=sys.stderr)
        return 1
    if cache is None:
        print(f"flowcast cast stats: estate {layout.estate} has no CAST cache"
              f"{' yet (' + str(layout.cast.cache_path) + ')' if layout.cast else ': its layout has no cast: section'}", file=sys.stderr)
        return 1
    try:
        stats = cache.stats()
    finally:
        cache.close()
    lag = [{"estate": h["estate"], "pattern": h["pattern"], "split": h.get("split"), "lag": h["lag"]} for h in _held(_statuses(layout))]
    stats["subscribers"] = lag
    if as_json:
        print(json.dumps(stats, default=str))
        return 0
    oldest = stats["oldest"]
    age = f"{time.time() - oldest:.0f} s ago" if isinstance(oldest, (int, float)) else "-"
    print(f"messages {stats['messages']}  bytes {stats['bytes']} of {stats['max_bytes']}  oldest {age}"
          f"  seq {stats['low_seq']}..{stats['high_seq']}  retention {stats['retention']:g} s")
    for entry in lag:
        print(f"  subscriber {entry['estate']:<16} {entry['pattern']:<32} lag {entry['lag']}")
    return 0


def _show(message: Any, as_json: bool) -> str:
    data = message.data
    if as_json:
        try:
            text: Any = data.decode("utf-8")
        except UnicodeDecodeError:
            text = {"hex": data.hex()}
        return json.dumps({"seq": message.seq, "id": message.id.hex(), "name": message.name, "publisher": message.publisher,
                           "stamp": message.stamp, "size": len(data), "data": text})
    preview = data[:60].decode("utf-8", "replace").replace("\n", " ")
    return f"{message.seq:>8} {message.name} {message.publisher or '-'} {len(data)} B  {preview}"


def cmd_tail(layout: EstateLayout, args: argparse.Namespace) -> int:
    try:
        pattern = check_pattern(args.pattern)
    except (CastNameError, ValueError) as error:
        print(f"flowcast cast tail: {error}", file=sys.stderr)
        return 2
    end = time.monotonic() + args.timeout if args.timeout > 0 else None
    cache = None
    shown = 0
    try:
        while cache is None:  # the estate may not have made its cache yet
            try:
                cache = _cache(layout)
            except DamagedFile as error:
                return _damaged("tail", error)
            except CacheError as error:
                print(f"flowcast cast tail: {error}", file=sys.stderr)
                return 1
            if cache is None:
                if end is not None and time.monotonic() >= end:
                    print(f"flowcast cast tail: no CAST cache for estate {layout.estate}", file=sys.stderr)
                    return 1
                time.sleep(args.every)
        after = 0 if args.from_start else cache.high_seq
        while True:
            read = cache.read(after, pattern=pattern, limit=1000, max_bytes=4 << 20)
            for message in read:
                print(_show(message, args.json), flush=True)
                shown += 1
                if args.count and shown >= args.count:
                    return 0
            after = max(after, read.upto)
            if end is not None and time.monotonic() >= end:
                return 0
            if len(read) == 0:
                time.sleep(args.every)
    except KeyboardInterrupt:
        return 0
    except CacheError as error:
        print(f"flowcast cast tail: {error}", file=sys.stderr)
        return 1
    finally:
        if cache is not None:
            cache.close()


def cmd_accept_loss(layout: EstateLayout) -> int:
    """Open the stopped estate's cache accepting a loss its mark shows; say what was accepted."""
    from flowcast.house.runlock import AlreadyRunning, take_run_lock

    spec = layout.cast
    if spec is None:
        print(f"flowcast cast accept-loss: estate {layout.estate}'s layout has no cast: section", file=sys.stderr)
        return 1
    try:
        lock = take_run_lock(layout.run / "supervisor.lock")  # the estate's own writer must not be running
    except AlreadyRunning as running:
        print(f"flowcast cast accept-loss: estate {layout.estate} is {running}; stop it first", file=sys.stderr)
        return 1
    try:
        config = spec.config
        try:
            Cache.open(spec.cache_path, estate=layout.estate, retention=config.retention, max_bytes=config.max_bytes).close()
            print(f"{spec.cache_path}: nothing lost, nothing to accept")
            return 0
        except CacheLost as lost:
            Cache.open(spec.cache_path, estate=layout.estate, retention=config.retention, max_bytes=config.max_bytes,
                       accept_loss=True).close()
            print(f"{spec.cache_path}: accepted the loss of seq {lost.high + 1}..{lost.marked}; the estate serves what is"
                  f" left, its subscribers get a cast.gap over the loss")
            return 0
        except DamagedFile as error:  # damaged otherwise: not a loss this can accept
            return _damaged("accept-loss", error)
    finally:
        os.close(lock)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    layout = load_layout(args.layout)  # a LayoutError is printed, located, by the CLI
    if args.command == "accept-loss":
        return cmd_accept_loss(layout)
    if args.command == "ls":
        return cmd_ls(layout, args.json)
    if args.command == "stats":
        return cmd_stats(layout, args.json)
    return cmd_tail(layout, args)
