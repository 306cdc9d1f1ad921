"""flowcast.routing: routes, the router and its authorization policy.

    router = Router(store, estate="alpha", yard="manor")
    router.attach_road("main", road); router.attach_lane(lane)
    router.send("pong@.beta", {"n": 1}, src="ping", tag="ping")
    router.handle("subscribe", on_subscribe, access=declare_access("subscribe"))
"""

from flowcast.routing.parcel import ParcelError
from flowcast.routing.handlers import Landing, Refused
from flowcast.routing.policy import Decision, Policy, PolicyError, Rule, declare_access
from flowcast.routing.reads import ReadLimits, configure_reads
from flowcast.routing.route import Route, RouteError
from flowcast.routing.router import POLICY_SHARE, Router, envelope, presence_share

__all__ = [
    "Decision",
    "ParcelError",
    "Landing",
    "Refused",
    "declare_access",
    "POLICY_SHARE",
    "Policy",
    "PolicyError",
    "ReadLimits",
    "Route",
    "RouteError",
    "Router",
    "Rule",
    "configure_reads",
    "envelope",
    "presence_share",
]
