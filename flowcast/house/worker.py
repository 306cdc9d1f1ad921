"""One house process of an estate: ``python -m flowcast.cli.worker LAYOUT --yard YARD`` (this module, with the export's
recorder handed in from above: ``python -m flowcast.house.worker`` runs the same house without one).

The supervisor starts this; its stdout and stderr go to the house's log,
and its stdin is a socket the supervisor writes the hand-off into (its
plan and lane keys, handoff.py) once this process, non-dumpable, asks for
it (childpipe.py).  LAYOUT and YARD on the command line only say, in ``ps``,
which house this is: the plan comes from the hand-off, and they must agree
with it.  Run by hand without a hand-off it refuses to start.

``--last-words PATH``: when the house exits with an error it first writes
there, in a line or a few, why (:func:`describe_failure`): the located flow
errors, the port it could not bind, the behaviour that raised and where.
Its supervisor reads that after reaping it, prints it on its console and
keeps it in its status file -- the reason used to be only in the house's
log, under a traceback, while the console said "exited with code 1".
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any

#: At most this many of a flow's errors are named in the last words (the log has them all).
MAX_ERRORS_SAID = 5


def main(argv: list[str] | None = None, record: Any = None) -> int:
    from flowcast.house.childpipe import signal_ready
    from flowcast.house.handoff import not_dumpable

    not_dumpable()  # first: the hand-off about to come on stdin holds this house's lane keys
    signal_ready(0)  # only now does the supervisor write it
    from flowcast.house.estate import stop_on_signals_while_starting

    stop_on_signals_while_starting()  # from here a stop runs whatever closers exist
    parser = argparse.ArgumentParser(prog="flowcast.house.worker")
    parser.add_argument("layout")
    parser.add_argument("--yard", required=True)
    parser.add_argument("--last-words", metavar="PATH", help="where to write why, when exiting with an error")
    args = parser.parse_args(argv)

    def fatal(text: str) -> None:
        if args.last_words:
            from flowcast.house.childproc import write_last_words

            write_last_words(args.last_words, text)

    # stdout is the house's log file: line by line, or a flow's prints sit
    # in a buffer until the house exits.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from flowcast.house.logrotate import install

    install()  # YARD.log kept to 10 MiB and three old files: a house that runs for months must not fill the disk
    from flowcast.flow.errors import FlowError
    from flowcast.house.estate import StartInterrupted, run_house
    from flowcast.house.handoff import read_handoff

    try:
        try:
            handoff = read_handoff(sys.stdin.buffer)
        except ValueError as error:
            return _refuse(f"flowcast.house.worker: {error}", fatal)
        if handoff.yard != args.yard:
            return _refuse(f"flowcast.house.worker: hand-off is for yard {handoff.yard!r}, not {args.yard!r}", fatal)
        return run_house(handoff, fatal=fatal, record=record)
    except FlowError as errors:
        print(errors, file=sys.stderr)
        fatal(describe_failure(errors))
        return 2
    except StartInterrupted:
        return 0  # stopped before there was anything to close
    except Exception as error:  # a behaviour or the house itself raised: the traceback still goes to the log
        fatal(describe_failure(error))
        raise


def _refuse(text: str, fatal) -> int:  # type: ignore[no-untyped-def]
    print(text, file=sys.stderr)
    fatal(text)
    return 2


def describe_failure(error: BaseException) -> str:
    """Why a house died, short and located: what its supervisor prints.

    A flow's errors: the first line of each (``file:line:col: error: ...``),
    without the excerpt and hints the log has.  A micro-thread that failed:
    what it raised (a behaviour's failure names its flow line) and which
    thread.  flowcast's own errors are written to be read as they are; any
    other exception is named with the innermost source line that raised it.
    """
    from flowcast.errors import Error
    from flowcast.flow.errors import FlowError, FlowErrors
    from flowcast.runtime import MicroThreadError

    if isinstance(error, FlowError):
        errors = error.errors if isinstance(error, FlowErrors) else [error]
        said = [(str(e).splitlines() or ["error"])[0] for e in errors[:MAX_ERRORS_SAID]]
        if len(errors) > MAX_ERRORS_SAID:
            said.append(f"... and {len(errors) - MAX_ERRORS_SAID} more errors (see the house log)")
        return "\n".join(said)
    if isinstance(error, MicroThreadError):
        cause = error.__cause__ or error.error
        return f"{describe_failure(cause)} (in micro-thread {error.thread.name!r})"
    if isinstance(error, Error):
        return str(error)
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        return f"{frames[-1].filename}:{frames[-1].lineno}: {text}"
    return text


if __name__ == "__main__":
    sys.exit(main())
