"""Micro-thread runtime: scheduler, clocks, timers and I/O readiness."""

from flowcast.runtime.callback import CallbackError
from flowcast.runtime.clock import Clock, RealClock, VirtualClock, wall_now
from flowcast.runtime.scheduler import (
    Event,
    MicroThread,
    MicroThreadError,
    Scheduler,
    Timer,
    Wait,
    readable,
    sleep,
    sleep_until,
)
from flowcast.runtime.tokenbucket import TokenBucket

__all__ = [
    "CallbackError",
    "Clock",
    "Event",
    "MicroThread",
    "MicroThreadError",
    "RealClock",
    "Scheduler",
    "Timer",
    "TokenBucket",
    "VirtualClock",
    "Wait",
    "readable",
    "sleep",
    "sleep_until",
    "wall_now",
]
