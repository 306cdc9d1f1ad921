"""``flowcast export``: collect houses' segments and compact them.

Houses write many modest segments (bounded by size and age) because a small
open segment is what bounds crash loss.  Readers pay per file (about 2 ms
each in Spark), so finished days are merged into one file per day and house.

Two modes:

* ``flowcast export DIR...`` compacts in place: each finished day's
  segments of a house become one file, and the originals are removed only
  after it is published.  Today is left alone unless ``--include-today``:
  a live reader (the streaming job) would count a compacted copy of files
  it has already read a second time.
* ``flowcast export DIR... --out OUT`` collects: every selected day and
  house becomes one file under OUT, sources untouched.  Rerunning replaces
  OUT's files atomically.

Everything is checked before anything is written: a segment of a newer
schema version stops the run with a clear message (exit 2); a corrupt or
truncated segment is counted, named and left where it is.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

from flowcast.export.layout import inprogress, partition_dir, publish, segment_files
from flowcast.export.progress import Progress
from flowcast.export.reader import CorruptSegmentError, SegmentInfo, inspect, read_segment
from flowcast.export.schema import DICTIONARY_COLUMNS, SCHEMA, SchemaVersionError
from flowcast.export.segments import Recovery, SegmentWriter, WriterBusyError

__all__ = ["CollectReport", "collect", "main", "recover"]


@dataclass
class CollectReport:
    segments: int = 0  # readable segments selected
    events: int = 0
    written: list[Path] = field(default_factory=list)
    removed: int = 0
    skipped: list[str] = field(default_factory=list)  # one message per corrupt file

    def summary(self) -> str:
        line = (
            f"export: {self.segments} segment(s), {self.events} event(s) -> "
            f"{len(self.written)} file(s) written, {self.removed} segment(s) merged away"
        )
        if self.skipped:
            line += f"; skipped {len(self.skipped)} corrupt file(s)"
        return line


def compact_name(day: date, house: str) -> str:
    return f"{house}.{day.isoformat()}.compact.parquet"


def collect(
    dirs: Sequence[Path],
    out: Path | None = None,
    *,
    since: date | None = None,
    until: date | None = None,
    include_today: bool = False,
    progress: bool | None = None,
    today: date | None = None,
) -> CollectReport:
    """Compact in place (``out`` None) or collect into ``out``; see the module docstring."""
    today = today or datetime.now(timezone.utc).date()
    report = CollectReport()
    found = [(Path(d), *item) for d in dirs for item in segment_files(Path(d), since, until)]
    if out is None and not include_today:
        found = [item for item in found if item[1] < today]
    checking = Progress(len(found), "checking", enabled=progress)
    groups: dict[tuple[Path, date, str], list[SegmentInfo]] = {}
    for root, day, house, path in found:
        try:
            info = inspect(path)  # SchemaVersionError propagates: refuse, write nothing
        except CorruptSegmentError as error:
            report.skipped.append(str(error))
        else:
            groups.setdefault((Path(out) if out is not None else root, day, house), []).append(info)
        checking.advance()
    checking.close()
    report.segments = sum(len(g) for g in groups.values())
    writing = Progress(report.segments, "compacting", enabled=progress)
    for (base, day, house), infos in sorted(groups.items()):
        if out is None:
            if len(infos) == 1 and infos[0].path.name == compact_name(day, house):
                writing.advance()
                report.events += infos[0].rows
                continue  # already compact
        final = partition_dir(base, day, house) / compact_name(day, house)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = inprogress(final)
        rows = 0
        merged = []  # only these may be removed: a file found corrupt here stays, named
        with pq.ParquetWriter(tmp, SCHEMA, compression="zstd", use_dictionary=DICTIONARY_COLUMNS) as writer:
            for info in infos:
                try:
                    table = read_segment(info.path)
                except CorruptSegmentError as error:
                    report.skipped.append(str(error))
                    continue
                writer.write_table(table)
                merged.append(info.path)
                rows += table.num_rows
                writing.advance()
        publish(tmp, final)
        report.events += rows
        report.written.append(final)
        if out is None:
            for path in merged:
                if path != final:
                    path.unlink(missing_ok=True)
                    report.removed += 1
    writing.close()
    return report


def recover(dirs: Sequence[Path]) -> list[tuple[str, Recovery]]:
    """Publish the open segments houses left behind (only for houses that are not running).

    A house recovers its own journal when it starts again; this is for a
    house that will not (a machine retired, a flow removed).
    """
    done = []
    for root in dirs:
        journals = Path(root) / ".journal"
        if not journals.is_dir():
            continue
        for jdir in sorted(journals.iterdir()):
            estate, _, house = jdir.name.partition(".")
            if not jdir.is_dir() or not any(jdir.iterdir()):
                continue
            try:
                writer = SegmentWriter(root, estate, house, epoch=0.0)
            except WriterBusyError:
                continue  # that house is running: its journal is live, not left behind
            writer.close()
            done.append((jdir.name, writer.recovery))
    return done


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (want YYYY-MM-DD): {text!r}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flowcast export",
        description="Collect and compact houses' Parquet event segments (one file per day and house).",
    )
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="export directories houses write to")
    p.add_argument("--out", type=Path, help="collect into this directory instead of compacting in place")
    p.add_argument("--since", type=_day, help="first day to include (YYYY-MM-DD, UTC)")
    p.add_argument("--until", type=_day, help="last day to include (YYYY-MM-DD, UTC)")
    p.add_argument("--include-today", action="store_true", help="also compact today's segments in place")
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    bar.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")
    p.add_argument(
        "--recover",
        action="store_true",
        help="first publish open segments left by houses that crashed and will not restart (never for running houses)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"flowcast export: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.recover:
        for name, recovery in recover(args.dirs):
            print(f"flowcast export: {name}: recovered {recovery.recovered} event(s), lost {recovery.lost}")
    try:
        report = collect(
            args.dirs, args.out, since=args.since, until=args.until,
            include_today=args.include_today, progress=args.progress,
        )
    except SchemaVersionError as error:
        print(f"flowcast export: {error}", file=sys.stderr)
        return 2
    for message in report.skipped:
        print(f"flowcast export: skipped {message}", file=sys.stderr)
    print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
