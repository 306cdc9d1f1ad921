"""FloScript parsing: each statement lands in the model as Ioflo means it."""

from __future__ import annotations

import pytest

from flowcast.flow.floscript import parse_flo
from flowcast.flow.spec import Act, FrameSpec, Need, Ref


def flo(body: str, head: str = "house h\nframer f be active\nframe a\n") -> FrameSpec:
    """The first frame of a one-framer script whose frame body is ``body``."""
    spec = parse_flo(head + body + "\nframe z\n", "t.flo")
    return spec.houses[0].framers[0].frames[0]


def acts(body: str) -> list[Act]:
    return flo(body).acts


def one(body: str) -> Act:
    (act,) = acts(body)
    return act


# -- lexing -------------------------------------------------------------------


def test_indentation_and_comments_mean_nothing() -> None:
    text = "house h  # the house\n   framer f be active\nframe a\n        print hi   # greet\n#frame b\n"
    spec = parse_flo(text)
    (frame,) = spec.houses[0].framers[0].frames
    assert [a.args["message"] for a in frame.acts] == ["hi"]


def test_hash_inside_a_word_or_quotes_is_not_a_comment() -> None:
    assert one('print a#b "c # d"').args["message"] == 'a#b "c # d"'


def test_connective_line_continues_previous_statement_across_blank_and_comment_lines() -> None:
    (act,) = acts("go z\n\n  # why\n  if .x >= 2\n  and .y\n")
    assert act.args["far"] == "z"
    assert [n.kind for n in act.args["needs"]] == ["compare", "boolean"]
    assert act.args["human"] == "go z if .x >= 2 and .y"


def test_backslash_joins_lines() -> None:
    act = one("put 1 \\\n into .x")
    assert act.args == {"data": {"value": 1}, "dst": Ref(".x")}


def test_tokens_keep_their_position() -> None:
    act = one("   put 1 into .x")
    assert act.where is not None and (act.where.line, act.where.col) == (4, 4)


def test_crlf_and_cr_line_ends() -> None:
    spec = parse_flo("house h\r\nframer f be active\rframe a\r\nprint x\r\n")
    assert spec.houses[0].framers[0].frames[0].acts[0].args["message"] == "x"


# -- house level ----------------------------------------------------------------


def test_house_init_load_log() -> None:
    spec = parse_flo(
        "house h\n"
        "load behaviors/counter.py\nload my.module\n"
        "init .a.b with 5\n"
        "init .color with red 1 green 'two words'\n"
        "init meta.x to true\n"
        "init depth in .dst from value in .src\n"
        "log .a.b .color\n"
    )
    house = spec.house("h")
    assert house.loads == ["behaviors/counter.py", "my.module"]
    assert [(i.dst, i.data, i.src) for i in house.inits] == [
        (Ref(".a.b"), {"value": 5}, None),
        (Ref(".color"), {"red": 1, "green": "two words"}, None),
        (Ref("meta.x"), {"value": True}, None),
        (Ref(".dst", ("depth",)), None, Ref(".src", ("value",))),
    ]
    assert house.logs == [Ref(".a.b"), Ref(".color")]


def test_several_houses() -> None:
    spec = parse_flo("house a\nframer f\nframe x\nhouse b\nframer f\nframe y\n")
    assert [h.name for h in spec.houses] == ["a", "b"]
    assert spec.house("b").framers[0].frames[0].name == "y"


# -- framers and frames ---------------------------------------------------------


def test_framer_options_and_defaults() -> None:
    spec = parse_flo(
        "house h\n"
        "framer plain\nframe p\n"
        "framer busy be active at 0.5 first two via .root.\nframe one\nframe two\n"
        "framer helper be aux\nframe x\n"
        "framer worker be slave at -3\nframe y\n"
    )
    plain, busy, helper, worker = spec.house().framers
    assert (plain.schedule, plain.period, plain.first) == ("inactive", 0.0, "p")  # Ioflo default: inactive
    assert (busy.schedule, busy.period, busy.first, busy.inode) == ("active", 0.5, "two", ".root.")
    assert helper.schedule == "aux"
    assert (worker.schedule, worker.period) == ("slave", 0.0)


def test_first_statement_and_nesting() -> None:
    spec = parse_flo(
        "house h\nframer f be active\n"
        "frame top\n"
        "frame mid in top via me.x\n"
        "frame low\n  over mid\n  next top\n"
        "first low\n"
    )
    framer = spec.house().framers[0]
    top, mid, low = framer.frames
    assert framer.first == "low"
    assert (top.over, mid.over, mid.inode) == (None, "top", "me.x")
    assert (low.over, low.next) == ("mid", "top")


