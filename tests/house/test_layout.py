"""Estate layouts: the schema loads into the model, and every mistake is reported, located."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from flowcast.flow.errors import FlowError, FlowErrors
from flowcast.house.layout import (
    EstateLayout,
    HouseEntry,
    HousePlan,
    LayoutError,
    RemoteSpec,
    RoadSpec,
    RuleSpec,
    load_layout,
    plan_houses,
)
from flowcast.routing import policy as policy_mod

FULL = """\
estate: alpha
role: telemetry
keep: keeps/alpha
run: run/alpha
roads:
  main:
    host: 127.0.0.1
    port: 7530
    acceptance: always
    remotes:
      - {estate: beta, host: 127.0.0.1, port: 7531}
policy:
  - allow: write
    estate: beta
    role: "*"
    share: "ping.*"
    tag: "*"
    channel: main
houses:
  - name: manor
    flow: ../flows/ping.flo
    house: ping
    manor: true
  - name: worker
    flow: ../flows/worker.flo
    count: auto
"""

MINIMAL = """\
estate: alpha
houses:
  - name: manor
    flow: ../flows/ping.flo
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/flows/{ping,worker,other}.flo and an empty tmp/houses/."""
    (tmp_path / "flows").mkdir()
    for name in ("ping", "worker", "other"):
        (tmp_path / "flows" / f"{name}.flo").write_text(f"house {name}\n")
    (tmp_path / "flows" / "y.yaml").write_text("house: {name: y}\n")
    (tmp_path / "houses").mkdir()
    return tmp_path


def write(tree: Path, text: str, name: str = "alpha.yaml") -> Path:
    path = tree / "houses" / name
    path.write_text(text, encoding="utf-8")
    return path


def errors_of(tree: Path, text: str) -> LayoutError:
    with pytest.raises(LayoutError) as info:
        load_layout(write(tree, text))
    return info.value


def located(err: LayoutError) -> list[tuple[int, int, str]]:
    return [(e.where.line, e.where.col, e.message) for e in err.errors if e.where is not None]


def one_error(tree: Path, text: str) -> FlowError:
    err = errors_of(tree, text)
    assert len(err.errors) == 1, str(err)
    return err.errors[0]


# -- the good path ------------------------------------------------------------


def test_full_layout_loads(tree: Path) -> None:
    layout = load_layout(write(tree, FULL))
    assert isinstance(layout, EstateLayout)
    assert layout.path == (tree / "houses" / "alpha.yaml").resolve()
    assert layout.estate == "alpha" and layout.role == "telemetry"
    assert layout.keep == (tree / "houses" / "keeps" / "alpha").resolve()
    assert layout.run == (tree / "houses" / "run" / "alpha").resolve()
    assert list(layout.roads) == ["main"]
    road = layout.roads["main"]
    assert road == RoadSpec("main", "127.0.0.1", 7530, "always", (RemoteSpec("beta", "127.0.0.1", 7531),))
    assert road.where is not None and (road.where.line, road.where.col) == (6, 3)
    assert road.remotes[0].where is not None and road.remotes[0].where.line == 11
    assert layout.policy == (RuleSpec("allow", "write", "beta", "*", "ping.*", "*", "main"),)
    manor, worker = layout.houses
    assert manor == HouseEntry("manor", (tree / "flows" / "ping.flo").resolve(), "ping", True, 1)
    assert worker == HouseEntry("worker", (tree / "flows" / "worker.flo").resolve(), None, False, "auto")
    assert manor.flow.is_absolute() and worker.where is not None and worker.where.line == 24
    assert layout.manor is manor


def test_defaults(tree: Path) -> None:
    layout = load_layout(str(write(tree, MINIMAL)))  # a str path works too
    assert layout.role == "estate"
    assert layout.keep == (tree / "houses" / "keeps" / "alpha").resolve()
    assert layout.run == (tree / "houses" / "run" / "alpha").resolve()
    assert layout.roads == {} and layout.policy == ()
    (entry,) = layout.houses
    assert entry.manor and entry.count == 1 and entry.house is None
    assert layout.manor is entry


def test_road_and_rule_defaults(tree: Path) -> None:
    layout = load_layout(write(tree, MINIMAL + "roads:\n  main: {port: 0}\npolicy:\n  - deny: any\n"))
    assert layout.roads["main"] == RoadSpec("main", "127.0.0.1", 0, "once", ())
    assert layout.policy == (RuleSpec("deny", "any", "*", "*", "*", "*", "*"),)


def test_empty_roads_and_policy_are_allowed(tree: Path) -> None:
    layout = load_layout(write(tree, MINIMAL + "roads:\npolicy: []\n"))
    assert layout.roads == {} and layout.policy == ()
    layout = load_layout(write(tree, MINIMAL + "roads: {}\npolicy:\n"))
    assert layout.roads == {} and layout.policy == ()


def test_absolute_paths_and_yaml_flows(tree: Path) -> None:
    keep = tree / "elsewhere" / "keep"
    text = (f"estate: alpha\nkeep: {keep}\nrun: /tmp/../tmp/flowcast-run\nhouses:\n"
            f"  - {{name: m, flow: {tree / 'flows' / 'y.yaml'}}}\n")
    layout = load_layout(write(tree, text))
    assert layout.keep == keep.resolve()
    assert layout.run == Path("/tmp/flowcast-run").resolve()
    assert layout.houses[0].flow == (tree / "flows" / "y.yaml").resolve()


def test_numeric_looking_names_are_names(tree: Path) -> None:
    layout = load_layout(write(tree, "estate: 2024\nrole: 1.5\nroads:\n  7530: {port: 7530}\n"
                                     "houses:\n  - {name: 01, flow: ../flows/ping.flo}\n"))
    assert layout.estate == "2024" and layout.role == "1.5"
    assert list(layout.roads) == ["7530"] and layout.houses[0].name == "01"


def test_manor_can_be_any_entry(tree: Path) -> None:
    text = ("estate: alpha\nhouses:\n  - {name: a, flow: ../flows/worker.flo, count: 2}\n"
            "  - {name: m, flow: ../flows/ping.flo, manor: true}\n")
    layout = load_layout(write(tree, text))
    assert layout.manor.name == "m"
    assert [e.manor for e in layout.houses] == [False, True]


def test_model_is_frozen(tree: Path) -> None:
    layout = load_layout(write(tree, FULL))
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.estate = "beta"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.houses[0].count = 3  # type: ignore[misc]
    assert hash(layout) == hash(load_layout(write(tree, FULL)))


# -- errors: the file as a whole ----------------------------------------------


def test_error_is_a_flow_error_with_file_line_col(tree: Path) -> None:
    err = errors_of(tree, MINIMAL.replace("estate: alpha", "estat: alpha"))
    assert isinstance(err, FlowErrors) and isinstance(err, FlowError)
    text = str(err)
    path = str(tree / "houses" / "alpha.yaml")
    assert f"{path}:1:1: error: unknown key 'estat' in the layout" in text
    assert "did you mean 'estate'?" in text
    assert f"{path}:1:1: error: the layout has no 'estate'" in text
    assert "\n    estat: alpha\n    ^" in text
    assert err.path == tree / "houses" / "alpha.yaml"


@pytest.mark.parametrize("text", ["", "\n\n# only a comment\n", "---\n", "~\n"])
def test_empty_file(tree: Path, text: str) -> None:
    e = one_error(tree, text)
    assert "layout file is empty" in e.message and e.where is not None


@pytest.mark.parametrize("text, kind", [("- a\n- b\n", "list"), ("just text\n", "value"), ("42\n", "value")])
def test_top_level_must_be_a_mapping(tree: Path, text: str, kind: str) -> None:
    e = one_error(tree, text)
    assert e.message == f"the layout must be a mapping, not a {kind}"
    assert (e.where.line, e.where.col) == (1, 1)


@pytest.mark.parametrize("text, line", [
    ("estate: alpha\nhouses: [\n", 3),
    ("estate: alpha\n  houses: x\n", 2),
    ("estate: 'alpha\n", 2),
    ("a: 1\n---\nb: 2\n", 2),
    ("estate: *nowhere\n", 1),
    ("estate: alpha\n\thouses: []\n", 2),
])
def test_yaml_syntax_errors(tree: Path, text: str, line: int) -> None:
    e = one_error(tree, text)
    assert e.message.startswith("YAML syntax:")
    assert e.where is not None and e.where.line == line


def test_unreadable_files(tree: Path) -> None:
    with pytest.raises(LayoutError, match="cannot read layout"):
        load_layout(tree / "houses" / "missing.yaml")
    with pytest.raises(LayoutError, match="cannot read layout"):
        load_layout(tree / "houses")  # a directory
    with pytest.raises(LayoutError, match="cannot read layout"):
        load_layout(str(tree / "a\0b"))
    bad = tree / "houses" / "latin1.yaml"
    bad.write_bytes(b"estate: alpha\nrole: caf\xe9\n")
    with pytest.raises(LayoutError, match="not a UTF-8 text file") as raised:
        load_layout(bad)
    where = raised.value.errors[0].where  # located by line and column, not by byte offset only
    assert (where.line, where.col) == (2, 10), where
    huge = tree / "houses" / "huge.yaml"
    huge.write_bytes(b"#" * (2 << 20))
    with pytest.raises(LayoutError, match="larger than"):
        load_layout(huge)


def test_deep_nesting_is_an_error_not_a_crash(tree: Path) -> None:
    err = errors_of(tree, "estate: alpha\nhouses: " + "[" * 5000 + "]" * 5000 + "\n")
    assert err.errors  # whatever the YAML library says, it is an error and not a traceback


def test_every_problem_is_listed_in_file_order(tree: Path) -> None:
    text = """\
