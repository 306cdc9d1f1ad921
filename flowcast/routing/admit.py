"""Admission of a message arriving by road: which rule of the policy lets this remote do this to that share.

Split from the router because it is the one decision the policy makes per
message from outside, and its refusal carries two texts: the reason the
source is told, and -- for this estate's operator only, in its denials and
log -- the rule that would allow it (their next step).  Telling the source
would tell a remote how this estate's policy is written.
"""

from __future__ import annotations

from typing import Any

from flowcast.routing.handlers import ACCESS_REPLY, Refused
from flowcast.routing.policy import Policy

__all__ = ["admit"]


def admit(policy: Policy, road: Any, remote: str, share: str, tag: str, access: str, channel: str) -> None:
    """Raise Refused (``denied``) unless ``policy`` lets ``remote`` have ``access`` to ``share`` on ``channel``.

    A reply tag that answers nothing this house sent is judged as a write.
    The router's own shares (``flowcast.*``: policy, presence) are let in
    only by a rule that names them, never by a wildcard.
    """
    try:
        role = road.remote(remote).record.role
    except KeyError:
        role = ""
    if access == ACCESS_REPLY:
        access = "write"
    decision = policy.decide(access, remote, role, share, tag, channel)
    allowed = decision.allowed
    if allowed and share.startswith("flowcast.") and not policy.rules[decision.rule].share.startswith("flowcast."):
        allowed = False
    if not allowed:
        named = share if share.isidentifier() or "." in share else repr(share)
        raise Refused(f"{access} of {share!r} by {remote!r} ({role}) on {channel!r} denied by policy", "denied",
                      f"to allow it: {{allow: {access}, estate: {remote}, share: {named}}}")