def test_under_sets_over_of_named_frame() -> None:
    framer = parse_flo("house h\nframer f\nframe a\n under b\nframe b\n").house().framers[0]
    assert framer.frames[0].under == "b"
    assert framer.frames[1].over == "a"


def test_bare_next_means_lexical() -> None:
    frame = flo("next z\nnext")
    assert frame.next is None


# -- contexts -----------------------------------------------------------------


@pytest.mark.parametrize(
    "line, verb, context",
    [
        ("do thing", "do", "recur"),
        ("put 1 into .x", "put", "enter"),
        ("inc .x with 1", "inc", "enter"),
        ("copy .x into .y", "copy", "enter"),
        ("set .g with 1", "set", "enter"),
        ("print hi", "print", "enter"),
        ("bid start f", "bid", "enter"),
        ("done", "done", "enter"),
        ("ready f", "ready", "benter"),
        ("start f", "start", "enter"),
        ("stop f", "stop", "exit"),
        ("run f", "run", "recur"),
        ("abort f", "abort", "enter"),
        ("go z", "go", "precur"),
        ("timeout 1", "go", "precur"),
        ("repeat 2", "go", "precur"),
        ("let if .x", "let", "benter"),
    ],
)
def test_native_contexts(line: str, verb: str, context: str) -> None:
    act = one(line)
    assert (act.verb, act.context) == (verb, context)


def test_context_line_overrides_native_but_not_for_go_let_timeout() -> None:
    got = [(a.verb, a.context) for a in acts(
        "exit\n do thing\n print bye\n go z\n timeout 2\n let if .x\n start f\n"
        "renter\n put 1 into .x\n native\n do other\n rexit\n stop f"
    )]
    assert got == [
        ("do", "exit"), ("print", "exit"), ("go", "precur"), ("go", "precur"), ("let", "benter"),
        ("start", "exit"), ("put", "renter"), ("do", "recur"), ("stop", "rexit"),
    ]


def test_context_resets_at_new_frame() -> None:
    spec = parse_flo("house h\nframer f\nframe a\nexit\nprint x\nframe b\nprint y\n")
    a, b = spec.house().framers[0].frames
    assert (a.acts[0].context, b.acts[0].context) == ("exit", "enter")


def test_do_at_context_beats_context_line() -> None:
    assert one("exit\ndo thing at enter").context == "enter"
    assert one("exit\ndo thing at native").context == "recur"


# -- do -----------------------------------------------------------------------


def test_do_full() -> None:
    act = one("do controller pid depth as pid one via .vehicle. with gain 2.5 mode 'fast' "
              "from depth in .state from .goal per limit 3 to .out")
    assert act.args == {
        "behaviour": "controller.pid.depth",
        "name": "pid.one",
        "inode": ".vehicle.",
        "with": {"gain": 2.5, "mode": "fast"},
        "per": {"limit": 3},
        "from": [Ref(".state", ("depth",)), Ref(".goal")],
        "to": [Ref(".out")],
    }


def test_do_minimal_has_every_key() -> None:
    assert one("do counter").args == {
        "behaviour": "counter", "name": None, "inode": None, "with": {}, "per": {}, "from": [], "to": []}


# -- data and paths -------------------------------------------------------------


@pytest.mark.parametrize(
    "token, value",
    [
        ("5", 5), ("-2", -2), ("2.5", 2.5), ("ff", "ff"), ("1a", 26), ("1e5", 0x1E5), ("1.5e3", 1500.0),
        ("true", True), ("Yes", True), ("no", False), ("none", None), ('"a b"', "a b"), ("'q'", "q"),
        ("green", "green"), ("a.b.", "a.b."), ("45N30.0", 45.5), ("10S30.0", -10.5),
    ],
)
def test_data_values_follow_ioflo_conversion(token: str, value: object) -> None:
    assert one(f"put {token} into .x").args["data"] == {"value": value}


def test_multi_field_put() -> None:
    act = one("put green 4 blue 30 into .color")
    assert act.args == {"data": {"green": 4, "blue": 30}, "dst": Ref(".color")}


