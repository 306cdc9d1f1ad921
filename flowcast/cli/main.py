"""The ``flowcast`` command.

Each sub-command lives in the layer it belongs to and exposes
``main(argv) -> int``; this module only dispatches, so ``flowcast --help``
stays fast and a broken optional layer cannot stop the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from flowcast.errors import DamagedFile, damaged_cause
from flowcast.flow.errors import FlowError
from flowcast.runtime import CallbackError, MicroThreadError

#: sub-command -> (module, help).  Modules are imported only when used.
DELEGATED = {
    "demo": ("flowcast.house.demo", "run the ping-pong example between two estates on loopback"),
    "convert": ("flowcast.flow.convert", "convert a flow between .flo and YAML"),
    "keys": ("flowcast.transport.keycli", "manage estate keys and accepted remotes"),
    "chaos": ("flowcast.transport.chaos", "run a lossy UDP relay between two estates"),
    "export": ("flowcast.export.collect", "collect and compact share-history Parquet segments"),
    "spark": ("flowcast.export.sparkcli", "run a Spark analysis job over exported segments"),
    "status": ("flowcast.house.status", "show a running estate: houses, remotes, routes, rates, denials"),
    "cast": ("flowcast.house.castcli", "an estate's CAST: ls (leases, cursors, lag), stats, tail PATTERN, accept-loss"),
    "causal": ("flowcast.house.causalcli", "causal mailboxes: keygen NAME --dir DIR, status LAYOUT"),
}


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flowcast run", description="Run a flow script's house, or a whole estate from its layout (houses/ESTATE.yaml)."
    )
    p.add_argument("flow", type=Path, help="a .flo or .yaml flow script, or an estate layout")
    p.add_argument("--houses", type=int, default=None, help="estate layouts: how many house processes (default: one per core)")
    p.add_argument("--house", help="which house of the flow (default: the first)")
    p.add_argument("--period", type=float, default=None,
                   help="skedder tick in seconds (default 0.125; for a layout, its 'period:' if it has one)")
    p.add_argument("--until", type=float, default=None, help="stop after this many seconds of flow time")
    p.add_argument("--virtual", action="store_true", help="simulated time: run as fast as possible, repeatably")
    p.add_argument("--trace", action="store_true", help="print each frame transition as 'T FRAMER FROM -> TO'")
    p.add_argument(
        "--export", type=Path, metavar="DIR",
        help="record logged shares and message events as Parquet segments under DIR (layouts: every house; overrides 'export:')",
    )
    p.add_argument("--estate", default=None, help="flow scripts: estate name written with exported events (default: local)")
    return p


def _load(path: Path):
    from flowcast.flow.loader import load_flow

    if not path.is_file():
        raise FlowError(f"no such flow file: {path}")
    return load_flow(path)


def cmd_run(argv: Sequence[str]) -> int:
    from flowcast.house.house import DEFAULT_PERIOD, load_house

    args = _run_parser().parse_args(argv)
    if args.period is not None and not 0 < args.period <= 60:
        print("flowcast run: --period must be a number of seconds in (0, 60]", file=sys.stderr)
        return 2
    if not args.flow.is_file():
        raise FlowError(f"no such flow file: {args.flow}")
    from flowcast.house.layout import is_layout

    if is_layout(args.flow):
        from flowcast.house.estate import launch

        if args.houses is not None and args.houses < 1:
            print("flowcast run: --houses must be at least 1", file=sys.stderr)
            return 2
        flow_only = [name for name, given in (("--house", args.house), ("--until", args.until), ("--virtual", args.virtual),
                     ("--trace", args.trace), ("--estate", args.estate)) if given]
        if flow_only:
            said = f"flowcast run: {', '.join(flow_only)} apply to a flow script, not an estate layout"
            if args.estate is not None:
                said += " (an estate's name is its layout's 'estate:')"
            print(said, file=sys.stderr)
            return 2
        return launch(args.flow, houses=args.houses, export=args.export, period=args.period)
    house = load_house(
        args.flow,
        args.house,
        freeze=True,  # this process is the house: its structure lives as long as it does
        period=args.period if args.period is not None else DEFAULT_PERIOD,
        virtual=args.virtual,
        on_transition=(lambda t: print(t, flush=True)) if args.trace else None,
        out=lambda line: print(line, flush=True),
    )
    recorder = None
    if args.export is not None:
        from flowcast.export.recorder import Recorder

        try:
            recorder = Recorder.for_house(
                house, args.export, estate=args.estate or "local", out=lambda line: print(line, file=sys.stderr)
            )
        except (OSError, ValueError) as error:  # an unwritable directory, a hostile estate name
            print(f"flowcast run: cannot export to {args.export}: {error}", file=sys.stderr)
            return 2
        from flowcast.export.estatehouse import follow

        follow(house, recorder)  # segments flushed each tick; routed, CAST and causal events once the house has them
    try:
        from flowcast.house.layoutspec import DEFAULT_DRAIN

        house.run(args.until, handle_signals=True, drain=DEFAULT_DRAIN)  # a stop drains what the flow's stacks carry
    finally:
        if recorder is not None:
            published = recorder.close()
            print(f"flowcast: exported {len(published)} segment(s) to {args.export}", file=sys.stderr)
    if house.stopped_by is not None:
        print(f"flowcast: stopped by {house.stopped_by.name} at t={house.skedder.stamp:g}", file=sys.stderr)
    return 0


def cmd_check(argv: Sequence[str]) -> int:
    from flowcast.flow.builder import build_house
    from flowcast.flow.skedder import Stamp

    p = argparse.ArgumentParser(prog="flowcast check", description="Parse and resolve a flow; run nothing.")
    p.add_argument("flow", type=Path)
    args = p.parse_args(argv)
    spec = _load(args.flow)
    framers = 0
    for house in spec.houses:
        built = build_house(house, stamp=Stamp(), out=lambda line: None, base=args.flow.resolve().parent)
        framers += len(built.framers)
    print(f"{args.flow}: ok ({len(spec.houses)} house(s), {framers} framer(s))")
    return 0


def version() -> str:
    """The installed distribution's version, so the wheel a user runs answers for itself;
    ``flowcast.__version__`` only when there is no metadata (the tree on sys.path, uninstalled)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("flowcast")
    except PackageNotFoundError:
        import flowcast

        return flowcast.__version__


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"run": (cmd_run, "run a flow"), "check": (cmd_check, "parse and resolve a flow")}
    if argv[:1] in (["--version"], ["-V"]):
        print(f"flowcast {version()}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: flowcast COMMAND [args]\n       flowcast --version\n\ncommands:")
        for name, (_, text) in commands.items():
            print(f"  {name:<9} {text}")
        for name, (_, text) in DELEGATED.items():
            print(f"  {name:<9} {text}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    try:
        if name in commands:
            return commands[name][0](rest)
        if name in DELEGATED:
            module = importlib.import_module(DELEGATED[name][0])
            return int(module.main(rest) or 0)
    except DamagedFile as error:  # a store refused and left as it was: one line, the file named
        print(f"flowcast {name}: {error}", file=sys.stderr)
        return 3
    except FlowError as error:
        damaged = damaged_cause(error)
        if damaged is not None:  # opened while the flow was built: the file is the news, not the flow
            print(f"flowcast {name}: {damaged}", file=sys.stderr)
            return 3
        print(error, file=sys.stderr)
        return 1
    except LookupError as error:  # e.g. --house naming no house of the flow
        print(f"flowcast {name}: {error.args[0] if error.args else error}", file=sys.stderr)
        return 2
    except MicroThreadError as error:
        damaged = damaged_cause(error)
        if damaged is not None:
            print(f"flowcast {name}: {damaged}", file=sys.stderr)
            return 3
        cause = error.__cause__ or error
        print(f"flowcast: {error.thread.name} stopped: {cause}", file=sys.stderr)
        return 1
    except CallbackError as error:  # it names the callback (and its fd) and what it raised
        print(f"flowcast: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # a behaviour's failure, say, wrapping a store it could not open
        damaged = damaged_cause(error)
        if damaged is None:
            raise
        print(f"flowcast {name}: {damaged}", file=sys.stderr)
        return 3
    from flowcast.flow.errors import did_you_mean

    hint = did_you_mean(name, [*commands, *DELEGATED])
    print(f"flowcast: unknown command {name!r}{'; ' + hint if hint else ''}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
