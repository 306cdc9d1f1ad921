"""Store and shares: named, stamped values with optional history."""

from flowcast.store.handoff import Handoff
from flowcast.store.houselike import SERVICE_SLOTS, HouseLike
from flowcast.store.share import QueueShare, Share
from flowcast.store.store import ShareNameError, Store, valid_share_name

__all__ = ["Handoff", "HouseLike", "SERVICE_SLOTS", "QueueShare", "Share", "ShareNameError", "Store", "valid_share_name"]
