"""The verb table: every act a frame can hold, defined once.

A verb used to be known in six places -- the model's docstring, the .flo
parser (general and fast path), the YAML reader and writer, the name
checker and the builder -- each with its own list, and a verb added to one
and forgotten in another failed only when a flow used it.  Here each verb
says once what it is: the model act it becomes, its arguments and the
defaults a front end fills in, where it runs when no context is written,
the YAML keys it takes beside its own, and which of its arguments name
frames, framers or conditions that :mod:`flonames` must check.

The code that reads, writes and builds a verb stays with its language (a
.flo handler knows tokens, a YAML reader knows nodes, a compiler knows
shares), but each of those finds its code through this table when its
module is imported: :func:`each` raises at import when a verb has no code
there, and a test checks the other direction (no code for a verb the table
does not name).  ``timeout`` and ``repeat`` are words of their own in both
languages and become ``go`` acts, as in Ioflo.

Structure statements (``house``, ``framer``, ``frame``, ``init``, context
lines, ...) are not acts and are not in the table: only .flo reads them as
statements; YAML has them as the keys of its mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from flowcast.flow.errors import Where
from flowcast.flow.spec import Act

__all__ = ["ACTS", "FIXED", "NATIVE", "VERBS", "Verb", "each", "make_act"]

#: What an argument names, for :mod:`flonames`: a frame of the framer (``next``
#: and ``me`` too), an aux framer, framers by name (``me``; ``all`` where the
#: verb takes it), or conditions.
NameKind = str
FRAME, AUX, TASKERS, TASKERS_OR_ALL, NEEDS = "frame", "aux", "taskers", "taskers or all", "needs"


@dataclass(frozen=True)
class Verb:
    """One verb a person writes in a frame."""

    word: str
    #: The model verb (``Act.verb``) it becomes.
    act: str
    #: Where it runs when no context is written (Ioflo's "native" context).
    native: str
    #: Arguments every act of this verb has.
    args: tuple[str, ...]
    #: Arguments a script may leave out, with their defaults (a type: a new empty one per act).
    optional: tuple[tuple[str, Any], ...] = ()
    #: True: the context is the verb's own; context lines and ``at`` do not move it.
    fixed: bool = False
    #: Keys a YAML act of this verb may have besides the verb itself.
    yaml: tuple[str, ...] = ()
    #: Arguments naming things checked once the whole flow is read, in checking order.
    names: tuple[tuple[str, NameKind], ...] = ()


def _verb(word: str, native: str, args: tuple[str, ...], *, act: str = "", **more: Any) -> Verb:
    return Verb(word, act or word, native, args, **more)


_TASKERS = (("taskers", TASKERS),)

VERBS: dict[str, Verb] = {
    v.word: v
    for v in (
        _verb("do", "recur", ("behaviour",),
              optional=(("name", None), ("inode", None), ("with", dict), ("per", dict), ("from", list), ("to", list)),
              yaml=("as", "at", "via", "with", "per", "from", "to")),
        _verb("put", "enter", ("data", "dst"), yaml=("into", "at")),
        _verb("inc", "enter", ("dst",), optional=(("data", None), ("src", None)), yaml=("with", "from", "at")),
        _verb("copy", "enter", ("src", "dst"), yaml=("into", "at")),
        _verb("set", "enter", ("dst",), optional=(("data", None), ("src", None)), yaml=("with", "from", "at")),
        _verb("print", "enter", ("message",), yaml=("at",)),
        _verb("bid", "enter", ("control", "taskers"), optional=(("period", None),),
              yaml=("taskers", "period", "at"), names=(("taskers", TASKERS_OR_ALL),)),
        _verb("ready", "benter", ("taskers",), yaml=("at",), names=_TASKERS),
        _verb("start", "enter", ("taskers",), yaml=("at",), names=_TASKERS),
        _verb("stop", "exit", ("taskers",), yaml=("at",), names=_TASKERS),
        _verb("run", "recur", ("taskers",), yaml=("at",), names=_TASKERS),
        _verb("abort", "enter", ("taskers",), yaml=("at",), names=_TASKERS),
        _verb("done", "enter", ("taskers",), yaml=("at",), names=_TASKERS),
        _verb("go", "precur", ("far", "needs"), optional=(("human", ""),), fixed=True, yaml=("if", "human"),
              names=(("far", FRAME), ("needs", NEEDS))),
        _verb("timeout", "precur", ("far", "needs"), act="go", optional=(("human", ""),), fixed=True,
              yaml=("human",), names=(("far", FRAME), ("needs", NEEDS))),
        _verb("repeat", "precur", ("far", "needs"), act="go", optional=(("human", ""),), fixed=True,
              yaml=("human",), names=(("far", FRAME), ("needs", NEEDS))),
        _verb("let", "benter", ("needs",), fixed=True, names=(("needs", NEEDS),)),
        # A conditional aux (``aux NAME if NEEDS``); a plain aux is the frame's, not an act.
        _verb("aux", "precur", ("framer", "needs"), fixed=True, yaml=("if",),
              names=(("framer", AUX), ("needs", NEEDS))),
    )
}

#: The model verbs, each by the table entry of its own word.
ACTS: dict[str, Verb] = {v.act: VERBS[v.act] for v in VERBS.values()}

#: Each movable verb's native context, and each fixed verb's only one.
NATIVE: dict[str, str] = {v.word: v.native for v in VERBS.values() if not v.fixed}
FIXED: dict[str, str] = {v.word: v.native for v in VERBS.values() if v.fixed}

_OPTIONAL: dict[str, tuple[tuple[str, Any], ...]] = {v.act: v.optional for v in ACTS.values()}

_T = TypeVar("_T")


def each(table: Mapping[str, _T], what: str, words: Mapping[str, Verb] = VERBS) -> dict[str, _T]:
    """``table`` restricted to the verbs of ``words``; a verb it lacks is an error at import.

    Each front end and the builder build their dispatch through this, so a
    verb added to the table without its code there cannot be imported.
    """
    missing = [word for word in words if word not in table]
    if missing:
        raise LookupError(f"{what} has no code for verb(s) {', '.join(missing)} of flow/verbs.py")
    return {word: table[word] for word in words}


def make_act(verb: str, context: str, args: dict[str, Any], where: Where | None = None) -> Act:
    """An Act with every argument key present, so equal meaning means equal Acts.

    Both front ends build acts here: an argument the script did not give
    gets the same empty default whichever language it came from.
    """
    full = dict(args)
    for key, default in _OPTIONAL.get(verb, ()):
        if key not in full:
            full[key] = default() if isinstance(default, type) else default
    return Act(verb, context, full, where)  # type: ignore[arg-type]