estate: "al pha"
rol: x
roads:
  main:
    port: 70000
    acceptence: sometimes
  "a/b": {port: 7530}
  other: {port: 7531, host: "bad host"}
  main: {port: 1}
policy:
  - allow: write
    deny: read
  - allow: all
    estate: "\\x01"
houses:
  - name: manor
    flow: ../flows/nope.flo
    manor: true
  - name: ../etc
    flow: ../flows/worker.flo
    manor: true
    count: 0
  - name: manor
    flow: ../flows/worker.txt
"""
    err = errors_of(tree, text)
    got = [(line, col) for line, col, _ in located(err)]
    assert got == sorted(got)
    messages = "\n".join(m for _, _, m in located(err))
    expect = [
        (1, 9, "estate name is 'al pha'"),
        (2, 1, "unknown key 'rol' in the layout"),
        (5, 11, "port of road 'main' is '70000', outside 0..65535"),
        (6, 5, "unknown key 'acceptence' in road 'main'"),
        (7, 3, "channel name is 'a/b'"),
        (8, 29, "host of road 'other' is 'bad host'"),
        (9, 3, "key 'main' given twice in roads (first at line 4)"),
        (12, 5, "policy rule 1 has both 'allow' and 'deny'"),
        (13, 12, "'allow' of policy rule 2 is 'all'; expected one of write, read, any"),
        (14, 13, "estate of policy rule 2 is '\\x01'"),
        (17, 11, "flow of house 'manor' not found: '../flows/nope.flo'"),
        (19, 11, "name of house entry 2 is '../etc'"),
        (21, 12, "house entry 2 is a second manor; 'manor' already is (line 18)"),
        (22, 12, "count of house entry 2 is '0', outside 1..1024"),
        (23, 11, "house name 'manor' used twice (first at line 16)"),
        (24, 11, "flow of house 'manor' is not a flow file: '../flows/worker.txt'"),
    ]
    for line, col, fragment in expect:
        assert any(l == line and c == col and fragment in m for l, c, m in located(err)), \
            f"{line}:{col} {fragment!r} not in\n{messages}"
    assert len(err.errors) == len(expect), messages
    assert "Traceback" not in str(err)


# -- errors: keys, types, names -------------------------------------------------


@pytest.mark.parametrize("text, where, fragment, hint", [
    (MINIMAL + "rols: x\n", (5, 1), "unknown key 'rols' in the layout", "did you mean 'role'?"),
    (MINIMAL + "roads: {main: {prot: 1, port: 2}}\n", (5, 16), "unknown key 'prot' in road 'main'", "did you mean 'port'?"),
    (MINIMAL + "policy: [{allow: read, shares: x}]\n", (5, 24), "unknown key 'shares' in policy rule 1", "did you mean 'share'?"),
    (MINIMAL + "zzz: 1\n", (5, 1), "unknown key 'zzz' in the layout", "keys of the layout: estate, role"),
    (MINIMAL + "    cont: 2\n", (5, 5), "unknown key 'cont' in house 'manor'", "did you mean 'count'?"),
])
def test_unknown_keys(tree: Path, text: str, where: tuple[int, int], fragment: str, hint: str) -> None:
    e = one_error(tree, text)
    assert (e.where.line, e.where.col) == where
    assert fragment in e.message and hint in e.hint


def test_duplicate_keys_in_every_mapping(tree: Path) -> None:
    text = ("estate: alpha\nestate: beta\nroads:\n  main: {port: 1, port: 2}\n"
            "policy: [{allow: read, estate: a, estate: b}]\n"
            "houses:\n  - {name: m, flow: ../flows/ping.flo, name: n}\n")
    err = errors_of(tree, text)
    assert [(l, m.split(" (")[0]) for l, _, m in located(err)] == [
        (2, "key 'estate' given twice in the layout"),
        (4, "key 'port' given twice in road 'main'"),
        (5, "key 'estate' given twice in policy rule 1"),
        (7, "key 'name' given twice in house 'm'"),
    ]


def test_missing_required_keys(tree: Path) -> None:
    err = errors_of(tree, "role: x\nroads: {main: {host: 1.2.3.4}}\npolicy: [{estate: x}]\n"
                          "houses:\n  - {flow: ../flows/ping.flo}\n  - name: x\n")
    assert [(l, m) for l, _, m in located(err)] == [
        (1, "the layout has no 'estate'"),
        (2, "road 'main' has no 'port'"),
        (3, "policy rule 1 needs 'allow' or 'deny'"),
        (5, "house entry 1 has no 'name'"),
        (6, "house 'x' has no 'flow'"),
    ]


@pytest.mark.parametrize("text, fragment", [
    ("estate: [a]\nhouses: [{name: m, flow: ../flows/ping.flo}]\n", "estate name must be text, not a list"),
    ("estate: {a: 1}\nhouses: [{name: m, flow: ../flows/ping.flo}]\n", "estate name must be text, not a mapping"),
    ("estate:\nhouses: [{name: m, flow: ../flows/ping.flo}]\n", "estate name has no value"),
    ("estate: yes\nhouses: [{name: m, flow: ../flows/ping.flo}]\n", "estate name 'yes' reads as a YAML boolean"),
    ("estate: !!binary aGVsbG8=\nhouses: [{name: m, flow: ../flows/ping.flo}]\n", "estate name must be text"),
    ("estate: !custom x\nhouses: [{name: m, flow: ../flows/ping.flo}]\n", "estate name must be text"),
    (MINIMAL + "roads: [main]\n", "roads must be a mapping, not a list"),
    (MINIMAL + "roads: {main: 7530}\n", "road 'main' must be a mapping, not a value"),
    (MINIMAL + "roads: {main: {port: '7530'}}\n", "port of road 'main' must be a whole number, not '7530'"),
    (MINIMAL + "roads: {main: {port: 7530.0}}\n", "port of road 'main' must be a whole number, not '7530.0'"),
    (MINIMAL + "roads: {main: {port: true}}\n", "port of road 'main' must be a whole number, not 'true'"),
    (MINIMAL + "roads: {main: {port: [1]}}\n", "port of road 'main' must be a whole number, not a list"),
    (MINIMAL + "roads: {main: {port: 1, remotes: {estate: b}}}\n", "remotes of road 'main' must be a list, not a mapping"),
    (MINIMAL + "roads: {main: {port: 1, remotes: [beta]}}\n", "a remote of road 'main' must be a mapping, not a value"),
    (MINIMAL + "policy: {allow: read}\n", "policy must be a list, not a mapping"),
    (MINIMAL + "policy: [allow]\n", "policy rule 1 must be a mapping, not a value"),
    (MINIMAL + "policy: [{allow: [read]}]\n", "'allow' of policy rule 1 must be text, not a list"),
    (MINIMAL + "policy: [{deny: everything}]\n", "'deny' of policy rule 1 is 'everything'; expected one of write, read, any"),
    (MINIMAL + "policy: [{allow: read, share: [a, b]}]\n", "share of policy rule 1 must be text, not a list"),
    ("estate: a\nhouses: {name: m}\n", "houses must be a list, not a mapping"),
    ("estate: a\nhouses: [m]\n", "house entry 1 must be a mapping, not a value"),
    ("estate: a\nhouses: [{name: m, flow: ../flows/ping.flo, manor: yes please}]\n", "manor of house 'm' must be true or false, not 'yes please'"),
    ("estate: a\nhouses: [{name: m, flow: ../flows/ping.flo, manor: 1}]\n", "manor of house 'm' must be true or false, not '1'"),
    ("estate: a\nhouses: [{name: m, flow: [../flows/ping.flo]}]\n", "flow of house 'm' must be text, not a list"),
    ("estate: a\nhouses: [{name: m, flow: ../flows/ping.flo}, {name: w, flow: ../flows/worker.flo, count: many}]\n",
     "count of house 'w' must be a whole number or 'auto', not 'many'"),
    ("estate: a\nhouses: [{name: m, flow: ../flows/ping.flo}, {name: w, flow: ../flows/worker.flo, count: 2.5}]\n",
     "count of house 'w' must be a whole number, not '2.5'"),
    ("estate: a\nhouses: [{name: m, flow: ../flows/ping.flo}, {name: w, flow: ../flows/worker.flo, count: 100000}]\n",
     "count of house 'w' is '100000', outside 1..1024"),
    ("estate: a\nhouses: [{name: m, flow: ../flows/ping.flo, house: 2x}]\n", "house of house 'm' is '2x'; a flow house name"),
    ("estate: a\nhouses: [{name: m, flow: ../flows/ping.flo, house: a.b}]\n", "house of house 'm' is 'a.b'"),
    ("estate: a\nacceptance: x\nhouses: [{name: m, flow: ../flows/ping.flo}]\n", "unknown key 'acceptance' in the layout"),
    (MINIMAL + "roads: {main: {port: 1, acceptance: allways}}\n", "acceptance of road 'main' is 'allways'; expected one of never, once, always"),
    (MINIMAL + "keep: [a]\n", "keep must be text, not a list"),
    (MINIMAL + "run: ''\n", "run is ''; a path has 1-4096 characters"),
    (MINIMAL + "<<: {role: x}\n", "YAML merge keys ('<<') are not supported in the layout"),
    (MINIMAL + "? [a, b]\n: 1\n", "a key of the layout must be a name, not a list"),
])
def test_wrong_types_and_values(tree: Path, text: str, fragment: str) -> None:
    e = one_error(tree, text)
    assert fragment in e.message, e.message
    assert e.where is not None and e.where.file.endswith("alpha.yaml")


def test_boolean_hint_says_quote_it(tree: Path) -> None:
    e = one_error(tree, "estate: on\nhouses: [{name: m, flow: ../flows/ping.flo}]\n")
    assert e.hint == 'write it in quotes: "on"'
    assert load_layout(write(tree, "estate: 'on'\nhouses: [{name: m, flow: ../flows/ping.flo}]\n")).estate == "on"


HOSTILE = [
    "a/b", "../x", "..", "a..b", "a b", " a", "a\tb", "a\x01b", "a\x7fb", "é", "a\\b", "-a", ".a", "",
    "x" * 10_000,
]


@pytest.mark.parametrize("name", HOSTILE, ids=lambda n: repr(n[:12]))
def test_hostile_estate_and_role_names(tree: Path, name: str) -> None:
    quoted = '"' + name.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
    for key in ("estate", "role"):
        text = f"estate: alpha\n{key}: {quoted}\nhouses: [{{name: m, flow: ../flows/ping.flo}}]\n"
        if key == "estate":
            text = text.replace("estate: alpha\n", "")
        e = one_error(tree, text)
        assert e.message.startswith("estate name is" if key == "estate" else "role is")
        assert len(str(e)) < 1000  # a 10 kB name is cut, not echoed
        assert "\x01" not in str(e) and "\x7f" not in str(e)


@pytest.mark.parametrize("name", HOSTILE + ["a.b", "x" * 33], ids=lambda n: repr(n[:12]))
def test_hostile_channel_and_yard_names(tree: Path, name: str) -> None:
    quoted = '"' + name.encode("unicode_escape").decode("ascii") + '"'
    # explicit key: YAML allows implicit keys of at most 1024 characters
    e = one_error(tree, f"estate: a\nroads:\n  ? {quoted}\n  : {{port: 1}}\nhouses: [{{name: m, flow: ../flows/ping.flo}}]\n")
    assert e.message.startswith("channel name is") and (e.where.line, e.where.col) == (3, 5)
    assert len(str(e)) < 1000
    e = one_error(tree, f"estate: a\nhouses: [{{name: {quoted}, flow: ../flows/ping.flo}}]\n")
    assert e.message.startswith("name of house entry 1 is") and e.where.line == 2
    assert len(str(e)) < 1000


def test_longest_names_pass(tree: Path) -> None:
    estate, yard = "e" * 64, "y" * 32
    layout = load_layout(write(tree, f"estate: {estate}\nroads: {{{yard}: {{port: 1}}}}\n"
                                     f"houses: [{{name: {yard}, flow: ../flows/ping.flo}}]\n"))
    assert layout.estate == estate and yard in layout.roads
    e = one_error(tree, f"estate: {'e' * 65}\nhouses: [{{name: m, flow: ../flows/ping.flo}}]\n")
    assert "65 characters long" in e.message


def test_hostile_globs(tree: Path) -> None:
    err = errors_of(tree, MINIMAL + f"policy:\n  - {{allow: read, share: \"a\\nb\"}}\n"
                                    f"  - {{allow: read, tag: \"{'t' * 10_000}\"}}\n")
    assert [m.split(" is ")[0] for _, _, m in located(err)] == ["share of policy rule 1", "tag of policy rule 2"]
    assert len(str(err)) < 2000
    layout = load_layout(write(tree, MINIMAL + "policy:\n  - {allow: read, share: 'ping.[a-z]?*', tag: 'x y'}\n"))
    assert layout.policy[0].share == "ping.[a-z]?*" and layout.policy[0].tag == "x y"
    e = one_error(tree, MINIMAL + "policy:\n  - {allow: read, tag: ''}\n")
    assert e.message.startswith("tag of policy rule 1 is ''")


def test_rules_compile_into_a_routing_policy(tree: Path) -> None:
    """A layout's rules are exactly what flowcast.routing.policy.Rule takes."""
    layout = load_layout(write(tree, FULL))
    rules = [policy_mod.Rule(**{f.name: getattr(r, f.name) for f in dataclasses.fields(policy_mod.Rule)})
             for r in layout.policy]
    policy = policy_mod.Policy(rules)
    assert policy.allows("write", "beta", "x", "ping.count", "t", "main")
    assert not policy.allows("write", "gamma", "x", "ping.count", "t", "main")


