"""The layer rules of docs/architecture.md, checked on every import in flowcast/.

A lower layer never imports a higher one, and no module reads another
package's ``_private`` name.  Imports inside functions count: a deferred
import is still a dependency, only a later one.  ``ALLOWED`` lists the
breaches that existed when the rule was written, each with its reason, so
the test passes today and fails on any new one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import flowcast

ROOT = Path(flowcast.__file__).resolve().parent

# Bottom up.  The root package and errors.py share the bottom: every layer
# may raise flowcast.Error, and importing any flowcast module runs the root.
LAYERS = [
    "errors",
    "runtime",
    "store",
    "behaving",
    "flow",
    "transport",
    "routing",
    "cast",
    "causal",
    "house",
    "export",
    "cli",
]
RANK = {name: rank for rank, name in enumerate(LAYERS)}

# (importer, imported, name): the breaches present when the rule was
# written.  Empty: main had none.  Add one only with its reason, and prefer
# moving the code.
ALLOWED: dict[tuple[str, str, str], str] = {}


def module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    return ".".join(parts), package


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "flowcast":
        return None
    if len(parts) == 1:
        return "errors"  # the root package: bottom layer
    return parts[1]


def package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def resolve(me: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = package_of(me, is_package).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_files() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def is_module(dotted: str) -> bool:
    path = ROOT.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def owning_package(dotted: str) -> str:
    """The package whose private names `dotted`'s private names are."""
    is_package = (ROOT.parent.joinpath(*dotted.split(".")) / "__init__.py").is_file()
    return package_of(dotted, is_package)


def breaches(path: Path) -> list[tuple[str, str, str, int, str]]:
    """(importer, imported, name, line, what) for each breach in one file."""
    me, is_package = module_name(path)
    mine = layer_of(me)
    my_package = package_of(me, is_package)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[str, str, str, int, str]] = []
    aliases: dict[str, str] = {}  # local name -> flowcast module it is bound to

    def edge(target: str, name: str, line: int) -> None:
        theirs = layer_of(target)
        if theirs is None:
            return
        if theirs not in RANK:
            found.append((me, target, name, line, f"unknown layer {theirs!r}: add it to LAYERS and docs/architecture.md"))
        elif mine != theirs and RANK[theirs] > RANK[mine]:
            found.append((me, target, name, line, f"{mine} imports higher layer {theirs}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                edge(alias.name, "", node.lineno)
                if alias.asname and layer_of(alias.name):
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            target = resolve(me, is_package, node)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if layer_of(target) and is_module(full):
                    edge(full, "", node.lineno)  # `from flowcast.x import module`
                    aliases[alias.asname or alias.name] = full
                else:
                    edge(target, alias.name, node.lineno)
                if layer_of(target) and private(alias.name) and owning_package(target) != my_package:
                    found.append((me, target, alias.name, node.lineno, "reads another package's private name"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and private(node.attr):
            target = aliases.get(node.value.id)
            if target and owning_package(target) != my_package:
                found.append((me, target, node.attr, node.lineno, "reads another package's private name"))
    return found


def test_every_layer_is_a_package_here() -> None:
    """The rank table and the tree agree, so no package escapes the rule."""
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS) - {"errors"}
    assert (ROOT / "errors.py").is_file()


def test_no_forbidden_import() -> None:
    new = []
    seen = set()
    for path in module_files():
        for importer, imported, name, line, what in breaches(path):
            key = (importer, imported, name)
            seen.add(key)
            if key not in ALLOWED:
                new.append(f"{path.relative_to(ROOT.parent)}:{line}: {importer} -> {imported} {name}: {what}")
    assert not new, "layer rule broken (docs/architecture.md):\n" + "\n".join(new)
    stale = set(ALLOWED) - seen
    assert not stale, f"ALLOWED lists breaches that are gone; remove them: {sorted(stale)}"


def check_source(tmp_path: Path, relative: str, source: str) -> list[tuple[str, str, str, int, str]]:
    """Run the checker on one made-up module placed as if under flowcast/."""
    global ROOT
    fake = tmp_path / "flowcast"
    for layer in LAYERS[1:]:
        (fake / layer).mkdir(parents=True, exist_ok=True)
        (fake / layer / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "errors.py").write_text("")
    (fake / "transport" / "road.py").write_text("")
    (fake / "routing" / "router.py").write_text("")
    (fake / "transport" / "ports").mkdir(exist_ok=True)
    (fake / "transport" / "ports" / "__init__.py").write_text("")
    (fake / "transport" / "ports" / "sim.py").write_text("")
    target = fake / relative
    target.write_text(source)
    saved, ROOT = ROOT, fake
    try:
        return breaches(target)
    finally:
        ROOT = saved


def test_checker_catches_an_upward_import(tmp_path: Path) -> None:
    found = check_source(tmp_path, "store/x.py", "def f():\n    from flowcast.routing.router import Router\n")
    assert [(f[1], f[4]) for f in found] == [("flowcast.routing.router", "store imports higher layer routing")]
    found = check_source(tmp_path, "runtime/x.py", "import flowcast.transport.road\n")
    assert len(found) == 1
    found = check_source(tmp_path, "transport/x.py", "from ..routing import router\n")
    assert [f[1] for f in found] == ["flowcast.routing.router"]
    # Downward and sideways-within-a-layer are fine.
    assert check_source(tmp_path, "routing/x.py", "from flowcast.transport.road import RoadStack\nfrom . import y\n") == []


def test_checker_catches_a_private_read(tmp_path: Path) -> None:
    found = check_source(tmp_path, "routing/x.py", "from flowcast.transport.road import _FAILED\n")
    assert [(f[2], f[4]) for f in found] == [("_FAILED", "reads another package's private name")]
    found = check_source(tmp_path, "routing/x.py", "from flowcast.transport import road\nroad._state\n")
    assert [f[2] for f in found] == ["_state"]
    found = check_source(tmp_path, "transport/x.py", "from flowcast.transport.ports import sim\nsim._x\n")
    assert [f[2] for f in found] == ["_x"]
    # Within one package a module may share its private names.
    assert check_source(tmp_path, "transport/x.py", "from flowcast.transport.road import _FAILED\nfrom . import road\nroad._y\n") == []
