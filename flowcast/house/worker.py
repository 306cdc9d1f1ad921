"""One house process of an estate: ``python -m flowcast.house.worker LAYOUT --yard YARD``.

The supervisor starts this; its stdout and stderr go to the house's log,
and its stdin is a socket the supervisor writes the hand-off into (its
plan and lane keys, handoff.py) once this process, non-dumpable, asks for
it (childpipe.py).  LAYOUT and YARD on the command line only say, in ``ps``,
which house this is: the plan comes from the hand-off, and they must agree
with it.  Run by hand without a hand-off it refuses to start.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from flowcast.house.childpipe import signal_ready
    from flowcast.house.handoff import not_dumpable

    not_dumpable()  # first: the hand-off about to come on stdin holds this house's lane keys
    signal_ready(0)  # only now does the supervisor write it
    from flowcast.house.estate import stop_on_signals_while_starting

    stop_on_signals_while_starting()  # from here a stop runs whatever closers exist
    parser = argparse.ArgumentParser(prog="flowcast.house.worker")
    parser.add_argument("layout")
    parser.add_argument("--yard", required=True)
    args = parser.parse_args(argv)
    # stdout is the house's log file: line by line, or a flow's prints sit
    # in a buffer until the house exits.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from flowcast.flow.errors import FlowErrors
    from flowcast.house.estate import StartInterrupted, run_house
    from flowcast.house.handoff import read_handoff

    try:
        try:
            handoff = read_handoff(sys.stdin.buffer)
        except ValueError as error:
            print(f"flowcast.house.worker: {error}", file=sys.stderr)
            return 2
        if handoff.yard != args.yard:
            print(f"flowcast.house.worker: hand-off is for yard {handoff.yard!r}, not {args.yard!r}", file=sys.stderr)
            return 2
        return run_house(handoff)
    except FlowErrors as errors:
        print(errors, file=sys.stderr)
        return 2
    except StartInterrupted:
        return 0  # stopped before there was anything to close


if __name__ == "__main__":
    sys.exit(main())
