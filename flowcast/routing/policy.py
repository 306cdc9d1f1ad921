"""Authorization: which remote estates may write or read which shares.

A policy is an ordered list of rules; the first rule that matches a
request decides it.  Nothing matching means deny: a road carries traffic
from other hosts, and an estate must say what it lets in.  Traffic within
an estate (lanes) and within a house is not asked about -- its yards are
the estate's own processes, behind 0600 sockets.

Patterns are shell globs (``fnmatch``), matched case-sensitively.  Rules
compile once into one matcher per field, so a decision costs a few regex
matches; decisions for recent requests are remembered in a bounded cache
because a flow sends the same route many times.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from flowcast.errors import Error

__all__ = ["Rule", "Policy", "PolicyError", "Decision", "declare_access", "is_access"]

Access = str  # "write", "read", or a permission named with declare_access
_ACCESS = ("write", "read", "any")
#: Permissions beyond write and read that layers above routing declared
#: (a subscription, say); rules may name them as their access.
_DECLARED: set[str] = set()
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
_FIELDS = ("estate", "role", "share", "tag", "channel")
_CACHE = 4096


class PolicyError(ValueError, Error):
    """A rule that cannot be read; the message says which and why."""


def declare_access(name: str) -> str:
    """Make ``name`` a permission rules may grant (``allow: subscribe``), beside write and read.

    Declared once by the layer that checks it, at import, so that a rule
    naming it parses whenever the policy is read -- and a rule naming a
    permission nobody declared (a typo) is still refused.
    """
    if not isinstance(name, str) or not _NAME.match(name) or name in ("any", "reply"):
        raise ValueError(f"a permission is a lower-case name of at most 32 characters, not {str(name)[:40]!r}")
    _DECLARED.add(name)
    return name


_PLAIN = ("write", "read")


def is_access(name: Any) -> bool:
    """Is ``name`` something a request may ask for: write, read or a declared permission?"""
    return name in ("write", "read") or name in _DECLARED


@dataclass(frozen=True)
class Rule:
    """``allow``/``deny`` ``access`` for requests whose fields match the globs."""

    effect: Literal["allow", "deny"]
    access: str = "any"  # write, read, any, or a declared permission
    estate: str = "*"
    role: str = "*"
    share: str = "*"
    tag: str = "*"
    channel: str = "*"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], index: int = 0) -> "Rule":
        """A rule from its layout/share form: ``{allow: write, estate: beta, share: "ping.*"}``."""
        if not isinstance(data, Mapping):
            raise PolicyError(f"rule {index}: a rule is a mapping, not {type(data).__name__}")
        effects = [key for key in ("allow", "deny") if key in data]
        if len(effects) != 1:
            raise PolicyError(f"rule {index}: give exactly one of 'allow' or 'deny'")
        effect = effects[0]
        access = data[effect]
        if access not in _ACCESS and access not in _DECLARED:
            known = ", ".join((*_ACCESS, *sorted(_DECLARED)))
            raise PolicyError(f"rule {index}: {effect} must be one of {known}, not {str(access)[:40]!r}")
        unknown = sorted(set(data) - {effect, *_FIELDS})
        if unknown:
            raise PolicyError(f"rule {index}: unknown key {unknown[0][:40]!r} (known: allow, deny, {', '.join(_FIELDS)})")
        fields = {}
        for name in _FIELDS:
            value = data.get(name, "*")
            if not isinstance(value, str) or not value or len(value) > 256:
                raise PolicyError(f"rule {index}: {name} must be a non-empty glob of at most 256 characters")
            fields[name] = value
        return cls(effect, access, **fields)

    def to_mapping(self) -> dict[str, str]:
        out = {self.effect: self.access}
        out.update({name: getattr(self, name) for name in _FIELDS if getattr(self, name) != "*"})
        return out


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: int  # index of the deciding rule, -1 for the default


class Policy:
    """Ordered rules, first match wins, default deny; counts every decision."""

    def __init__(self, rules: Iterable[Rule | Mapping[str, Any]] = ()) -> None:
        self.counts: Counter[str] = Counter()
        #: Goes up with every :meth:`replace`: what was derived from the rules (admits_any) is stale.
        self.version = 0
        self.rules: tuple[Rule, ...] = ()
        self._compiled: list[tuple[bool, str, tuple[Any, ...]]] = []
        self._cache: dict[tuple, Decision] = {}
        self._admits: dict[tuple[str, str, str], bool] = {}
        self.replace(rules)
        del self.counts["replaced"]  # the first rules replace nothing: 'replaced' counts run-time changes

    def replace(self, rules: Iterable[Rule | Mapping[str, Any]]) -> None:
        """Swap in new rules atomically: all of them read, or PolicyError and the old ones stay."""
        parsed = tuple(rule if isinstance(rule, Rule) else Rule.from_mapping(rule, i) for i, rule in enumerate(rules))
        compiled = []
        for rule in parsed:
            matchers = tuple(
                None if getattr(rule, name) == "*" else re.compile(fnmatch.translate(getattr(rule, name))).match
                for name in _FIELDS
            )
            compiled.append((rule.effect == "allow", rule.access, matchers))
        self.rules = parsed
        self._compiled = compiled
        self._cache = {}
        self._admits = {}
        self.version += 1
        self.counts["replaced"] += 1

    def decide(self, access: Access, estate: str, role: str, share: str, tag: str, channel: str) -> Decision:
        key = (access, estate, role, share, tag, channel)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(key)
            if len(self._cache) >= _CACHE:
                self._cache.clear()
            self._cache[key] = decision
        self.counts["allowed" if decision.allowed else "denied"] += 1
        return decision

    def allows(self, access: Access, estate: str, role: str, share: str, tag: str, channel: str) -> bool:
        return self.decide(access, estate, role, share, tag, channel).allowed

    def admits_any(self, estate: str, role: str, channel: str) -> bool:
        """May any request at all from ``estate`` (of ``role``) on ``channel`` be allowed?

        Asked before a road holds or decodes anything of a peer's message
        (flowcast.routing.allowance): False only when no rule could allow
        it -- no allow rule matches the estate, role and channel before a
        ``deny: any`` that matches them for every share and tag.  It errs
        towards True (a rule for one share admits the estate), never False
        for a request that ``decide`` would allow.
        """
        key = (estate, role, channel)
        found = self._admits.get(key)
        if found is None:
            found = self._admits_any(estate, role, channel)
            if len(self._admits) >= _CACHE:
                self._admits.clear()
            self._admits[key] = found
        return found

    def _admits_any(self, estate: str, role: str, channel: str) -> bool:
        for allow, access, (estate_m, role_m, share_m, tag_m, channel_m) in self._compiled:
            if any(m is not None and m(v) is None for m, v in ((estate_m, estate), (role_m, role), (channel_m, channel))):
                continue
            if allow:
                return True
            if access == "any" and share_m is None and tag_m is None:
                return False  # everything from it is denied, whatever follows
        return False

    def _decide(self, key: tuple) -> Decision:
        access, *values = key
        for index, (allow, rule_access, matchers) in enumerate(self._compiled):
            if rule_access != access and (rule_access != "any" or (allow and access not in _PLAIN)):
                # ``allow: any`` grants write and read only: a permission a layer
                # declares later (subscribe...) must be granted by name, so an
                # upgrade never widens an old policy.  ``deny: any`` denies all.
                continue
            for match, value in zip(matchers, values):
                if match is not None and match(value) is None:
                    break
            else:
                return Decision(allow, index)
        return Decision(False, -1)

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        return f"<Policy {len(self.rules)} rules>"
