"""One house process of an estate: ``python -m flowcast.house.worker LAYOUT --yard YARD``.

The supervisor starts this; its stdout and stderr go to the house's log.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flowcast.house.worker")
    parser.add_argument("layout")
    parser.add_argument("--yard", required=True)
    parser.add_argument("--houses", type=int, default=None)
    args = parser.parse_args(argv)
    # stdout is the house's log file: line by line, or a flow's prints sit
    # in a buffer until the house exits.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from flowcast.flow.errors import FlowErrors
    from flowcast.house.estate import run_house

    try:
        return run_house(args.layout, args.yard, houses=args.houses)
    except FlowErrors as errors:
        print(errors, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
