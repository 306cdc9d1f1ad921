"""Turn a HouseSpec into running framers: resolve names, compile acts.

Everything that can be checked before a flow runs is checked here: frame
and framer names, behaviour names and their parameters, share names.  All
problems are collected and raised together as located
:class:`~flowcast.flow.errors.FlowError` s, and nothing starts while any
remain.  Acts become plain closures over resolved shares and frames, so a
tick does no name lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowcast.behaving.registry import BehaviourError, Registry
from flowcast.flow.actors import resolve_actor
from flowcast.flow.auxcycle import aux_cycles
from flowcast.flow.buildacts import ActCompiler, BehaviourFailure
from flowcast.flow.buildneeds import NeedCompiler, _Mark
from flowcast.flow.errors import FlowError, FlowErrors, did_you_mean
from flowcast.flow.framer import Frame, Framer, Transition
from flowcast.flow.spec import Act, FrameSpec, FramerSpec, HouseSpec, Need, Ref, Where
from flowcast.flow.verbs import ACTS, each
from flowcast.runtime.gcpause import gc_paused
from flowcast.store import HouseLike, Share, ShareNameError, Store

__all__ = ["BehaviourFailure", "BuiltHouse", "build_house"]


@dataclass
class BuiltHouse:
    """A house's store and framers, ready for a skedder."""

    name: str
    store: Store
    framers: dict[str, Framer]
    taskables: list[Framer]  # active and inactive framers, in script order
    registry: Registry
    logged: list[str] = field(default_factory=list)


