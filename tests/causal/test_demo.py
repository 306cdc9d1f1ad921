"""README's causal demo: three estates as processes, roads through chaos relays, every delivered order checked."""

from __future__ import annotations

import subprocess
import sys

from flowcast.house.causaldemo import TOTAL, check
from tests.house.estates import ROOT


def test_demo_causal_delivers_everything_once_in_causal_order_at_every_estate():
    done = subprocess.run(
        [sys.executable, "-m", "flowcast.cli.main", "demo", "causal", "--timeout", "60"],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"every estate delivered {TOTAL} messages" in out
    assert "checked: each estate delivered all 90 messages once, every one after all its deps" in out
    assert "relay in house gamma" in out and "held: 90" in out  # flowcast causal status, from the status files
    lost = int(out.split("the chaos relays lost ")[1].split(",")[0])
    assert lost > 0  # the faults happened


def _log():
    """A little log: two posts, an answer to the first, an answer to both."""
    post = lambda h, deps=(): {"hash": h, "deps": list(deps), "text": h, "answers": None}  # noqa: E731
    return [post("a"), post("b"), {**post("c", ["a"]), "answers": "a"}, post("d", ["b", "c"])]


def test_the_check_catches_an_early_answer_a_missing_dep_a_duplicate_and_diverging_estates():
    log = _log()
    assert check({"x": log, "y": [log[1], log[0], log[2], log[3]]}, total=4) == []
    early = [log[2], log[0], log[1], log[3]]
    problems = check({"x": early}, total=4)
    assert any("before its dep a" in p for p in problems) and any("before the post it answers" in p for p in problems)
    assert any("before its dep" in p for p in check({"x": [log[0], log[2], log[3]]}, total=3))  # d's dep b never came
    assert any("twice" in p for p in check({"x": log + log[:1]}, total=4))
    assert any("not 4" in p for p in check({"x": log[:3]}, total=4))
    other = log[:3] + [{"hash": "e", "deps": [], "text": "e", "answers": None}]
    assert any("different messages" in p for p in check({"x": log, "y": other}, total=4))