def test_long_line_is_not_quoted_whole(tree: Path) -> None:
    e = one_error(tree, "estate: alpha\nrole: " + "x" * 10_000 + "\nhouses: [{name: m, flow: ../flows/ping.flo}]\n")
    assert e.where.line == 2 and len(str(e)) < 1000


# -- errors: roads ---------------------------------------------------------------


@pytest.mark.parametrize("port, ok", [(0, True), (1, True), (65535, True), (65536, False), (-1, False),
                                      (10**30, False), ("0x1d6a", True)])
def test_road_port_range(tree: Path, port: object, ok: bool) -> None:
    text = MINIMAL + f"roads: {{main: {{port: {port}}}}}\n"
    if ok:
        assert load_layout(write(tree, text)).roads["main"].port == int(str(port), 0)
    else:
        assert "outside 0..65535" in one_error(tree, text).message


def test_duplicate_ports(tree: Path) -> None:
    text = MINIMAL + ("roads:\n  a: {port: 7530}\n  b: {port: 7531}\n  c: {port: 7530, host: 10.0.0.1}\n"
                      "  d: {port: 0}\n  e: {port: 0}\n")
    e = one_error(tree, text)
    assert e.message == "port 7530 of road 'c' is already the port of road 'a' (line 6)"
    assert (e.where.line, e.where.col) == (8, 13)


