"""Behaviour registry: marking, naming, parameters, loading from files."""

import textwrap

import pytest

from flowcast.behaving.registry import BehaviourError, Registry, behaviour, canonical_name


def test_canonical_names_join_ioflo_and_dotted_forms():
    assert canonical_name("PickPeppers") == "pick.peppers"
    assert canonical_name("pick peppers") == "pick.peppers"
    assert canonical_name("controller.pid.depth") == "controller.pid.depth"
    assert canonical_name("pick_peppers") == "pick.peppers"


def test_parameters_are_checked_and_coerced():
    @behaviour("scale")
    def scale(io, factor: float = 1.0, label: str = "x"):
        return None

    reg = Registry()
    found = reg.add(scale)
    assert found.form == "function"
    assert found.bind({"factor": 2}) == {"factor": 2.0}
    with pytest.raises(BehaviourError, match="did you mean 'factor'"):
        found.bind({"fctor": 2})
    with pytest.raises(BehaviourError, match="wants float"):
        found.bind({"factor": "big"})


def test_required_parameter_missing_is_an_error():
    @behaviour()
    def needy(io, target: str):
        return None

    with pytest.raises(BehaviourError, match="needs parameter"):
        Registry().add(needy).bind({})


def test_two_registries_do_not_share_behaviours():
    @behaviour("only.here")
    def f(io):
        return None

    a, b = Registry(), Registry()
    a.add(f)
    assert "only.here" in a and "only.here" not in b


def test_load_from_file_and_forms(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent('''
        from flowcast.behaving import behaviour

        @behaviour("tick")
        def tick(io, step=1):
            n = 0
            while True:
                n += step
                yield n

        @behaviour()
        class PickPeppers:
            def __init__(self, io, count: int = 2):
                self.count = count
            def __call__(self):
                return self.count
    '''))
    reg = Registry()
    loaded = reg.load(str(path))
    assert sorted(b.name for b in loaded) == ["PickPeppers", "tick"]
    assert reg.find("pick peppers").form == "class"
    assert reg.find("tick").form == "generator"


def test_load_missing_or_broken_module_is_a_clear_error(tmp_path):
    reg = Registry()
    with pytest.raises(BehaviourError, match="not found"):
        reg.load("nowhere/missing.py", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('nope')\n")
    with pytest.raises(BehaviourError, match="nope"):
        reg.load(str(bad))


def test_entry_points_bring_stock_behaviours():
    reg = Registry()
    reg.load_entry_points()
    assert "count" in reg and "forward" in reg


def test_postponed_annotations_give_the_declared_type_and_nothing_is_truncated():
    from flowcast.behaving import stock  # written with 'from __future__ import annotations'

    reg = Registry()
    count = reg.add(stock.count)
    assert count.params[0].kind is float  # declared 'step: float = 1', not type(1)
    assert count.bind({"step": 0.5}) == {"step": 0.5}

    @behaviour("whole")
    def whole(io, n: int = 1):
        return None

    found = reg.add(whole)
    assert found.bind({"n": 2.0}) == {"n": 2}
    with pytest.raises(BehaviourError, match="wants int"):
        found.bind({"n": 0.5})
    with pytest.raises(BehaviourError, match="wants int"):
        found.bind({"n": True})


def test_stock_modules_load_even_when_the_installed_metadata_predates_them():
    registry = Registry()
    registry.load_entry_points()
    for name in ("count", "queue", "route send", "cast publish", "cast subscribe"):
        assert name in registry, name
    again = registry.load_entry_points()  # loading twice adds the same objects, no "name is taken"
    assert {b.name for b in again} >= {"cast.publish", "cast.subscribe"}
