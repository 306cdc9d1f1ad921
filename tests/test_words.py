"""The three words of docs/architecture.md "Words" keep one meaning each.

``frame`` is an Ioflo Framer's state, ``channel`` the route's fourth
element, ``flow`` a flow script or routed data flow.  The transport's and
the router's own things with those names were renamed (chunk, parcel, link,
stream) so that a grep for a word finds one concept; this test is what keeps
the old uses from creeping back into the layers that had them.  It reads
every name, comment and string of those packages, so prose counts too.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

import flowcast

ROOT = Path(flowcast.__file__).resolve().parent

# In names (identifiers, module files) a word may hide inside a longer one
# (``decode_frames``, ``_new_channel``, ``nflows``); ``flowcast``,
# ``overflow`` and the socket's ``flowinfo`` are not the word.
_NAME = {
    "frame": re.compile(r"frame", re.I),
    "channel": re.compile(r"channel", re.I),
    "flow": re.compile(r"(?<!over)flow(?!cast|info)", re.I),
}
# In prose only the word itself; "flow control" is the networking term for
# the receive window and stays.
_PROSE = {
    "frame": re.compile(r"\bframes?\b", re.I),
    "channel": re.compile(r"\bchannels?\b", re.I),
    "flow": re.compile(r"\bflows?\b(?! control)", re.I),
}
# Which words each package must not use in its own sense any more.
RULES = {
    "transport": ("frame", "channel", "flow"),
    "routing": ("frame",),  # a route's channel and a routing flow are the words' own meanings
}


def _uses(path: Path, words: tuple[str, ...]) -> list[str]:
    """Every use of ``words`` in ``path``'s file name, names, comments and strings, as 'line: token'."""
    found = [f"file name {path.name}" for word in words if _NAME[word].search(path.stem)]
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME:
            patterns = [_NAME[word] for word in words]
        elif token.type in (tokenize.COMMENT, tokenize.STRING) or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            patterns = [_PROSE[word] for word in words]
        else:
            continue
        if any(pattern.search(token.string) for pattern in patterns):
            found.append(f"{token.start[0]}: {token.string[:80]!r}")
    return found


@pytest.mark.parametrize("package", sorted(RULES))
def test_the_renamed_words_stay_out_of_the_layers_that_renamed_them(package: str) -> None:
    words = RULES[package]
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules under {ROOT / package}"
    uses = {str(path.relative_to(ROOT)): hits for path in files if (hits := _uses(path, words))}
    assert not uses, f"{package} uses {'/'.join(words)} (see docs/architecture.md, Words): {uses}"


def test_the_checker_sees_each_word_in_names_and_prose(tmp_path: Path) -> None:
    """The rule would pass vacuously if the patterns never matched."""
    sample = tmp_path / "sample.py"
    sample.write_text('x = decode_frames\n# the channel of a peer\ny = "per flow"\nflowcast = overflow = flowinfo = 1\n"flow control"\n')
    hits = _uses(sample, ("frame", "channel", "flow"))
    assert [hit.split(":")[0] for hit in hits] == ["1", "2", "3"]