@pytest.mark.parametrize(
    "path, normal",
    [
        (".a.b", ".a.b"),
        ("a.b", "a.b"),
        ("a of root", "a"),
        ("a of me", "me.a"),
        ("a of framer", "framer.me.a"),
        ("a of framer other", "framer.other.a"),
        ("a of frame", "framer.me.frame.me.a"),
        ("a of frame b", "framer.me.frame.b.a"),
        ("a of frame main", "framer.main.frame.main.a"),
        ("a of frame b of framer g", "framer.g.frame.b.a"),
        ("a of actor", "framer.me.frame.me.actor.me.a"),
        ("a of actor x of frame b", "framer.me.frame.b.actor.x.a"),
        ("frame.b.a", "framer.me.frame.b.a"),
        ("frame.main.a", "framer.main.frame.main.a"),
        ("actor.x.a", "framer.me.frame.me.actor.x.a"),
        ("framer.me.goal.x", "framer.me.goal.x"),
    ],
)
def test_paths_normalise_like_parse_indirect(path: str, normal: str) -> None:
    assert one(f"copy {path} into .y").args["src"] == Ref(normal)


def test_inc_copy_set() -> None:
    inc_data, inc_src, copy, set_elapsed, set_rec, set_goal, set_from = acts(
        "inc .n with 2\ninc x y in .n from .m\ncopy a b in .s into c d in .t\n"
        "set elapsed with 20\nset recurred to 3\nset goal.depth with 5.0\nset elapsed from limit in .cfg"
    )
    assert inc_data.args == {"dst": Ref(".n"), "data": {"value": 2}, "src": None}
    assert inc_src.args == {"dst": Ref(".n", ("x", "y")), "data": None, "src": Ref(".m")}
    assert copy.args == {"src": Ref(".s", ("a", "b")), "dst": Ref(".t", ("c", "d"))}
    assert set_elapsed.args == {"dst": Ref("framer.me.goal.elapsed"), "data": {"value": 20}, "src": None}
    assert set_rec.args["dst"] == Ref("framer.me.goal.recurred")
    assert set_goal.args["dst"] == Ref("goal.depth")
    assert set_from.args == {"dst": Ref("framer.me.goal.elapsed"), "data": None, "src": Ref(".cfg", ("limit",))}


def test_print_keeps_words_as_written() -> None:
    assert one('print "Hello World"  again').args == {"message": '"Hello World" again'}


# -- taskers ----------------------------------------------------------------------


def test_bid_and_fiats() -> None:
    text = ("house h\nframer f be active\nframe a\n"
            "bid stop g h\nbid start\nbid run g at 0.5\nbid run g at value in .p\nbid abort all\n"
            "ready g\nstart g\nstop g\nrun g\nabort g\ndone\ndone g me\n"
            "framer g be slave\nframe x\nframer h\nframe y\n")
    got = [(a.verb, a.args) for a in parse_flo(text).house().framers[0].frames[0].acts]
    assert got == [
        ("bid", {"control": "stop", "taskers": ["g", "h"], "period": None}),
        ("bid", {"control": "start", "taskers": ["me"], "period": None}),
        ("bid", {"control": "run", "taskers": ["g"], "period": 0.5}),
        ("bid", {"control": "run", "taskers": ["g"], "period": Ref(".p", ("value",))}),
        ("bid", {"control": "abort", "taskers": ["all"], "period": None}),
        ("ready", {"taskers": ["g"]}), ("start", {"taskers": ["g"]}), ("stop", {"taskers": ["g"]}),
        ("run", {"taskers": ["g"]}), ("abort", {"taskers": ["g"]}),
        ("done", {"taskers": ["me"]}), ("done", {"taskers": ["g", "me"]}),
    ]


# -- go, timeout, repeat, let, needs --------------------------------------------------


def test_bare_go_is_always() -> None:
    act = one("go z")
    assert act.args["far"] == "z"
    assert [n.kind for n in act.args["needs"]] == ["always"]


def test_timeout_and_repeat_are_go_next() -> None:
    timeout, repeat = acts("timeout 1.5\nrepeat 3")
    assert timeout.args == {"far": "next", "needs": [Need("elapsed", op=">=", goal_value=1.5)], "human": "timeout 1.5"}
    assert repeat.args == {"far": "next", "needs": [Need("recurred", op=">=", goal_value=3)], "human": "repeat 3"}
    assert isinstance(timeout.args["needs"][0].goal_value, float)


def needs_of(cond: str) -> list[Need]:
    return one(f"go z if {cond}").args["needs"]