def test_duplicate_channels(tree: Path) -> None:
    e = one_error(tree, MINIMAL + "roads:\n  main: {port: 1}\n  main: {port: 2}\n")
    assert e.message == "key 'main' given twice in roads (first at line 6)"
    assert (e.where.line, e.where.col) == (7, 3)


@pytest.mark.parametrize("host, ok", [
    ("0.0.0.0", True), ("::", True), ("::1", True), ("localhost", True), ("estate-1.example.org", True),
    ("example.org.", True), ("fe80::1%eth0", True),
    ("bad host", False), ("a/b", False), ("-x.org", False), ("a..b", False), ("x" * 300, False),
    ("1.2.3.4:80", False), ("", False),
])
def test_road_hosts(tree: Path, host: str, ok: bool) -> None:
    text = MINIMAL + f"roads: {{main: {{port: 1, host: '{host}'}}}}\n"
    if ok:
        assert load_layout(write(tree, text)).roads["main"].host == host
    else:
        assert one_error(tree, text).message.startswith("host of road 'main' is")


def test_remotes(tree: Path) -> None:
    text = MINIMAL + """\
roads:
  main:
    port: 7530
    remotes:
      - {estate: beta, port: 7531}
      - {estate: gamma, host: gamma.example.org, port: 7532}
"""
    remotes = load_layout(write(tree, text)).roads["main"].remotes
    assert remotes == (RemoteSpec("beta", "127.0.0.1", 7531), RemoteSpec("gamma", "gamma.example.org", 7532))


