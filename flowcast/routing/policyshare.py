"""The policy as a share: a flow (or an operator) replaces a router's rules by writing ``flowcast.policy``.

Split from the router: it is control, not message handling.  A ``rules``
field that does not parse leaves the old policy in force and says why in
``flowcast.policy_problem``, so a bad write never opens or closes the estate.
"""

from __future__ import annotations

import logging
from typing import Any

from flowcast.routing.policy import PolicyError

__all__ = ["POLICY_PROBLEM_SHARE", "POLICY_SHARE", "follow_policy_share"]

log = logging.getLogger("flowcast.routing")

#: A value share whose ``rules`` field, when written, replaces the policy.
POLICY_SHARE = "flowcast.policy"
#: Where a policy written to POLICY_SHARE that does not parse is explained.
POLICY_PROBLEM_SHARE = "flowcast.policy_problem"


def follow_policy_share(router: Any) -> None:
    """Replace ``router``'s policy whenever ``rules`` is written to its store's POLICY_SHARE."""

    def written(share: Any) -> None:
        rules = share.get("rules")
        if rules is None:
            return
        try:
            if not isinstance(rules, (list, tuple)):
                raise PolicyError(f"rules must be a list of rules, not {type(rules).__name__}")
            router.policy.replace(rules)
        except PolicyError as error:
            router.counts["policy_rejected"] += 1
            log.warning("policy update refused: %s", error)
            router.store.share(POLICY_PROBLEM_SHARE).update(value=str(error))
            return
        router.counts["policy_replaced"] += 1
        log.info("policy replaced: %d rules", len(router.policy))

    router.store.share(POLICY_SHARE).watchers.append(written)
