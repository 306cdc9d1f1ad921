"""The ``causal:`` section of an estate layout: the topics this estate relays, their keys, its peer relays.

Apart from layoutread.py because it is the causal layer's vocabulary,
checked with that layer's own rules (topic names, verify keys) so that a
layout that loads is one the relay can run; every problem is located like
the rest of a layout's.

Why the keys are read here and not when a house starts: a topic's owner
and publishers are the relay's root of trust (predicate 1), and a typo in
a ``.pub`` path found at load time is a line and column to fix, where the
same typo found in a running house is a relay that refuses everything.
Only the ``.pub`` files are read; the secret ``.key`` of ``sign_as`` is
opened by the house that signs with it (:func:`wire_causal`).

The relay lives where the CAST cache is (Local Storage is that cache), so
the section needs a ``cast:`` section and runs in ``cast.house``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from flowcast.flow.errors import Where
from flowcast.flow.yamlnodes import node_kind, show

if TYPE_CHECKING:
    from flowcast.causal.config import CausalConfig
    from flowcast.house.layoutcast import CastSpec
    from flowcast.house.layoutread import LayoutReader

__all__ = ["CAUSAL_KEYS", "CausalSpec", "TOPIC_KEYS", "read_causal", "wire_causal"]

CAUSAL_KEYS = ("keys", "topics", "peers", "grace", "epoch_every", "heads_every", "max_buffered", "max_per_publisher", "dep_wait",
               "epoch_max_messages", "epoch_max_bytes")
TOPIC_KEYS = ("owner", "publishers", "sign_as")
#: Caps on what a mailbox buffers, with their ranges (docs/causal.md, "Caps").
WHOLE = {"max_buffered": (1, 10_000_000), "max_per_publisher": (1, 10_000_000),
         # what one publisher may hold in one epoch (docs/causal.md, "Budgets"): messages, wire bytes
         "epoch_max_messages": (1, 100_000_000), "epoch_max_bytes": (1 << 10, 1 << 40)}
#: Seconds a closing epoch stays open (a day at most: history is bounded).
GRACE = (0.0, 86400.0)
#: Seconds between the epochs the owner's house opens, when the layout asks it to (a second to a year).
EPOCH_EVERY = (1.0, 365 * 86400.0)
#: Seconds between heads announcements to the peers (null: none), from a tenth of a second to an hour.
HEADS_EVERY = (0.1, 3600.0)
#: Seconds a publish waits for a dep its relay has not stored yet (0: refused at once), up to an hour.
DEP_WAIT = (0.0, 3600.0)
#: Most topics and publishers per topic a layout may name (each publisher is a key checked per message).
MAX_TOPICS = 256
MAX_PUBLISHERS = 1024
MAX_PEERS = 64
_HEX_KEY = re.compile(r"[0-9A-Fa-f]{64}\Z")


@dataclass(frozen=True)
class CausalSpec:
    """What an estate's relay relays, with whose keys, and which house runs it."""

    config: "CausalConfig" = field(hash=False)
    #: Where this estate's signing keys are (``NAME.key``, 0600) and relative ``.pub`` paths are found.
    keys: Path
    #: topic -> the key name this estate publishes that topic with (``keys/NAME.key``).
    sign_as: dict[str, str] = field(default_factory=dict, hash=False)
    #: The house entry that runs the relay: the CAST cache's.
    house: str = ""
    where: Where | None = field(default=None, compare=False)

    def state_path(self, cast: "CastSpec") -> Path:
        """The relay's SQLite file (delivered sets, evidence), next to the CAST cache it stores in."""
        return cast.dir / "causal.sqlite3"


def read_causal(reader: "LayoutReader", node: yaml.Node, cast: "CastSpec | None", run: Path | None,
                estate: str | None, had_cast: bool) -> CausalSpec | None:
    """The checked ``causal:`` section, or None after reporting its problems on ``reader``.

    ``had_cast``: the layout has a ``cast:`` section (``cast`` is None
    also when that section had errors, already reported).
    """
    from flowcast.causal.config import CausalConfig

    start = len(reader.errors)
    if not had_cast:
        reader.report("a causal: section needs a cast: section: the relay stores messages in the CAST cache and runs in its house",
                      node, "add 'cast:' (an empty one runs the cache in the manor), docs/causal.md")
    if reader.is_null(node):
        pairs: dict[str, Any] = {}
    else:
        found = reader.mapping(node, "causal", CAUSAL_KEYS)
        if found is None:
            return None
        pairs = found
    default_keys = run / "keys" if run is not None else None
    keys = reader.directory(pairs["keys"][1], "causal keys", "keys") if "keys" in pairs else default_keys
    values: dict[str, Any] = {}
    for key, (low, high) in WHOLE.items():
        if key in pairs:
            values[key] = reader.integer(pairs[key][1], f"causal {key}", low, high)
    if "grace" in pairs:
        values["grace"] = reader.seconds(pairs["grace"][1], "causal grace", *GRACE)
    if "dep_wait" in pairs:
        values["dep_wait"] = reader.seconds(pairs["dep_wait"][1], "causal dep_wait", *DEP_WAIT)
    if "epoch_every" in pairs and not reader.is_null(pairs["epoch_every"][1]):
        values["epoch_every"] = reader.seconds(pairs["epoch_every"][1], "causal epoch_every", *EPOCH_EVERY)
    heads: dict[str, float | None] = {}
    if "heads_every" in pairs:
        node = pairs["heads_every"][1]
        if reader.is_null(node):
            heads["heads_every"] = None  # no announcements: only what something names is fetched
        else:
            values["heads_every"] = reader.seconds(node, "causal heads_every", *HEADS_EVERY)
    peers = _peers(reader, pairs["peers"][1], estate) if "peers" in pairs else ()
    topics: dict[str, Any] = {}
    sign_as: dict[str, str] = {}
    if "topics" in pairs and keys is not None:
        topics, sign_as = _topics(reader, pairs["topics"][1], keys)
    if len(reader.errors) > start or keys is None or cast is None or any(v is None for v in values.values()):
        return None
    config = CausalConfig(topics=topics, peers=peers, **values, **heads)
    return CausalSpec(config, keys, sign_as, cast.house, reader.where(node))