class _Builder(ActCompiler, NeedCompiler):
    """One house's build: the names resolved, the acts and conditions compiled, every problem kept."""

    def __init__(
        self,
        spec: HouseSpec,
        registry: Registry,
        stamp: Callable[[], float],
        on_transition: Callable[[Transition], None] | None,
        out: Callable[[str], None],
        house: HouseLike | None = None,
    ) -> None:
        self.spec = spec
        self.house = house
        self.registry = registry
        self.stamp = stamp
        self.on_transition = on_transition
        self.out = out
        self.store = Store(stamp, name=spec.name)
        self.errors: list[FlowError] = []
        self.framers: dict[str, Framer] = {}
        self.written: set[str] = set()
        self.marks: dict[tuple[str, str, str], _Mark] = {}
        self.enter_marks: set[tuple[tuple[str, str, str], str]] = set()
        self.doer: Act | Need | None = None  # the act or need being compiled: whose ``actor.me``
        self.aux_uses: list[tuple[str, str, Where | None]] = []  # (framer, aux, where): rings are errors
        self.deferred_exits: list[Callable[[], Any]] = []  # the frame being compiled: run after its exit acts

    # -- errors ------------------------------------------------------------

    def error(self, message: str, where: Where | None, hint: str = "") -> None:
        self.errors.append(FlowError(message, where, hint))

    # -- shares --------------------------------------------------------------

    def path(self, ref_path: str, framer: Framer, frame: Frame | None) -> str:
        """Resolve Ioflo's relative addressing to an absolute share name."""
        if ref_path.startswith("."):
            return ref_path[1:]
        parts = ref_path.split(".")
        if parts[0] == "framer" and len(parts) > 2:
            if parts[1] == "me":
                parts[1] = framer.name
            if len(parts) > 4 and parts[2] == "frame" and parts[3] == "me" and frame is not None:
                parts[3] = frame.name
            named = resolve_actor(parts, self.doer)
            if named is None:
                raise ShareNameError(f"{ref_path!r} is relative to an actor, and only an act has one")
            return ".".join(named)
        if parts[0] == "frame" and len(parts) > 2:
            name = frame.name if (parts[1] == "me" and frame is not None) else parts[1]
            return ".".join(["framer", framer.name, "frame", name, *parts[2:]])
        # Ioflo: the framer's ``via`` inode, then the inodes of the frame and
        # its overs; ``me.x`` (Ioflo's "of me") takes the framer's inode only.
        inodes = [framer.inode]
        if parts[0] == "me":
            parts = parts[1:]
        elif frame is not None:
            chain = []
            node: Frame | None = frame
            while node is not None:
                chain.append(node.inode)
                node = node.over
            inodes.extend(reversed(chain))
        prefix = [piece for inode in inodes if inode for piece in inode.strip(".").split(".")]
        return ".".join([*prefix, *parts])

    def share(self, ref: Ref | str, framer: Framer, frame: Frame | None, where: Where | None) -> Share | None:
        path = ref.path if isinstance(ref, Ref) else ref
        try:
            resolved = self.path(path, framer, frame)
            share = self.store.share(resolved)
        except ShareNameError as error:
            self.error(str(error), where)
            return None
        self.bind_state_if_named(resolved)
        return share

    def bind_state_if_named(self, name: str) -> None:
        """Mirror a framer's elapsed/recurred (active/human) into
        ``framer.F.state.*`` only if the flow names them: updating two shares
        per framer per tick for nobody cost a quarter of a tick."""
        parts = name.split(".")
        if len(parts) != 4 or parts[0] != "framer" or parts[2] != "state":
            return
        target = self.framers.get(parts[1])
        if target is None:
            return
        if parts[3] in ("elapsed", "recurred") and target._elapsed_share is None:
            target.bind_state(
                self.store.share(f"framer.{target.name}.state.elapsed", {"value": 0.0}),
                self.store.share(f"framer.{target.name}.state.recurred", {"value": 0}),
            )
        elif parts[3] in ("active", "human") and target._active_share is None:
            target.bind_outline(
                self.store.share(f"framer.{target.name}.state.active", {"value": ""}),
                self.store.share(f"framer.{target.name}.state.human", {"value": ""}),
            )

    def reading(self, share: Share, fields: tuple[str, ...]) -> str:
        """The field a need reads; created as 0.0 when absent, as Ioflo does."""
        name = fields[0] if fields else "value"
        share.default(name, 0.0)
        return name

    # -- build ---------------------------------------------------------------

    def build(self) -> BuiltHouse:
        spec = self.spec
        for init in spec.inits:
            self.apply_init(init)
        for fspec in spec.framers:
            if fspec.name in self.framers:
                self.error(f"framer {fspec.name!r} is defined twice", fspec.where)
                continue
            framer = Framer(
                fspec.name,
                schedule=fspec.schedule,
                period=fspec.period,
                stamp=self.stamp,
                on_transition=self.on_transition,
            )
            framer.inode = fspec.inode or ""
            self.framers[fspec.name] = framer
        for fspec in spec.framers:
            self.build_frames(fspec)
        self.taskables = [self.framers[f.name] for f in spec.framers if f.schedule in ("active", "inactive")]
        for fspec in spec.framers:
            framer = self.framers[fspec.name]
            for frame_spec in fspec.frames:
                frame = framer.frames.get(frame_spec.name)
                if frame is not None:
                    self.compile_frame(frame_spec, frame, framer)
        for ring, where in aux_cycles(self.aux_uses):
            self.error(f"aux framers run inside each other in a loop: {' aux '.join(ring)}", where,
                       "an aux framer cannot run inside itself; break the loop")
        logged = []
        for ref in spec.logs:
            try:
                share = self.store.share(ref.path)
            except ShareNameError as error:
                self.error(str(error), None)
                continue
            self.bind_state_if_named(share.name)
            share.log()
            logged.append(share.name)
        if self.errors:
            raise FlowErrors(self.errors)
        return BuiltHouse(spec.name, self.store, self.framers, self.taskables, self.registry, logged)

    def apply_init(self, init: Any) -> None:
        try:
            name = self.store.normalise(init.dst.path if init.dst.path.startswith(".") else "." + init.dst.path)
        except ShareNameError as error:
            self.error(str(error), init.where)
            return
        share = self.store.share(name)
        self.written.add(name)
        stamp = share.stamp
        if init.data is not None:
            data = dict(init.data)
            if init.dst.fields and list(data) == ["value"]:
                data = {init.dst.fields[0]: data["value"]}
            share.update(data)
        elif init.src is not None:
            try:
                src = self.store.share(init.src.path)
            except ShareNameError as error:
                self.error(str(error), init.where)
                return
            fields = init.src.fields or tuple(src.keys())
            share.update({f: src.get(f) for f in fields})
        share.stamp = stamp  # an init is not an update: 'is updated' ignores it

    def build_frames(self, fspec: FramerSpec) -> None:
        framer = self.framers[fspec.name]
        for frame_spec in fspec.frames:
            if frame_spec.name in framer.frames:
                self.error(f"frame {frame_spec.name!r} is defined twice in framer {fspec.name!r}", frame_spec.where)
                continue
            frame = Frame(frame_spec.name, framer)
            frame.inode = frame_spec.inode or ""
            framer.frames[frame_spec.name] = frame
        names = list(framer.frames)
        specs = [f for f in fspec.frames]
        for index, frame_spec in enumerate(specs):
            frame = framer.frames[frame_spec.name]
            if frame_spec.over:
                over = self.frame(framer, frame_spec.over, frame_spec.where)
                if over is not None:
                    frame.over = over
                    over.unders.append(frame)
            if frame_spec.next:
                frame.next = self.frame(framer, frame_spec.next, frame_spec.where)
            elif index + 1 < len(specs):
                frame.next = framer.frames[specs[index + 1].name]
        for frame_spec in specs:
            if frame_spec.under:
                frame = framer.frames[frame_spec.name]
                under = self.frame(framer, frame_spec.under, frame_spec.where)
                if under is not None:
                    if under.over is not frame:
                        if under.over is not None:
                            under.over.unders.remove(under)
                        under.over = frame
                        frame.unders.append(under)
                    frame.unders.remove(under)
                    frame.unders.insert(0, under)  # the primary under: entered below this frame
        for frame in framer.frames.values():  # loops in nesting
            seen = {frame}
            over = frame.over
            while over is not None:
                if over in seen:
                    self.error(f"frame {frame.name!r} is nested inside itself", None)
                    frame.over = None
                    break
                seen.add(over)
                over = over.over
        for frame in framer.frames.values():
            frame.trace_outline()
        if fspec.first:
            framer.first = self.frame(framer, fspec.first, fspec.where)
        elif names:
            framer.first = framer.frames[names[0]]
        else:
            self.error(f"framer {fspec.name!r} has no frames", fspec.where)

    def frame(self, framer: Framer, name: str, where: Where | None) -> Frame | None:
        found = framer.frames.get(name)
        if found is None:
            self.error(
                f"framer {framer.name!r} has no frame {name!r}",
                where,
                did_you_mean(name, framer.frames),
            )
        return found

    def tasker(self, name: str, framer: Framer, where: Where | None) -> Framer | None:
        if name == "me":
            return framer
        found = self.framers.get(name)
        if found is None:
            self.error(f"no framer {name!r}", where, did_you_mean(name, self.framers))
        return found

    # -- acts ------------------------------------------------------------------

    def compile_frame(self, spec: FrameSpec, frame: Frame, framer: Framer) -> None:
        for aux_spec in spec.auxes:
            aux = self.tasker(aux_spec.framer, framer, aux_spec.where)
            if aux is None:
                continue
            if aux.schedule != "aux":
                self.error(f"framer {aux.name!r} is not an aux framer (be aux)", aux_spec.where)
                continue
            frame.auxes.append(aux)
            self.aux_uses.append((framer.name, aux.name, aux_spec.where))
        deferred_exits: list[Callable[[], Any]] = []
        self.deferred_exits = deferred_exits  # behaviour lifecycles' exit hooks join them
        for act in spec.acts:
            compiled = self.compile_act(act, frame, framer)
            if compiled is None:
                continue
            if act.verb == "aux":  # an interrupter among the transitions, whatever its context says
                frame.preacts.append(compiled)
                continue
            lists = {
                "benter": frame.beacts,
                "enter": frame.enacts,
                "renter": frame.renacts,
                "precur": frame.preacts,
                "recur": frame.reacts,
                "exit": frame.exacts,
                "rexit": frame.rexacts,
            }
            target = lists.get(act.context)
            if target is None:
                self.error(f"unknown context {act.context!r}", act.where)
                continue
            target.append(compiled)
        frame.exacts.extend(deferred_exits)


    def compile_act(self, act: Act, frame: Frame, framer: Framer) -> Callable[[], Any] | None:
        compiler = _COMPILERS.get(act.verb)
        if compiler is None:
            self.error(f"verb {act.verb!r} is not supported", act.where)
            return None
        self.doer = act  # acts do not nest; the needs inside one restore it
        return compiler(self, act, frame, framer)


#: By model verb: its compiler, ``act_VERB`` of buildacts.py, through the verb table.
_COMPILERS: dict[str, Callable[..., Callable[[], Any] | None]] = each(
    {name[4:]: fn for name, fn in vars(ActCompiler).items() if name.startswith("act_")}, "the builder (buildacts.py)", ACTS)


def build_house(
    spec: HouseSpec,
    *,
    stamp: Callable[[], float],
    registry: Registry | None = None,
    on_transition: Callable[[Transition], None] | None = None,
    out: Callable[[str], None] = print,
    base: Path | None = None,
    house: HouseLike | None = None,
) -> BuiltHouse:
    """Resolve and compile one house; raise FlowErrors listing every problem.

    ``house`` is what behaviours see as ``io.house`` (the running House:
    its scheduler and router), so stock behaviours can wire stacks.
    """
    if registry is None:
        registry = Registry()
        registry.load_entry_points()
    problems: list[FlowError] = []
    for load in spec.loads:
        try:
            registry.load(load, base)
        except BehaviourError as error:
            problems.append(FlowError(str(error), spec.load_where.get(load, spec.where)))
    if problems:
        raise FlowErrors(problems)
    with gc_paused():
        return _Builder(spec, registry, stamp, on_transition, out, house).build()
