"""The public surface: what flowcast, flowcast.flow and flowcast.house export.

Users import from these three; the names must resolve, and resolving them
lazily must keep a light import light (a layout reader does not need the
transport stack).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import flowcast

PUBLIC = ["flowcast", "flowcast.flow", "flowcast.house"]


@pytest.mark.parametrize("package", PUBLIC)
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, package
    for name in module.__all__:
        value = getattr(module, name)
        assert value is not None, (package, name)
        assert name in dir(module)
        if hasattr(value, "__module__") and not isinstance(value, str):
            # The exported object is the one defined inside the package.
            assert value.__module__.startswith(package), (package, name, value.__module__)


@pytest.mark.parametrize("package", ["flowcast.flow", "flowcast.house"])
def test_unknown_name_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_exports_are_the_deep_objects() -> None:
    from flowcast.flow import build_house, load_flow
    from flowcast.flow.builder import build_house as deep_build
    from flowcast.flow.loader import load_flow as deep_load
    from flowcast.house import load_layout
    from flowcast.house.layout import load_layout as deep_layout

    assert (build_house, load_flow, load_layout) == (deep_build, deep_load, deep_layout)


def test_reading_a_layout_does_not_load_the_stacks() -> None:
    code = (
        "import sys\n"
        "from flowcast.house import load_layout\n"
        "from flowcast.flow import parse_flo\n"
        "heavy = [m for m in ('flowcast.transport.road', 'flowcast.routing.router', 'flowcast.flow.builder') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_root_exports_the_error_root() -> None:
    assert issubclass(flowcast.ClosedError, flowcast.Error)
    assert set(flowcast.__all__) >= {"Error", "ClosedError", "__version__"}
