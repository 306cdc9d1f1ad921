"""flowcast/flow/verbs.py: the verb table, and every part of the flow layer that follows it.

A verb is defined once in the table; the .flo reader, the YAML reader and
writer, the name checker and the builder find their code for it through
the table.  These tests hold each of them to it in both directions (no
verb without code, no code for a verb the table does not know) and check
that what the front ends make of each verb is what the table says: its
arguments, and its context.
"""

from __future__ import annotations

import pytest

from flowcast.behaving.registry import Registry
from flowcast.flow import buildacts, floacts, flofast, yamlflow, yamlwrite
from flowcast.flow.builder import _COMPILERS, build_house
from flowcast.flow.errors import FlowError
from flowcast.flow.floscript import parse_flo
from flowcast.flow.spec import CONTEXTS
from flowcast.flow.verbs import ACTS, FIXED, NATIVE, VERBS, each, make_act
from flowcast.flow.yamlflow import ACT_KEYS, dump_yaml, parse_yaml

#: One statement of every verb of the table, in a flow that builds.
EVERY_VERB = """\
house h
  init .x with value 1
  framer main be active
    frame a
      do hello with greeting "hi"
      put 1 into .x
      inc .x with 2
      copy .x into .y
      set elapsed with 3
      print hello there
      bid start worker
      ready s
      start s
      stop s
      run s
      abort s
      done me
      let if .x >= 0
      aux helper if .x >= 100
      go b if .x >= 5
      timeout 2
    frame b
      repeat 3
    frame c
      go a
  framer worker be inactive
    frame w
  framer s be slave
    frame s1
  framer helper be aux
    frame h1
"""


def _acts(spec) -> list:
    return [act for framer in spec.house().framers for frame in framer.frames for act in frame.acts]


def test_every_part_has_code_for_every_verb_and_for_no_other() -> None:
    assert set(floacts.READERS) == set(VERBS)
    assert set(yamlflow._READERS) == set(VERBS)
    assert {name[4:] for name in vars(yamlflow._Reader) if name.startswith("act_")} == set(VERBS)
    assert set(yamlwrite._WRITERS) == set(ACTS)
    assert set(_COMPILERS) == set(ACTS)
    assert {name[4:] for name in vars(buildacts.ActCompiler) if name.startswith("act_")} == set(ACTS)
    assert set(flofast.FAST) - set(VERBS) <= {"framer", "frame", "native", *CONTEXTS}
    assert ACT_KEYS == {word: verb.yaml for word, verb in VERBS.items()}
    assert set(NATIVE) | set(FIXED) == set(VERBS) and not set(NATIVE) & set(FIXED)
    assert {verb.act for verb in VERBS.values()} == set(ACTS)


def test_a_verb_without_code_fails_at_import_naming_it() -> None:
    words = dict(VERBS, listen=VERBS["print"])
    with pytest.raises(LookupError, match=r"the YAML writer has no code for verb\(s\) listen of flow/verbs.py"):
        each({word: print for word in VERBS}, "the YAML writer", words)


def test_each_act_has_exactly_the_arguments_the_table_gives_it() -> None:
    spec = parse_flo(EVERY_VERB, "every.flo")
    acts = _acts(spec)
    assert {act.verb for act in acts} == set(ACTS)
    for act in acts:
        verb = ACTS[act.verb]
        assert set(act.args) == set(verb.args) | {key for key, _ in verb.optional}, act.verb


def test_every_verb_round_trips_through_yaml_and_builds() -> None:
    spec = parse_flo(EVERY_VERB, "every.flo")
    again = parse_yaml(dump_yaml(spec), "every.yaml")
    assert again.houses == spec.houses
    registry = Registry()

    def hello(io, greeting: str = "") -> None:
        pass

    registry.add(hello)
    built = build_house(again.house(), stamp=lambda: 0.0, out=lambda _: None, registry=registry)
    assert set(built.framers) == {"main", "worker", "s", "helper"}


def test_a_verb_runs_in_its_native_context_and_a_fixed_verb_ignores_context_lines() -> None:
    acts = _acts(parse_flo(EVERY_VERB, "every.flo"))
    natives = {act.verb: act.context for act in acts if act.verb in NATIVE}
    assert natives == {verb: NATIVE[verb] for verb in natives}
    moved = _acts(parse_flo("house h\n framer f be active\n  frame a\n   exit\n   let if .x >= 0\n   go a\n"
                            "   print x\n", "t.flo"))
    assert [(a.verb, a.context) for a in moved] == [("let", FIXED["let"]), ("go", FIXED["go"]), ("print", "exit")]


def test_yaml_refuses_a_context_on_nothing_and_names_the_verbs_when_a_key_is_not_one() -> None:
    with pytest.raises(FlowError) as info:
        parse_yaml("house: h\nframers:\n  - framer: f\n    frames:\n      - frame: a\n        acts:\n"
                   "          - prnt: x\n", "t.yaml")
    assert "did you mean 'print'?" in info.value.hint


def test_make_act_gives_each_act_fresh_defaults() -> None:
    one, two = make_act("do", "recur", {"behaviour": "x"}), make_act("do", "recur", {"behaviour": "x"})
    one.args["with"]["k"] = 1
    assert two.args["with"] == {} and two.args["from"] == [] and two.args["name"] is None
    assert make_act("go", "precur", {"far": "a", "needs": []}).args["human"] == ""