@pytest.mark.parametrize(
    "cond, need",
    [
        (".x", Need("boolean", state=Ref(".x"))),
        ("not .x", Need("boolean", negate=True, state=Ref(".x"))),
        ("depth in .s", Need("boolean", state=Ref(".s", ("depth",)))),
        (".x >= 5", Need("compare", state=Ref(".x"), op=">=", goal_value=5)),
        (".x == 'on'", Need("compare", state=Ref(".x"), op="==", goal_value="on")),
        (".x == high", Need("compare", state=Ref(".x"), op="==", goal_ref=Ref("high"))),
        (".x != true", Need("compare", state=Ref(".x"), op="!=", goal_value=True)),
        (".x < .y", Need("compare", state=Ref(".x"), op="<", goal_ref=Ref(".y"))),
        (".x > v in .y +- 0.5", Need("compare", state=Ref(".x"), op=">", goal_ref=Ref(".y", ("v",)), tolerance=0.5)),
        ("a of frame == 2", Need("compare", state=Ref("framer.me.frame.me.a"), op="==", goal_value=2)),
        ("elapsed >= 2", Need("elapsed", op=">=", goal_value=2)),
        ("elapsed >= goal", Need("elapsed", op=">=", goal_ref=Ref("framer.me.goal.elapsed"))),
        ("recurred >= goal", Need("recurred", op=">=", goal_ref=Ref("framer.me.goal.recurred"))),
        ("elapsed re me >= .lim", Need("elapsed", op=">=", goal_ref=Ref(".lim"))),
        ("elapsed re f == 1 +- 0.1", Need("elapsed", op="==", goal_value=1, tolerance=0.1)),
        ("g is done", Need("done", tasker="g")),
        ("me is done", Need("done", tasker="me")),
        ("any is done", Need("done", aux="any")),
        ("all is done", Need("done", aux="all")),
        ("aux x is done", Need("done", aux="x")),
        ("x in frame me is done", Need("done", aux="x", frame="me", framer="me")),
        ("all in frame is done", Need("done", aux="all", frame="me", framer="me")),
        ("aux x in framer f is done", Need("done", aux="x", framer="f")),
        ("any in frame z in framer is done", Need("done", aux="any", frame="z", framer="me")),
        ("g is readied", Need("status", tasker="g", status="readied")),
        ("not g is running", Need("status", negate=True, tasker="g", status="running")),
        (".s is updated", Need("updated", state=Ref(".s"))),
        (".s is changed in frame", Need("changed", state=Ref(".s"), frame="me")),
        (".s is updated in frame z by m1", Need("updated", state=Ref(".s"), frame="z", marker="m1")),
    ],
)
def test_needs(cond: str, need: Need) -> None:
    text = ("house h\nframer f be active\nframe a\n go z if " + cond +
            "\n aux x\nframe z\nframer g be slave\nframe q\nframer x be aux\nframe r\n")
    (got,) = parse_flo(text).house().framers[0].frames[0].acts[0].args["needs"]
    assert got == need


def test_several_needs_and_let() -> None:
    go, let = acts("go z if .a and not .b and elapsed > 1\nlet me if .c and .d == 1")
    assert [n.kind for n in go.args["needs"]] == ["boolean", "boolean", "elapsed"]
    assert go.args["needs"][1].negate
    assert [n.kind for n in let.args["needs"]] == ["boolean", "compare"]


def test_aux_plain_and_conditional() -> None:
    text = ("house h\nframer f be active\nframe a\naux x\naux x if .go and elapsed >= 1\n"
            "framer x be aux\nframe r\n")
    frame = parse_flo(text).house().framers[0].frames[0]
    (plain,) = frame.auxes
    assert (plain.framer, plain.needs) == ("x", ())
    (cond,) = frame.acts  # a conditional aux is a precur act, kept in script order
    assert (cond.verb, cond.context, cond.args["framer"]) == ("aux", "precur", "x")
    assert [n.kind for n in cond.args["needs"]] == ["boolean", "elapsed"]


def test_conditional_aux_keeps_its_place_among_transitions() -> None:
    text = ("house h\nframer f be active\nframe a\ngo b if .x\naux x if .go\ngo b if .y\nframe b\n"
            "framer x be aux\nframe r\n")
    frame = parse_flo(text).house().framers[0].frames[0]
    assert [a.verb for a in frame.acts] == ["go", "aux", "go"]
