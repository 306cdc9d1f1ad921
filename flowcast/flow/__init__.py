"""The flow layer: flow scripts (.flo and YAML), their model, the builder, framers.

Users import from here, not from the modules below it.  Names resolve on
first use (PEP 562) rather than at import: every module of the layer runs
this file first, and an eager import of the builder from here would pull
the behaving and store layers into a parser that needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowcast.runtime.lazy import exports

_WHERE = {
    "BehaviourFailure": "builder",
    "BuiltHouse": "builder",
    "build_house": "builder",
    "FlowError": "errors",
    "FlowErrors": "errors",
    "Frame": "framer",
    "Framer": "framer",
    "Transition": "framer",
    "FlowSpec": "spec",
    "Where": "errors",
    "Skedder": "skedder",
    "Stamp": "skedder",
    "load_flow": "loader",
    "load_flo": "floscript",
    "parse_flo": "floscript",
    "dump_yaml": "yamlflow",
    "load_yaml": "yamlflow",
    "parse_yaml": "yamlflow",
    "convert": "convert",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = exports(__name__, _WHERE, globals())


if TYPE_CHECKING:
    from flowcast.flow.builder import BehaviourFailure, BuiltHouse, build_house
    from flowcast.flow.convert import convert
    from flowcast.flow.errors import FlowError, FlowErrors, Where
    from flowcast.flow.floscript import load_flo, parse_flo
    from flowcast.flow.framer import Frame, Framer, Transition
    from flowcast.flow.loader import load_flow
    from flowcast.flow.skedder import Skedder, Stamp
    from flowcast.flow.spec import FlowSpec
    from flowcast.flow.yamlflow import dump_yaml, load_yaml, parse_yaml