def test_remote_errors(tree: Path) -> None:
    text = MINIMAL + """\
roads:
  main:
    port: 7530
    remotes:
      - {estate: beta, port: 7531}
      - {estate: beta, port: 7532}
      - {estate: alpha, port: 7533}
      - {estate: gamma, port: 0}
      - {estate: "../x", host: 0.0.0.0, port: 1}
      - {estate: delta}
      - {estate: epsilon, port: 1, road: main}
"""
    err = errors_of(tree, text)
    assert [(l, m.split(";")[0]) for l, _, m in located(err)] == [
        (10, "remote estate 'beta' listed twice in road 'main' (first at line 9)"),
        (11, "road 'main' lists its own estate 'alpha' as a remote"),
        (12, "port of a remote of road 'main' is '0', outside 1..65535"),
        (13, "estate of a remote of road 'main' is '../x'"),
        (13, "host of a remote of road 'main' is '0.0.0.0'"),
        (14, "a remote of road 'main' has no 'port'"),
        (15, "unknown key 'road' in a remote of road 'main'"),
    ]


# -- errors: houses ----------------------------------------------------------------


@pytest.mark.parametrize("houses", ["", "[]", "~"])
def test_no_houses(tree: Path, houses: str) -> None:
    e = one_error(tree, f"estate: alpha\nhouses: {houses}\n")
    assert e.message == "no houses: list at least one, the manor" and e.where.line == 2


