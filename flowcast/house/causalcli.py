"""``flowcast causal keygen | status``: make a publisher's keys; see a running estate's relay and mailboxes.

``keygen`` writes ``DIR/NAME.key`` (0600) and ``DIR/NAME.pub``; the
``.pub`` is what other estates' layouts name as a topic's owner or
publisher, so it is printed too, ready to paste as 64 hex digits.
``status`` reads only the status files the houses rewrite every second
(nothing here opens the relay's files, which the running house owns):
counts, buffered and missing dependencies per subscription.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowcast causal", description="Causal mailboxes: publisher keys, and a running estate's relay.")
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("keygen", help="make (or show) the signing key NAME: DIR/NAME.key (0600) and DIR/NAME.pub")
    q.add_argument("name", help="the key's name (letters, digits, '_', '-'): a layout's sign_as")
    q.add_argument("--dir", type=Path, default=Path("keys"), help="where the key files go (default: ./keys)")
    q = sub.add_parser("status", help="what the relay holds and each mailbox buffers, from the houses' status files")
    q.add_argument("layout", type=Path, help="the estate's layout (houses/ESTATE.yaml)")
    q.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    return p


def cmd_keygen(name: str, directory: Path) -> int:
    from flowcast.causal.keys import KeyFileError, create_signer

    try:
        key, created = create_signer(directory, name)
    except (KeyFileError, OSError) as error:
        print(f"flowcast causal keygen: {error}", file=sys.stderr)
        return 1
    print(f"{'made' if created else 'kept the existing'} key {name}: {directory / (name + '.key')} (secret, 0600),"
          f" {directory / (name + '.pub')}")
    print(bytes(key.verify_key).hex())
    return 0


def _lines(value: Any, indent: str = "  ") -> list[str]:
    """A status mapping as indented ``key: value`` lines, nested mappings one level deeper."""
    out = []
    for key, item in value.items() if isinstance(value, dict) else ():
        if isinstance(item, dict) and item:
            out.append(f"{indent}{key}:")
            out.extend(_lines(item, indent + "  "))
        else:
            out.append(f"{indent}{key}: {json.dumps(item, default=str) if isinstance(item, (list, dict)) else item}")
    return out


def cmd_status(path: Path, as_json: bool) -> int:
    from flowcast.house.estate import status_dir
    from flowcast.house.layout import load_layout

    layout = load_layout(path)  # a LayoutError is printed, located, by the CLI
    if layout.causal is None:
        print(f"flowcast causal status: estate {layout.estate}'s layout has no causal: section", file=sys.stderr)
        return 1
    found: dict[str, Any] = {}
    now = time.time()
    for file in sorted(status_dir(layout).glob("*.json")):
        try:
            status = json.loads(file.read_text())
        except (OSError, ValueError):
            continue  # a house starting or gone
        if isinstance(status, dict) and "causal" in status:
            updated = status.get("updated")
            found[file.stem] = {"as_of": round(now - updated, 1) if isinstance(updated, (int, float)) else None, **status["causal"]}
    if as_json:
        print(json.dumps({"estate": layout.estate, "relay": found}, default=str))
        return 0 if found else 1
    if not found:
        print(f"flowcast causal status: no status from estate {layout.estate}'s relay house {layout.causal.house}"
              f" in {status_dir(layout)}: is it running?", file=sys.stderr)
        return 1
    for yard, status in found.items():
        print(f"estate {layout.estate}, relay in house {yard} (as of {status.pop('as_of')} s ago):")
        print("\n".join(_lines(status)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "keygen":
        return cmd_keygen(args.name, args.dir)
    return cmd_status(args.layout, args.json)
