"""Behaviours: user code that acts on shares from inside a frame.

A behaviour is a plain function, generator function or class marked with
:func:`behaviour`.  The mark only names it; nothing is registered globally.
A :class:`Registry` belongs to one house build and collects behaviours from
the modules a flow loads, from the ``flowcast.behaviours`` entry-point group
and from explicit calls -- so two flows in one process never see each
other's behaviours (Ioflo's global registries made that impossible).

The calling convention is the same for all three forms: the first argument
is an :class:`Io` (the shares the act bound with ``from``/``to``/``per``, the
store, the clock), the rest are the declared parameters, filled from the
act's ``with`` data and checked against the signature when the flow is
built, so a typo is a load error, not a run-time surprise.

* function: called each time the act runs;
* generator function: created when its frame is entered, advanced one step
  each time the act runs, closed when the frame exits -- state lives in
  local variables;
* class: instantiated with ``(io, **params)`` when the flow is built; the
  instance is called each time the act runs; it may define ``enter``,
  ``exit`` and ``abort(exc)``, run as its frame is entered and left
  (:mod:`flowcast.behaving.lifecycle`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from flowcast.errors import Error, did_you_mean

if TYPE_CHECKING:  # a type only: the registry loads before anything runs
    from flowcast.store import HouseLike

__all__ = ["Behaviour", "BehaviourError", "Io", "Param", "Registry", "behaviour", "canonical_name"]

MARK = "__flowcast_behaviour__"
ENTRY_POINT_GROUP = "flowcast.behaviours"
#: flowcast's own entries of that group (pyproject.toml), loaded even when the installed metadata predates one.
STOCK_MODULES = ("flowcast.behaving.stock", "flowcast.routing.behaviours", "flowcast.cast.behaviours", "flowcast.causal.behaviours")

T = TypeVar("T")


class BehaviourError(Error):
    """A behaviour that cannot be found, loaded or given these parameters."""


@dataclass(frozen=True)
class Param:
    name: str
    default: Any = inspect.Parameter.empty
    kind: type | None = None

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


@dataclass(frozen=True)
class Behaviour:
    """A named piece of user code and the parameters it declares."""

    name: str
    target: Any
    form: str  # "function", "generator" or "class"
    params: tuple[Param, ...] = ()
    doc: str = ""
    module: str = ""

    def bind(self, data: dict[str, Any]) -> dict[str, Any]:
        """Check ``with`` data against the declared parameters; coerce simple types."""
        known = {p.name: p for p in self.params}
        out: dict[str, Any] = {}
        for key, value in data.items():
            param = known.get(key)
            if param is None:
                hint = did_you_mean(key, known) or (
                    f"it takes: {', '.join(known)}" if known else "it takes no parameters"
                )
                raise BehaviourError(f"behaviour {self.name!r} has no parameter {key!r}; {hint}")
            out[key] = _coerce(self.name, param, value)
        missing = [p.name for p in self.params if p.required and p.name not in out]
        if missing:
            raise BehaviourError(f"behaviour {self.name!r} needs parameter(s) {', '.join(missing)}")
        return out


def _coerce(name: str, param: Param, value: Any) -> Any:
    kind = param.kind
    if kind is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    try:
        if kind is int and isinstance(value, float) and value.is_integer():
            return int(value)  # 2.0 is 2; 0.5 is refused below, never truncated
        if kind is int and isinstance(value, str):
            return int(value, 10)
        if kind is float and isinstance(value, str):
            return float(value)
        if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    except (TypeError, ValueError):
        pass
    raise BehaviourError(
        f"behaviour {name!r} parameter {param.name!r} wants {kind.__name__}, got {value!r}"
    )


def behaviour(name: str | None = None) -> Callable[[T], T]:
    """Mark a function, generator function or class as a behaviour called ``name``.

    Without a name the object's own name is used (``PickPeppers`` is found by
    ``do pick peppers`` as in Ioflo).
    """

    def mark(target: T) -> T:
        setattr(target, MARK, name or getattr(target, "__name__"))
        return target

    return mark


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def canonical_name(name: str) -> str:
    """The lookup key: dotted lowercase, CamelCase split, ``_`` and spaces as dots.

    ``PickPeppers``, ``pick.peppers``, ``pick peppers`` and ``pick_peppers``
    all become ``pick.peppers``.
    """
    parts = re.split(r"[.\s_]+", _CAMEL.sub(".", name.strip()))
    return ".".join(p.lower() for p in parts if p)


def _params_of(target: Any, form: str) -> tuple[Param, ...]:
    func = target.__init__ if form == "class" else target
    try:
        # eval_str: modules with ``from __future__ import annotations`` hold
        # annotations as strings; the declared type, not the default's, counts.
        signature = inspect.signature(func, eval_str=True)
    except (NameError, TypeError, SyntaxError):
        signature = inspect.signature(func)
    params = list(signature.parameters.values())
    if form == "class":
        params = params[1:]  # self
    params = params[1:]  # io
    out = []
    for p in params:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        kind = p.annotation if isinstance(p.annotation, type) else None
        if kind is None and p.default is not p.empty and p.default is not None:
            kind = type(p.default)
        out.append(Param(p.name, p.default, kind))
    return tuple(out)


def describe(target: Any, name: str, module: str = "") -> Behaviour:
    if inspect.isclass(target):
        form = "class"
    elif inspect.isgeneratorfunction(target):
        form = "generator"
    elif callable(target):
        form = "function"
    else:
        raise BehaviourError(f"{name!r} is not callable")
    return Behaviour(name, target, form, _params_of(target, form), inspect.getdoc(target) or "", module)


class Registry:
    """The behaviours one house can use, by canonical name."""

    def __init__(self) -> None:
        self._by_key: dict[str, Behaviour] = {}

    def add(self, target: Any, name: str | None = None, module: str = "") -> Behaviour:
        name = name or getattr(target, MARK, None) or target.__name__
        found = describe(target, name, module)
        key = canonical_name(name)
        previous = self._by_key.get(key)
        if previous is not None and previous.target is not target:
            raise BehaviourError(
                f"behaviour name {name!r} is taken by {previous.module or '?'}.{getattr(previous.target, '__name__', '?')}"
            )
        self._by_key[key] = found
        return found

    def add_module(self, module: ModuleType) -> list[Behaviour]:
        """Every marked object defined in ``module``."""
        added = []
        for value in list(vars(module).values()):
            if getattr(value, MARK, None) is not None and getattr(value, "__module__", None) == module.__name__:
                added.append(self.add(value, module=module.__name__))
        return added

    def load(self, spec: str, base: Path | None = None) -> list[Behaviour]:
        """Load a behaviour module: a ``.py`` path (relative to ``base``) or a dotted module name."""
        if spec.endswith(".py") or "/" in spec:
            path = Path(spec)
            candidates = [path]
            if not path.is_absolute() and base is not None:
                candidates = [base / path, Path.cwd() / path]
                for parent in base.resolve().parents:
                    candidates.append(parent / path)
                path = next((c for c in candidates if c.is_file()), base / path)
            if not path.is_file():
                places = list(dict.fromkeys(str(c) for c in candidates))
                shown = ", ".join(places[:4]) + (f" and {len(places) - 4} parent folders more" if len(places) > 4 else "")
                raise BehaviourError(f"behaviour module {spec!r} not found: looked next to the flow, in the current directory "
                                     f"and in the flow's parent folders ({shown})")
            module_name = "flowcast_user_" + re.sub(r"\W", "_", str(path.resolve()))
            module = sys.modules.get(module_name)
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(module_name, path)
                if loader_spec is None or loader_spec.loader is None:
                    raise BehaviourError(f"cannot load {path}")
                module = importlib.util.module_from_spec(loader_spec)
                sys.modules[module_name] = module
                try:
                    loader_spec.loader.exec_module(module)
                except Exception as error:
                    del sys.modules[module_name]
                    raise BehaviourError(f"loading {path} failed: {error!r}") from error
        else:
            try:
                module = importlib.import_module(spec)
            except ImportError as error:
                raise BehaviourError(f"behaviour module {spec!r}: {error}") from error
        return self.add_module(module)

    def load_entry_points(self) -> list[Behaviour]:
        """Modules named in the ``flowcast.behaviours`` entry-point group, and flowcast's own stock.

        flowcast's stock modules are loaded by name as well: an editable
        install's entry points are written when it is installed, so a stock
        behaviour added since (``cast publish``) would otherwise be missing
        until the user reinstalled.
        """
        added = []
        loaded_names = set()
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            loaded = entry.load()
            if isinstance(loaded, ModuleType):
                loaded_names.add(loaded.__name__)
                added.extend(self.add_module(loaded))
            else:
                added.append(self.add(loaded, entry.name))
        for name in STOCK_MODULES:
            if name not in loaded_names:
                added.extend(self.add_module(importlib.import_module(name)))
        return added

    def find(self, name: str) -> Behaviour | None:
        return self._by_key.get(canonical_name(name))

    def names(self) -> list[str]:
        return sorted(self._by_key)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and canonical_name(name) in self._by_key

    def __iter__(self) -> Iterable[Behaviour]:
        return iter(self._by_key.values())


@dataclass
class Io:
    """What a behaviour sees: its bound shares, the store and the clock."""

    store: Any
    inputs: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    named: dict[str, Any] = field(default_factory=dict)
    framer: str = ""
    frame: str = ""
    #: The House running this behaviour (None when a flow is built bare):
    #: how wiring behaviours reach its scheduler and router.
    house: HouseLike | None = None
    #: The house build's behaviours: how a behaviour finds another it is
    #: given by name (``causal subscribe``'s ``valid`` predicate).
    registry: "Registry | None" = None

    @property
    def input(self) -> Any:
        """The first ``from`` share (None without one)."""
        return self.inputs[0] if self.inputs else None

    @property
    def output(self) -> Any:
        """The first ``to`` share (None without one)."""
        return self.outputs[0] if self.outputs else None

    @property
    def now(self) -> float:
        return self.store.stamp

    def __getitem__(self, name: str) -> Any:
        return self.named[name]
