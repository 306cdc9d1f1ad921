"""``flowcast convert IN OUT``: rewrite a flow as YAML.

The input is read by :func:`load_flow` (FloScript or YAML), so every error
is reported just as ``flowcast check`` would; the output is written only
when the whole flow loaded, and is checked to read back to the same model
before it replaces anything.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowcast.flow.errors import FlowError
from flowcast.flow.loader import YAML_SUFFIXES, load_flow
from flowcast.flow.yamlflow import dump_yaml, parse_yaml
from flowcast.runtime.durable import atomic_write


def convert(src: str | Path, dst: str | Path) -> None:
    """Load ``src`` and write it to ``dst`` as YAML; raise :class:`FlowError` on failure."""
    out = Path(dst)
    if out.suffix.lower() not in YAML_SUFFIXES:
        raise FlowError(f"{out}: can only write YAML flows (.yaml or .yml)")
    spec = load_flow(src)
    text = dump_yaml(spec)
    again = parse_yaml(text, str(out))
    if again.houses != spec.houses:  # a bug, not a user error: refuse to write a flow that means something else
        raise FlowError(f"internal error: the YAML written for {src} does not read back the same")
    header = f"# flowcast flow converted from {Path(src).name}\n"
    _write_atomic(out, header + text)


def _write_atomic(path: Path, text: str) -> None:
    atomic_write(path, text.encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flowcast convert",
                                     description="Convert a flow (.flo or .yaml) to YAML.")
    parser.add_argument("input", help="flow to read (.flo, .yaml or .yml)")
    parser.add_argument("output", help="YAML file to write (.yaml or .yml)")
    args = parser.parse_args(argv)
    try:
        convert(args.input, args.output)
    except FlowError as exc:
        print(exc, file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