def test_two_manors(tree: Path) -> None:
    text = ("estate: alpha\nhouses:\n  - {name: a, flow: ../flows/ping.flo, manor: true}\n"
            "  - {name: b, flow: ../flows/ping.flo}\n  - {name: c, flow: ../flows/ping.flo, manor: true}\n")
    e = one_error(tree, text)
    assert e.message == "house 'c' is a second manor; 'a' already is (line 3)"
    assert (e.where.line, e.where.col) == (5, 47)


def test_first_cannot_refuse_to_be_the_default_manor(tree: Path) -> None:
    e = one_error(tree, "estate: alpha\nhouses:\n  - {name: a, flow: ../flows/ping.flo, manor: false}\n"
                        "  - {name: b, flow: ../flows/ping.flo}\n")
    assert e.message.startswith("no manor") and e.where.line == 3
    layout = load_layout(write(tree, "estate: alpha\nhouses:\n  - {name: a, flow: ../flows/ping.flo, manor: false}\n"
                                     "  - {name: b, flow: ../flows/ping.flo, manor: true}\n"))
    assert layout.manor.name == "b"


@pytest.mark.parametrize("count", ["2", "auto"])
def test_manor_is_one_house(tree: Path, count: str) -> None:
    e = one_error(tree, f"estate: alpha\nhouses:\n  - {{name: m, flow: ../flows/ping.flo, count: {count}}}\n")
    assert "the manor is exactly one house" in e.message and e.where.line == 3
    assert load_layout(write(tree, "estate: alpha\nhouses:\n  - {name: m, flow: ../flows/ping.flo, count: 1}\n"))


