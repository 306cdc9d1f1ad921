"""Load a flow file by its extension: ``.flo`` FloScript, ``.yaml``/``.yml`` YAML."""

from __future__ import annotations

from pathlib import Path

from flowcast.flow.errors import FlowError
from flowcast.flow.floscript import load_flo
from flowcast.flow.spec import FlowSpec
from flowcast.flow.yamlflow import load_yaml

FLO_SUFFIXES = (".flo",)
YAML_SUFFIXES = (".yaml", ".yml")


def load_flow(path: str | Path) -> FlowSpec:
    """The flow in ``path``; :class:`FlowError` for an unknown kind of file or any error in it."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in FLO_SUFFIXES:
        return load_flo(p)
    if suffix in YAML_SUFFIXES:
        return load_yaml(p)
    raise FlowError(f"{p}: unknown kind of flow file {suffix or '(no extension)'!r}; "
                    f"expected {', '.join(FLO_SUFFIXES + YAML_SUFFIXES)}")
