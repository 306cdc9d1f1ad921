"""``flowcast keys``: make and inspect local keys; accept, reject, forget remotes.

    flowcast keys [--keep DIR] new NAME [--role ROLE] [--mode N] [--force]
    flowcast keys [--keep DIR] show
    flowcast keys [--keep DIR] list [--status accepted|pending|rejected]
    flowcast keys [--keep DIR] accept|reject|forget FINGERPRINT-OR-NAME
    flowcast keys [--keep DIR] rotate NAME VERKEY PUBKEY
    flowcast keys [--keep DIR] rename FINGERPRINT-OR-NAME NEWNAME

A pending remote is a request: several may carry one name with different
keys, and ``accept NAME`` then refuses and asks for the fingerprint (``list``
prints it).  Accepting binds the name to that key for good: ``rotate`` is
the only way to move it to new keys (the hex ``verkey`` and ``pubkey`` that
``flowcast keys show`` prints on the remote; the old key's record stays,
rejected, as the mark of the rotation), and ``rename`` the only way to give
an accepted key another name, because routing policy trusts the name.  An
estate running on this keep sees a change without a restart: at the key's
next JOIN or allow (it reads that one record from disk, at most once a
second per key), and a live session of a key rotated away, rejected or
forgotten ends within a second per 32 sessions (a bounded sweep of the
records); a rename is seen at the next JOIN.

The keep defaults to ``$FLOWCAST_KEEP`` or ``~/.flowcast/keep``.  Secret
keys are never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from flowcast.transport.keep import Keep, KeepError, Status

__all__ = ["main", "build_parser"]


def _default_keep() -> str:
    return os.environ.get("FLOWCAST_KEEP") or os.path.join(os.path.expanduser("~"), ".flowcast", "keep")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flowcast keys", description="Manage an estate's keep.")
    parser.add_argument("--keep", default=None, help="keep directory (default $FLOWCAST_KEEP or ~/.flowcast/keep)")
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new", help="make long-term keys for this estate")
    new.add_argument("name")
    new.add_argument("--role", default=None)
    new.add_argument("--mode", type=int, default=0)
    new.add_argument("--force", action="store_true", help="replace existing local keys")
    sub.add_parser("show", help="this estate's name, role and public keys")
    listing = sub.add_parser("list", help="remote estates and their status")
    listing.add_argument("--status", choices=[s.value for s in Status], default=None)
    for verb, text in (("accept", "trust a pending remote"), ("reject", "refuse a remote for good"), ("forget", "delete a remote")):
        cmd = sub.add_parser(verb, help=text)
        cmd.add_argument("remote", help="fingerprint, fingerprint prefix (6+) or name")
    rename = sub.add_parser("rename", help="give a remote another name (an accepted key cannot rename itself)")
    rename.add_argument("remote", help="fingerprint, fingerprint prefix (6+) or name")
    rename.add_argument("name")
    rotate = sub.add_parser("rotate", help="bind a remote's name to its new keys (the old key is rejected)")
    rotate.add_argument("name")
    rotate.add_argument("verkey", help="the new Ed25519 verify key, 64 hex digits")
    rotate.add_argument("pubkey", help="the new X25519 public key, 64 hex digits")
    return parser


def _hex_key(text: str, what: str) -> bytes:
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise KeepError(f"{what} must be 64 hex digits") from None
    if len(key) != 32:
        raise KeepError(f"{what} must be 64 hex digits")
    return key


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = sys.stdout
    try:
        keep = Keep(args.keep or _default_keep())
        if args.command == "new":
            if keep.local() is not None and not args.force:
                print(f"error: {keep.path} already has keys for {keep.local().name!r} (use --force to replace)", file=sys.stderr)
                return 1
            local = keep.create_local(args.name, args.role, args.mode, replace=args.force)
            print(f"{local.name} {local.keys.fingerprint}", file=out)
        elif args.command == "show":
            local = keep.local()
            if local is None:
                print(f"error: no local keys in {keep.path} (run: flowcast keys new NAME)", file=sys.stderr)
                return 1
            print(f"name        {local.name}", file=out)
            print(f"role        {local.role}", file=out)
            print(f"mode        {local.mode}", file=out)
            print(f"fingerprint {local.keys.fingerprint}", file=out)
            print(f"verkey      {local.keys.verkey.hex()}", file=out)
            print(f"pubkey      {local.keys.pubkey.hex()}", file=out)
        elif args.command == "list":
            for record in sorted(keep.remotes(), key=lambda r: (r.status.value, r.name)):
                if args.status is None or record.status.value == args.status:
                    note = f" ({record.note})" if record.note else ""
                    print(f"{record.fingerprint} {record.status.value:8} {record.name} {record.role}{note}", file=out)
        elif args.command == "rotate":
            old, new = keep.rotate(args.name, _hex_key(args.verkey, "verkey"), _hex_key(args.pubkey, "pubkey"))
            print(f"rotated {new.name} {old.fingerprint} -> {new.fingerprint}", file=out)
        elif args.command == "rename":
            record = keep.rename(args.remote, args.name)
            print(f"renamed {record.fingerprint} -> {record.name}", file=out)
        else:
            if args.command == "forget":
                record = keep.forget(args.remote)
            else:
                status = Status.ACCEPTED if args.command == "accept" else Status.REJECTED
                record = keep.set_status(keep.find(args.remote).fingerprint, status)
            print(f"{args.command}{'ed' if args.command != 'forget' else 'ten'} {record.name} {record.fingerprint}", file=out)
    except KeepError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