def test_duplicate_house_names(tree: Path) -> None:
    e = one_error(tree, "estate: a\nhouses:\n  - {name: w, flow: ../flows/ping.flo}\n"
                        "  - {name: w, flow: ../flows/worker.flo}\n")
    assert e.message == "house name 'w' used twice (first at line 3)" and (e.where.line, e.where.col) == (4, 12)


def test_flow_files(tree: Path) -> None:
    (tree / "flows" / "dir.flo").mkdir()
    text = ("estate: a\nhouses:\n"
            "  - {name: a, flow: ../flows/ping.flo}\n"
            "  - {name: b, flow: ../flows/missing.flo}\n"
            "  - {name: c, flow: ../flows/dir.flo}\n"
            "  - {name: d, flow: ../flows/ping}\n"
            "  - {name: e, flow: \"../flows/\\0.flo\"}\n"
            f"  - {{name: f, flow: \"{'x' * 10_000}.flo\"}}\n"
            f"  - {{name: g, flow: \"{'x/' * 3000}.flo\"}}\n")
    err = errors_of(tree, text)
    assert [(l, m.split(":")[0].split(";")[0]) for l, _, m in located(err)] == [
        (4, "flow of house 'b' not found"),
        (5, "flow of house 'c' is not a file"),
        (6, "flow of house 'd' is not a flow file"),
        (7, "flow of house 'e' is '../flows/\\x00.flo'"),
        (8, "flow of house 'f' is 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (10004 characters)"),
        (9, "flow of house 'g' is 'x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/'... (6004 characters)"),
    ]
    assert len(str(err)) < 4000


def test_keep_or_run_that_is_a_file(tree: Path) -> None:
    (tree / "houses" / "afile").write_text("")
    e = one_error(tree, MINIMAL + "keep: afile\n")
    assert e.message.startswith("keep ") and "is not a directory" in e.message and e.where.line == 5


def test_many_errors_are_capped(tree: Path) -> None:
    text = "estate: a\n" + "".join(f"bad{i}: 1\n" for i in range(300)) + "houses: [{name: m, flow: ../flows/ping.flo}]\n"
    err = errors_of(tree, text)
    assert len(err.errors) == 101 and err.errors[-1].message == "... and 200 more errors"


