"""Behaviours: user code that frames run, found by name."""

from flowcast.behaving.registry import Behaviour, BehaviourError, Io, Param, Registry, behaviour, canonical_name

__all__ = ["Behaviour", "BehaviourError", "Io", "Param", "Registry", "behaviour", "canonical_name"]
