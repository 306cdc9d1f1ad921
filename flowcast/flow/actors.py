"""Ioflo's actor names, so ``of actor`` and ``actor.me`` paths land where Ioflo puts them.

In Ioflo every act is done by an *actor* object with a registered
CamelCase name (``put`` is a ``PokeDirect``, a comparison need a
``NeedDirect``), and a path written ``x of actor`` means
``framer.me.frame.me.actor.me.x`` with ``actor.me`` replaced by that name
split at its capitals: ``framer.F.frame.G.actor.poke.direct.x``.  Scripts
(Ioflo's own ``testActorRelative.flo``) write a share through one actor and
read it back by its spelled-out path, so flowcast must pick the same name
for the same act; this table is that choice, kept apart from the builder
so it can be checked against Ioflo's in one place.
"""

from __future__ import annotations

from flowcast.flow.spec import Act, Need

__all__ = ["act_actor", "need_actor", "actor_path", "resolve_actor"]


def act_actor(act: Act) -> str | None:
    """The Ioflo actor name of ``act``, or None when the verb has no shares to address."""
    verb, args = act.verb, act.args
    indirect = args.get("src") is not None
    if verb == "put":
        return "PokeIndirect" if indirect else "PokeDirect"
    if verb == "copy":
        return "PokeIndirect"
    if verb == "inc":
        return "IncIndirect" if indirect else "IncDirect"
    if verb == "set":
        return "GoalIndirect" if indirect else "GoalDirect"
    if verb == "bid":
        return "Want" + str(args.get("control", "")).capitalize()
    if verb == "do":
        # Ioflo's Doer: the ``as`` name if given, else its kind, which is
        # the camel-cased ``do`` words -- flowcast's dotted name.
        return args.get("name") or args.get("behaviour") or None
    return None


def need_actor(need: Need) -> str:
    """The Ioflo actor of a condition: each need is an act of its own in Ioflo."""
    kind = need.kind
    if kind == "boolean":
        return "NeedBoolean"
    if kind in ("compare", "elapsed", "recurred"):
        return "NeedIndirect" if need.goal_ref is not None else "NeedDirect"
    if kind == "updated":
        return "NeedUpdate"
    if kind == "changed":
        return "NeedChange"
    if kind == "done":
        return "NeedDoneAux" if need.aux is not None else "NeedDone"
    return "Need" + kind.capitalize()


def actor_path(name: str) -> list[str]:
    """Ioflo's ``nameToPath``: each capital starts a new path part (``PokeDirect`` -> poke, direct)."""
    parts: list[str] = []
    for piece in name.split("."):
        word = ""
        for char in piece:
            if char.isupper():
                if word:
                    parts.append(word)
                word = char.lower()
            else:
                word += char
        if word:
            parts.append(word)
    return parts


def resolve_actor(parts: list[str], doer: Act | Need | None) -> list[str] | None:
    """Replace ``actor.me`` in an absolute ``framer.F...`` path with the name
    of the actor of ``doer`` (the act or need whose path it is); None when
    there is no actor to name.

    Ioflo looks at two places only: ``framer.F.frame.G.actor.me.x`` and
    ``framer.F.actor.me.x``; ``actor.me`` anywhere else is a plain name.
    The name is worked out only here, when a path asks for it: the builder
    compiles tens of thousands of acts that never do.
    """
    if len(parts) > 5 and parts[2] == "frame" and parts[4] == "actor" and parts[5] == "me":
        at = 5
    elif len(parts) > 3 and parts[2] == "actor" and parts[3] == "me":
        at = 3
    else:
        return parts
    if isinstance(doer, Need):
        actor: str | None = need_actor(doer)
    else:
        actor = act_actor(doer) if doer is not None else None
    if not actor:
        return None
    return [*parts[:at], *actor_path(actor), *parts[at + 1 :]]
