"""FlowSpec: the one model both flow front ends load into.

A ``.flo`` script and a YAML flow describe the same thing; each front end
turns its text into these dataclasses and the builder turns them into
running framers.  The model is plain data (strings, numbers, lists, dicts)
so it round-trips through YAML without loss: ``.flo -> model -> YAML ->
model`` gives an equal model.

Share references keep Ioflo's addressing as written and normalised by the
front end, so that the builder -- not the parser -- decides what a relative
name means in its framer and frame:

* ``.a.b``                -- absolute share ``a.b``;
* ``a.b``                 -- relative to the acting inode (the frame's or
                             framer's ``via`` inode, else the store root);
* ``framer.me.state.elapsed``, ``framer.me.goal.x`` -- the current framer's
                             state and goal shares (``me`` is resolved by the
                             builder to the framer's name);
* ``framer.NAME.frame.me.x``  -- frame-relative shares.

Every element that came from text carries a :class:`Where` so that errors
found after parsing (unknown frame, unknown behaviour) still point at the
file, line and column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from flowcast.flow.errors import Where  # the model's positions are the errors' positions

__all__ = ["CONTEXTS", "SCHEDULES", "Act", "Aux", "Context", "FlowSpec", "FrameSpec", "FramerSpec",
           "HouseSpec", "Init", "Need", "Ref", "Schedule", "Where"]

#: When an act runs in its frame's life.  ``benter`` acts are entry
#: conditions; ``precur`` acts are transitions (and other interrupters);
#: the rest are Ioflo's enter / renter / recur / exit / rexit.
Context = Literal["benter", "enter", "renter", "precur", "recur", "exit", "rexit"]
CONTEXTS: tuple[str, ...] = ("benter", "enter", "renter", "precur", "recur", "exit", "rexit")

#: Framer schedules, as in Ioflo's ``framer X be SCHEDULE``.
Schedule = Literal["active", "inactive", "aux", "slave"]
SCHEDULES: tuple[str, ...] = ("active", "inactive", "aux", "slave")


@dataclass(frozen=True)
class Ref:
    """A share address and the fields of it that are meant.

    ``fields`` empty means "the share's default": ``value`` for reading a
    single value, all fields for copies.
    """

    path: str
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class Need:
    """One condition of a ``go``/``let``/conditional ``aux``, possibly negated.

    ``kind`` selects which other attributes matter:

    * ``always``     -- true (a bare ``go next``);
    * ``boolean``    -- ``state`` is truthy;
    * ``compare``    -- ``state OP goal`` with optional ``tolerance``; the goal is
      ``goal_value`` (direct) or ``goal_ref`` (indirect);
    * ``elapsed`` / ``recurred`` -- the framer's elapsed time / recurrence count
      compared with ``goal_value`` or ``goal_ref`` (``goal`` in the script is
      written by the front end as ``Ref("framer.me.goal.elapsed")``);
    * ``done``       -- ``tasker`` (a framer name or ``me``) is done; or with
      ``aux`` set (an aux name, ``any`` or ``all``) the current frame's auxes;
    * ``status``     -- ``tasker``'s status equals ``status`` (readied, started,
      running, stopped, aborted);
    * ``updated`` / ``changed`` -- ``state`` was updated / changed since the
      frame was entered.

    Added by the FloScript front end (optional; None when not written):

    * ``frame`` / ``framer`` -- the ``in frame [F] [in framer [G]]`` clause of
      an aux ``done`` need (``any in frame me is done``): the frame whose auxes
      are meant and its framer, ``me`` when named without a name.  Both None is
      Ioflo's default: for ``any``/``all`` the current frame of the current
      framer; for ``aux NAME`` the aux NAME of the current framer, wherever it
      runs.  For ``updated``/``changed``, ``frame`` is the ``in frame [F]``
      clause: the frame (``me`` = this one) whose enter acts reset the mark;
      None is Ioflo's default, the mark reset only on the transition into the
      need's own frame;
    * ``marker`` -- the ``by MARKER`` name of an ``updated``/``changed`` need,
      so that several needs share one mark (Ioflo keys marks by framer and
      marker, else by framer and frame).
    """

    kind: str
    negate: bool = False
    state: Ref | None = None
    op: str | None = None
    goal_value: Any = None
    goal_ref: Ref | None = None
    tolerance: float | None = None
    tasker: str | None = None
    aux: str | None = None
    status: str | None = None
    where: Where | None = field(default=None, compare=False)
    frame: str | None = None
    framer: str | None = None
    marker: str | None = None


@dataclass(frozen=True)
class Act:
    """One action line of a frame.

    ``verb`` and the keys of ``args`` (the verb table, :mod:`flowcast.flow.verbs`,
    is where each verb's keys, defaults and contexts are defined; this says
    what they mean):

    * ``do``: ``behaviour`` (dotted name, e.g. ``"counter"`` or ``"controller.pid.depth"``
      as the front end normalises ``do controller pid depth``), ``name`` (the
      ``as`` name or None), ``inode`` (``via`` path or None), ``with`` (dict
      of direct parameter data), ``per`` (dict), ``from`` (list of Ref),
      ``to`` (list of Ref);
    * ``put``: ``data`` (dict field->value), ``dst`` (Ref);
    * ``inc``: ``dst`` (Ref) and either ``data`` (dict) or ``src`` (Ref);
    * ``copy``: ``src`` (Ref), ``dst`` (Ref);
    * ``set``: ``dst`` (Ref of the goal share) and ``data`` or ``src``;
    * ``print``: ``message`` (str);
    * ``bid``: ``control`` (start/stop/run/abort/ready), ``taskers`` (list of
      names, ``me`` or ``all``), ``period`` (added: ``bid run X at PERIOD`` --
      a number, a Ref to read the period from, or None when not given);
    * ``ready`` / ``start`` / ``stop`` / ``run`` / ``abort``: ``taskers`` (list);
    * ``done``: ``taskers`` (list, ``me`` by default);
    * ``go``: ``far`` (frame name, ``next`` or ``me``), ``needs`` (list of Need),
      ``human`` (the statement text, for traces);
    * ``let``: ``needs`` (list of Need);
    * ``aux``: a *conditional* aux (``aux NAME if NEEDS``): ``framer`` (name),
      ``needs`` (list of Need).  Always ``precur``: it is an interrupter
      among the frame's transitions, and its place among them is its place
      in the script -- which is why it is an act and not an :class:`Aux`.

    ``timeout N`` and ``repeat N`` are written by the front end as ``go``
    acts to ``next`` with an ``elapsed >=`` / ``recurred >=`` need, as Ioflo does.
    """

    verb: str
    context: Context
    args: dict[str, Any] = field(default_factory=dict)
    where: Where | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Aux:
    """An auxiliary framer run inside a frame: ``aux NAME``.

    A conditional ``aux NAME if NEEDS`` is an ``aux`` :class:`Act` instead;
    ``needs`` here is always empty and kept only so old models still load.
    """

    framer: str
    needs: tuple[Need, ...] = ()
    where: Where | None = field(default=None, compare=False)


@dataclass
class FrameSpec:
    name: str
    over: str | None = None
    next: str | None = None  # explicit ``next NAME``; None means lexically next
    inode: str | None = None
    acts: list[Act] = field(default_factory=list)
    auxes: list[Aux] = field(default_factory=list)
    where: Where | None = field(default=None, compare=False)
    # Added for ``under NAME``: the primary under frame, the one entered below
    # this frame when this frame is entered.  None means Ioflo's default, the
    # first frame written ``in`` this one.  The front end also makes the named
    # frame's ``over`` this frame.
    under: str | None = None


@dataclass
class FramerSpec:
    name: str
    schedule: Schedule = "active"
    period: float = 0.0  # 0 means the house period
    first: str | None = None  # None means the first frame written
    inode: str | None = None
    frames: list[FrameSpec] = field(default_factory=list)
    where: Where | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Init:
    """``init DST with DATA`` (``data``) or ``init DST from SRC`` (``src``)."""

    dst: Ref
    data: dict[str, Any] | None = None
    src: Ref | None = None
    where: Where | None = field(default=None, compare=False)


@dataclass
class HouseSpec:
    name: str
    inits: list[Init] = field(default_factory=list)
    framers: list[FramerSpec] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)  # behaviour modules: paths or dotted names
    # Where each ``load`` was written, so a module that fails to load is
    # reported at its own line, not the house's.
    load_where: dict[str, Where] = field(default_factory=dict, compare=False, repr=False)
    logs: list[Ref] = field(default_factory=list)  # shares whose history is kept
    where: Where | None = field(default=None, compare=False)


@dataclass
class FlowSpec:
    """A whole flow script: one or more houses."""

    houses: list[HouseSpec] = field(default_factory=list)
    source: str = ""  # file the flow was loaded from

    def house(self, name: str | None = None) -> HouseSpec:
        """The named house, or the only/first one."""
        if name is None:
            if not self.houses:
                raise LookupError("flow defines no house")
            return self.houses[0]
        for house in self.houses:
            if house.name == name:
                return house
        raise LookupError(f"no house {name!r}; houses: {', '.join(h.name for h in self.houses)}")