def test_aliases_do_not_blow_up(tree: Path) -> None:
    # an alias repeats a node (same position): it is read again, not expanded into a crash
    text = "estate: alpha\nhouses:\n  - &h {name: m, flow: ../flows/ping.flo}\n  - *h\n"
    e = one_error(tree, text)
    assert e.message.startswith("house name 'm' used twice")


# -- planning ---------------------------------------------------------------------


def layout_with(tree: Path, *entries: str) -> EstateLayout:
    lines = "".join(f"  - {{{e}}}\n" for e in entries)
    return load_layout(write(tree, f"estate: alpha\nhouses:\n  - {{name: manor, flow: ../flows/ping.flo}}\n{lines}"))


def yards(plan: list[HousePlan]) -> list[str]:
    return [p.yard for p in plan]


def test_plan_fills_cores_with_auto(tree: Path) -> None:
    layout = layout_with(tree, "name: worker, flow: ../flows/worker.flo, count: auto")
    assert yards(plan_houses(layout, 4)) == ["manor", "worker1", "worker2", "worker3"]
    assert yards(plan_houses(layout, 2)) == ["manor", "worker"]
    assert yards(plan_houses(layout, 1)) == ["manor", "worker"]  # every auto entry gets one
    plan = plan_houses(layout, 3)
    assert [p.manor for p in plan] == [True, False, False]
    assert plan[0].entry is layout.manor and plan[1].entry is layout.houses[1]


def test_plan_default_is_cpu_count(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = layout_with(tree, "name: w, flow: ../flows/worker.flo, count: auto")
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    assert len(plan_houses(layout)) == 6
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert yards(plan_houses(layout)) == ["manor", "w"]


def test_plan_fixed_and_auto_round_robin(tree: Path) -> None:
    layout = layout_with(tree,
                         "name: a, flow: ../flows/worker.flo, count: auto",
                         "name: fixed, flow: ../flows/other.flo, count: 2",
                         "name: b, flow: ../flows/worker.flo, count: auto",
                         "name: one, flow: ../flows/other.flo")
    # 8 - manor - 2 fixed - 1 one = 4 spare -> a:2, b:2 ; 9 -> 5 spare -> a:3, b:2
    assert yards(plan_houses(layout, 8)) == ["manor", "a1", "a2", "fixed1", "fixed2", "b1", "b2", "one"]
    assert yards(plan_houses(layout, 9)) == ["manor", "a1", "a2", "a3", "fixed1", "fixed2", "b1", "b2", "one"]
    # fewer cores than fixed houses: all fixed still run, autos get one each
    assert yards(plan_houses(layout, 2)) == ["manor", "a", "fixed1", "fixed2", "b", "one"]


def test_plan_without_auto_ignores_the_core_count(tree: Path) -> None:
    layout = layout_with(tree, "name: w, flow: ../flows/worker.flo, count: 3")
    assert yards(plan_houses(layout, 1)) == yards(plan_houses(layout, 64)) == ["manor", "w1", "w2", "w3"]


def test_plan_yard_collision(tree: Path) -> None:
    layout = layout_with(tree, "name: w, flow: ../flows/worker.flo, count: 2",
                         "name: w1, flow: ../flows/worker.flo")
    with pytest.raises(LayoutError) as info:
        plan_houses(layout, 4)
    (e,) = info.value.errors
    assert e.message == "yard name 'w1' of house 'w1' is also a yard of house 'w'"
    assert e.where is not None and e.where.line == 5
    # with auto the collision depends on the core count
    layout = layout_with(tree, "name: w, flow: ../flows/worker.flo, count: auto",
                         "name: w2, flow: ../flows/worker.flo")
    assert yards(plan_houses(layout, 3)) == ["manor", "w", "w2"]
    with pytest.raises(LayoutError, match="yard name 'w2'"):
        plan_houses(layout, 4)


def test_plan_yards_are_safe_names(tree: Path) -> None:
    from flowcast.transport.keep import validate_name
    layout = layout_with(tree, f"name: {'w' * 32}, flow: ../flows/worker.flo, count: 1024")
    plan = plan_houses(layout, 2)
    assert len(plan) == 1025 and plan[-1].yard == "w" * 32 + "1024"
    for p in plan:
        validate_name(p.yard)
        assert re.fullmatch(r"[A-Za-z0-9_-]+", p.yard)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "4", 10**9])
def test_plan_rejects_bad_totals(tree: Path, bad: object) -> None:
    layout = layout_with(tree)
    with pytest.raises(ValueError):
        plan_houses(layout, bad)  # type: ignore[arg-type]
