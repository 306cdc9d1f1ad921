"""flowcast.routing: routes, the router and its authorization policy.

    router = Router(store, estate="alpha", yard="manor")
    router.attach_road("main", road); router.attach_lane(lane)
    router.send("pong@.beta", {"n": 1}, src="ping", tag="ping")
"""

from flowcast.routing.policy import Decision, Policy, PolicyError, Rule
from flowcast.routing.route import Route, RouteError
from flowcast.routing.router import POLICY_SHARE, Router, envelope, presence_share

__all__ = [
    "Decision",
    "POLICY_SHARE",
    "Policy",
    "PolicyError",
    "Route",
    "RouteError",
    "Router",
    "Rule",
    "envelope",
    "presence_share",
]
