"""The located YAML reader that YAML flows and estate layouts share.

Both files are composed into YAML nodes, never loaded into Python objects:
every value keeps its line and column for the error that may name it, a
key given twice is an error instead of silently replacing the first, a
merge key (``<<``) is refused rather than half-supported, no YAML tag can
build anything but plain values, and aliases cannot expand a small file
into millions of nodes.  The rules live here once so that a flow and a
layout refuse the same things with the same words.

Two readers walk the nodes differently: a flow stops at its first error (a
later error in a broken tree would mostly be noise), a layout collects them
all (each is a separate field a person fixes in one pass).  ``collect``
picks which; everything else is the same.
"""

from __future__ import annotations

from typing import Any

import yaml

from flowcast.flow.errors import FlowError, Where, did_you_mean
from flowcast.flow.flolex import split_lines

__all__ = [
    "DUMPER",
    "LOADER",
    "MAX_ALIAS_EXPANSION",
    "NodeReader",
    "Pairs",
    "node_kind",
    "show",
]

#: libyaml's loader when PyYAML has it (about ten times faster); nodes keep marks either way.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

TAG = "tag:yaml.org,2002:"
NULL, BOOL, INT, STR, MERGE = TAG + "null", TAG + "bool", TAG + "int", TAG + "str", TAG + "merge"

#: Lists and mappings read again through YAML aliases: a small file must not
#: expand into millions of acts (or house entries) through anchors and aliases.
MAX_ALIAS_EXPANSION = 100_000

#: A key and its value, by the key's text, in file order.
Pairs = dict[str, tuple[yaml.Node, yaml.Node]]

_SCALARS = (str, int, float, bool, type(None))


def node_kind(node: yaml.Node) -> str:
    """What a YAML node is, in an error message's words: mapping, list or value."""
    if isinstance(node, yaml.MappingNode):
        return "mapping"
    if isinstance(node, yaml.SequenceNode):
        return "list"
    return "value"


def show(text: str, limit: int = 40) -> str:
    """A value for an error message: quoted, escaped, and never 10 kB long."""
    if len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text)} characters)"
    return repr(text)


class NodeReader:
    """A composed YAML document and the strict, located reads of its nodes.

    With ``collect`` false the first problem raises its :class:`FlowError`;
    with it true, problems gather in :attr:`errors` and the read goes on
    (methods then return None for what they could not read).
    ``max_shown_line`` stops a 10 kB line from being kept in every position
    that points into it (the position still says where).
    """

    #: What the document is, for the alias error ("flow too large").
    kind = "file"

    def __init__(self, text: str, file: str, *, collect: bool = False, max_shown_line: int | None = None) -> None:
        self.source = text
        self.file = file
        self.lines = split_lines(text)
        self.collect = collect
        self.max_shown_line = max_shown_line
        self.errors: list[FlowError] = []
        self.loader: Any = None
        self._seen: set[int] = set()
        self._repeats = 0

    # -- positions and errors

    def where(self, node: yaml.Node) -> Where:
        mark = node.start_mark
        return self.where_mark(mark.line, mark.column)

    def where_mark(self, line: int, column: int) -> Where:
        """The position of a 0-based YAML mark, with its line's text."""
        text = self.lines[line] if 0 <= line < len(self.lines) else ""
        limit = self.max_shown_line
        if limit is not None and len(text) > limit:
            text = text[:limit] if column < limit else ""
        return Where(self.file, line + 1, column + 1, text)

    def error(self, message: str, node: yaml.Node | None, hint: str = "") -> FlowError:
        return FlowError(message, self.where(node) if node is not None else Where(self.file, 1, 1), hint)

    def report(self, message: str, node: yaml.Node | None, hint: str = "") -> None:
        """Raise the located error, or keep it and go on when collecting."""
        self.add(self.error(message, node, hint))

    def add(self, error: FlowError) -> None:
        if not self.collect:
            raise error
        self.errors.append(error)

    # -- the document

    def compose(self) -> yaml.Node | None:
        """The document's root node; None for an empty document or (collecting) a syntax error."""
        error: FlowError
        try:
            self.loader = LOADER(self.source)
            try:
                return self.loader.get_single_node()
            finally:
                self.loader.dispose()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = self.where_mark(mark.line, mark.column) if mark is not None else Where(self.file, 1, 1)
            error = FlowError(f"YAML syntax: {exc.problem or exc.context}", where)
        except yaml.YAMLError as exc:
            error = FlowError(f"YAML syntax: {exc}", Where(self.file, 1, 1))
        except RecursionError:
            error = FlowError("YAML nested too deeply", Where(self.file, 1, 1))
        self.add(error)
        return None

    def count_alias(self, node: yaml.Node) -> None:
        """Count a list or mapping read again through an alias; too many is an error."""
        if id(node) not in self._seen:
            self._seen.add(id(node))
            return
        self._repeats += 1
        if self._repeats > MAX_ALIAS_EXPANSION:
            # Even a collecting reader stops here: going on is the attack.
            raise self.error(f"{self.kind} too large: YAML aliases expand to more than {MAX_ALIAS_EXPANSION} "
                             "further lists and mappings", node)

    # -- structure

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...],
                required: tuple[str, ...] = ()) -> Pairs | None:
        """The keys of a mapping node; unknown, repeated, merge and missing keys are errors."""
        if not isinstance(node, yaml.MappingNode):
            self.report(f"{what} must be a mapping, not a {node_kind(node)}", node)
            return None
        self.count_alias(node)
        out: Pairs = {}
        for key_node, val_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.report(f"a key of {what} must be a name, not a {node_kind(key_node)}", key_node)
                continue
            key = str(key_node.value)
            if key_node.tag == MERGE:
                self.report(f"YAML merge keys ('<<') are not supported in {what}", key_node)
                continue
            if key in out:
                first = self.where(out[key][0])
                self.report(f"key {show(key)} given twice in {what} (first at line {first.line})", key_node)
                continue
            if key not in allowed:
                hint = did_you_mean(key, allowed) or f"keys of {what}: {', '.join(allowed)}"
                self.report(f"unknown key {show(key)} in {what}", key_node, hint)
                continue
            out[key] = (key_node, val_node)
        for key in required:
            if key not in out:
                self.report(f"{what} has no {key!r}", node)
        return out

    def items(self, node: yaml.Node, what: str) -> list[yaml.Node] | None:
        if isinstance(node, yaml.SequenceNode):
            self.count_alias(node)
            return list(node.value)
        self.report(f"{what} must be a list, not a {node_kind(node)}", node)
        return None

    def list_or_one(self, node: yaml.Node) -> list[yaml.Node]:
        """A list's items, or the node alone (``load: x`` as well as ``load: [x, y]``)."""
        if isinstance(node, yaml.SequenceNode):
            self.count_alias(node)
            return list(node.value)
        return [node]

    @staticmethod
    def is_null(node: yaml.Node) -> bool:
        return isinstance(node, yaml.ScalarNode) and node.tag == NULL

    def scalar(self, node: yaml.Node, what: str) -> Any:
        """A scalar's Python value (int, float, bool, None or str); None after a collected error."""
        if not isinstance(node, yaml.ScalarNode):
            self.report(f"{what} must be a single value, not a {node_kind(node)}", node)
            return None
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError) as exc:
            self.report(f"bad {what}: {exc}", node)
            return None
        if not isinstance(value, _SCALARS):
            self.report(f"{what} must be a number, string, boolean or null, not {type(value).__name__}", node)
            return None
        return value
