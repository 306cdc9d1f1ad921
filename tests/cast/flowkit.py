"""Flows running in estates of the simulated network, with CAST wired as a layout would.

Each yard's flow is built first; its store becomes the yard's router store
(tests/routing/kit.py), and a stand-in house gives the flow's behaviours
``io.house.router`` and ``io.house.cast``.  Every skedder runs as a
micro-thread of the world's one scheduler, so a test is a trace of a seed.
"""

from __future__ import annotations

from pathlib import Path

from flowcast.cast import Cache, CastConfig, CastService
from flowcast.flow.builder import build_house
from flowcast.flow.floscript import parse_flo
from flowcast.flow.yamlflow import parse_yaml
from flowcast.flow.skedder import Skedder, Stamp
from tests.cast.kit import FROM_ABC, subscribe_rule
from tests.routing.kit import World


class Shim:
    """What a flow's behaviours see as ``io.house`` before the estate is wired."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self.clock = scheduler.clock
        self.router = None
        self.cast = None
        self.causal = None
        self.name = "shim"


def build(world: World, text: str, path: Path):
    """Build the house of flow ``text`` (FloScript, or YAML when it starts ``house:``): (built house, its skedder, its shim)."""
    yaml = text.lstrip().startswith("house:")
    path = path.with_suffix(".yaml") if yaml else path
    path.write_text(text)
    spec = (parse_yaml if yaml else parse_flo)(text, str(path)).houses[0]
    stamp = Stamp()
    shim = Shim(world.scheduler)
    built = build_house(spec, stamp=stamp, out=lambda line: None, house=shim)
    return built, Skedder(built.taskables, 0.05, stamp), shim


class FlowWorld:
    """abc (manor with the cache, w1) and xyz (manor, bob, carol), each yard given a flow running it.

    ``cast``: more CastConfig settings, as a layout's ``cast:`` section gives them.
    """

    def __init__(self, tmp_path: Path, flows: dict[tuple[str, str], str], *, seed: int = 1, grants=None, max_bytes: int = 1 << 30,
                 cast: dict | None = None, **conditions) -> None:
        self.world = World(seed=seed, **conditions)
        self.tmp = tmp_path
        yards = {"abc": ["manor", "w1"], "xyz": ["manor", "bob", "carol"]}
        self.built, self.shims, self.skedders = {}, {}, {}
        for (estate, yard), text in flows.items():
            built, skedder, shim = build(self.world, text, tmp_path / f"{estate}-{yard}.flo")
            self.built[(estate, yard)], self.skedders[(estate, yard)], self.shims[(estate, yard)] = built, skedder, shim
        stores = lambda estate: {yard: b.store for (e, yard), b in self.built.items() if e == estate}  # noqa: E731
        self.abc = self.world.routed_estate("abc", yards["abc"], policy=[subscribe_rule("xyz")], stores=stores("abc"))
        self.xyz = self.world.routed_estate("xyz", yards["xyz"], policy=[FROM_ABC], stores=stores("xyz"))
        self.world.connect(self.abc, self.xyz)
        path = tmp_path / "abc" / "cast" / "cache.sqlite3"
        path.parent.mkdir(parents=True)
        self.cache = Cache.open(path, estate="abc", clock=self.world.scheduler.clock, scheduler=self.world.scheduler, max_bytes=max_bytes)
        config = CastConfig(subscribers=grants if grants is not None else {"xyz": ("abc/**",)}, **(cast or {}))
        self.services = {("abc", "manor"): CastService(self.abc["manor"], cache=self.cache, config=config),
                         ("abc", "w1"): CastService(self.abc["w1"], config=config, inbox=tmp_path / "abc" / "inbox-w1.sqlite3")}
        for yard in yards["xyz"]:
            self.services[("xyz", yard)] = CastService(self.xyz[yard], config=config, inbox=tmp_path / "xyz" / f"inbox-{yard}.sqlite3")
        for key, shim in self.shims.items():
            shim.router = (self.abc if key[0] == "abc" else self.xyz)[key[1]]
            shim.cast = self.services[key]
        for key, skedder in self.skedders.items():
            self.world.scheduler.spawn(skedder.run(self.world.scheduler), name=f"skedder:{key}")

    def store(self, estate: str, yard: str):
        return self.built[(estate, yard)].store

    def run_until(self, predicate, limit: float = 60.0) -> bool:
        return self.world.run_until(predicate, limit)
