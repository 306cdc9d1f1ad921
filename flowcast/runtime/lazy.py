"""Package faces whose names resolve on first use (PEP 562).

A package face (``flowcast.flow``, ``flowcast.house``) lists what users
import, but importing every module behind it up front would make reading a
layout or parsing a flow script pull in the transport and routing stacks.
``exports`` gives a face the module-level ``__getattr__`` and ``__dir__``
that import a name's module only when the name is first asked for, then
keep it in the package's globals so later reads cost a dict look-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["exports"]


def exports(package: str, where: Mapping[str, str], namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``where`` maps each name to its module."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