def _peers(reader: "LayoutReader", node: yaml.Node, estate: str | None) -> tuple[str, ...]:
    out: list[str] = []
    for item in reader.items(node, "causal peers") or ():
        name = reader.keep_name(item, "a causal peer")
        if name is None:
            continue
        if name == estate:
            reader.report(f"causal peer {show(name)} is this estate; peers are the other estates' relays", item)
        elif name in out:
            reader.report(f"causal peer {show(name)} is named twice", item)
        else:
            out.append(name)
    if len(out) > MAX_PEERS:
        reader.report(f"causal peers name more than {MAX_PEERS} estates", node)
    return tuple(out)


def _verify_key(reader: "LayoutReader", node: yaml.Node, what: str, keys: Path) -> bytes | None:
    """64 hex digits, or a ``.pub`` file (relative paths are in the keys folder)."""
    from flowcast.causal.keys import read_verify_key
    from flowcast.causal.message import CausalError

    text = reader.text(node, what)
    if text is None:
        return None
    if _HEX_KEY.match(text):
        return bytes.fromhex(text)
    if not text or len(text) > 4096 or any(ord(c) < 32 for c in text):
        reader.report(f"{what} is {show(text)}; expected 64 hex digits or a .pub file", node)
        return None
    try:
        return read_verify_key(keys / Path(text).expanduser())
    except CausalError as error:
        reader.report(f"{what}: {error}", node, "a verify key is 64 hex digits or a .pub file ('flowcast causal keygen NAME --dir DIR' makes one)")
        return None


def _topics(reader: "LayoutReader", node: yaml.Node, keys: Path) -> tuple[dict[str, Any], dict[str, str]]:
    from flowcast.causal.config import TopicConfig
    from flowcast.causal.keys import check_key_name, read_verify_key
    from flowcast.causal.message import CausalError, check_topic

    topics: dict[str, Any] = {}
    sign_as: dict[str, str] = {}
    if reader.is_null(node):
        return topics, sign_as
    if not isinstance(node, yaml.MappingNode):
        reader.report(f"causal topics must be a mapping of topic names, not a {node_kind(node)}", node)
        return topics, sign_as
    names = tuple(str(k.value) for k, _ in node.value if isinstance(k, yaml.ScalarNode))
    pairs = reader.mapping(node, "causal topics", names) or {}
    if len(pairs) > MAX_TOPICS:
        reader.report(f"causal topics name more than {MAX_TOPICS} topics", node)
        return topics, sign_as
    for name, (name_node, value) in pairs.items():
        try:
            check_topic(name)
        except CausalError as error:
            reader.report(f"causal topic {show(name)}: {error}", name_node)
            continue
        what = f"causal topic {show(name)}"
        fields = reader.mapping(value, what, TOPIC_KEYS, ("owner",))
        if fields is None or "owner" not in fields:
            continue
        owner = _verify_key(reader, fields["owner"][1], f"owner of {what}", keys)
        publishers: list[bytes] = []
        bad = False
        if "publishers" in fields:
            items = reader.items(fields["publishers"][1], f"publishers of {what}")
            if items is not None and len(items) > MAX_PUBLISHERS:
                reader.report(f"publishers of {what}: more than {MAX_PUBLISHERS}", fields["publishers"][1])
                items = None
            for item in items or ():
                found = _verify_key(reader, item, f"a publisher of {what}", keys)
                bad = bad or found is None
                if found is not None:
                    publishers.append(found)
        if owner is None or bad:
            continue
        topic = TopicConfig.of(name, owner, publishers)
        topics[name] = topic
        if "sign_as" in fields:
            signer_node = fields["sign_as"][1]
            signer = reader.text(signer_node, f"sign_as of {what}")
            if signer is None:
                continue
            try:
                check_key_name(signer)
                public = read_verify_key(keys / f"{signer}.pub")
            except CausalError as error:
                reader.report(f"sign_as of {what}: {error}", signer_node,
                              f"this estate's key {signer}.key and its {signer}.pub belong in {keys}")
                continue
            if public not in topic.publishers:
                reader.report(f"sign_as of {what}: key {show(signer)} is not the owner or a publisher of the topic", signer_node,
                              f"add {signer}.pub to its publishers")
                continue
            sign_as[name] = signer
    return topics, sign_as


def wire_causal(house: Any, spec: CausalSpec, cast: "CastSpec") -> Any:
    """Give the CAST cache's house its ``house.causal``: load the signing keys, open the service.

    A signing key that does not match the ``.pub`` the layout was checked
    against stops the house: publishing with it would be refused by every
    relay, this one included.
    """
    from flowcast.causal.keys import KeyFileError, load_signer
    from flowcast.causal.service import CausalService

    signers = {}
    for topic, name in spec.sign_as.items():
        key = load_signer(spec.keys, name)
        if bytes(key.verify_key) not in spec.config.topic(topic).publishers:
            raise KeyFileError(f"signing key {spec.keys / (name + '.key')} is not a publisher of topic {topic!r}: its .pub was replaced?")
        signers[topic] = key
    service = CausalService(house.router, house.cast, spec.config, state=spec.state_path(cast), signers=signers)
    return service.attach(house)
