"""What every flowcast Spark job shares: the session, the input, the output.

The jobs (``spark/*.py``) are thin: a ``compute`` function from an events
DataFrame to result DataFrames, and a ``plot`` step.  Everything that must
be the same for all of them lives here, so that ``spark-submit
spark/JOB.py`` and ``flowcast spark JOB`` behave identically, and a cluster
is only a ``--master`` URL away: nothing here depends on the driver being
local except the loopback pinning in :mod:`flowcast.export.sparkenv`.

Input is checked before Spark sees it (for local directories): each segment's
footer is read with pyarrow, corrupt files are counted and named in the
report, and a segment of a newer schema version stops the job with a clear
message -- Spark would otherwise either crash on the first bad file or, with
``ignoreCorruptFiles``, drop it without saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowcast.export.layout import segment_files
from flowcast.export.reader import CorruptSegmentError, inspect
from flowcast.export.schema import SCHEMA_VERSION, SchemaVersionError
from flowcast.export.sparkenv import JavaMissing, is_local, prepare

__all__ = [
    "InputReport",
    "JOBS_DIR",
    "JobError",
    "job_main",
    "load_events",
    "session",
    "spark_schema",
    "write_table",
]

JOBS_DIR = Path(__file__).resolve().parent
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DEFAULT_OUTPUT = Path("out") / "spark"
DEFAULT_LOCAL_DIR = Path("out") / "spark-local"
#: Columns the batch jobs use (share names and fields are for other analyses).
JOB_COLUMNS = ("ts", "estate", "house", "kind", "share", "fields", "msg_id", "src", "dst", "size", "latency", "lag", "remote", "detail",
               "seq", "upto", "count", "sub", "name", "topic", "publisher")


class JobError(RuntimeError):
    """Input a job refuses (future schema version, nothing to read)."""


def spark_schema():
    """The export schema as Spark sees it (kept in step with flowcast.export.schema)."""
    from pyspark.sql import types as T

    from flowcast.export.schema import SCHEMA

    mapping = {
        "int16": T.ShortType(),
        "int32": T.IntegerType(),
        "int64": T.LongType(),
        "double": T.DoubleType(),
        "string": T.StringType(),
        "timestamp[us, tz=UTC]": T.TimestampType(),
    }
    return T.StructType([T.StructField(f.name, mapping[str(f.type)], f.nullable) for f in SCHEMA])


def session(
    master: str | None = "local[*]",
    app: str = "flowcast",
    *,
    local_dir: Path | str | None = None,
    shuffle_partitions: int | None = None,
    extra: dict[str, str] | None = None,
):
    """A SparkSession set up for flowcast jobs (``master`` None: whatever spark-submit was given).

    Loopback pinning, the fast JVM options and the scratch folder apply to
    local masters only: on a cluster they would strand the driver on
    127.0.0.1 and point executors at a folder of the submitting machine.
    """
    from_submit = master is None
    if from_submit:
        from pyspark import SparkConf

        master = SparkConf().get("spark.master", "local[*]")  # spark-submit's JVM is already up
    local = is_local(master)
    if not from_submit:
        prepare(master)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if not from_submit:
        builder = builder.master(master)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if local or local_dir is not None:
        scratch = Path(local_dir) if local_dir is not None else DEFAULT_LOCAL_DIR
        scratch.mkdir(parents=True, exist_ok=True)
        conf["spark.local.dir"] = str(scratch.resolve())
    if local:
        # Short local runs are dominated by JVM warm-up: C1 only and the serial GC
        # start faster.  Cluster executors run long enough for the full JIT to pay.
        conf["spark.driver.extraJavaOptions"] = FAST_JVM
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if shuffle_partitions is None and local:
        shuffle_partitions = 2 * (os.cpu_count() or 1)  # 200 tiny tasks per shuffle dominate small local jobs
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    conf.update(extra or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class InputReport:
    """What a job read: file and event counts, and the files it skipped and why."""

    files: int = 0
    events: int | None = None
    skipped: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.files, "events": self.events, "skipped": self.skipped}


def _local_path(input_: str) -> Path | None:
    if "://" not in input_:
        return Path(input_)
    if input_.startswith("file://"):
        return Path(input_[len("file://") :])
    return None


def load_events(spark, input_: str | Path) -> tuple[Any, InputReport]:
    """The events under ``input_`` as a DataFrame with a ``route`` column, and what was read.

    Local directories are pre-checked file by file (see the module
    docstring); other URLs (HDFS, S3) are read as given and their rows'
    ``schema_version`` is checked instead.
    """
    from pyspark.sql import functions as F

    report = InputReport()
    local = _local_path(str(input_))
    reader = spark.read.schema(spark_schema())
    if local is not None:
        if not local.is_dir():
            raise JobError(f"input {local} is not a directory")
        good: list[str] = []
        report.events = 0
        for _, _, path in segment_files(local):
            try:
                report.events += inspect(path).rows
            except CorruptSegmentError as error:
                report.skipped.append(str(error))
                continue
            except SchemaVersionError as error:
                raise JobError(str(error)) from None
            good.append(str(path.resolve()))
        report.files = len(good)
        if good:
            df = reader.parquet(*good)
        else:
            df = spark.createDataFrame([], spark_schema())
    else:
        df = reader.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.parquet").parquet(str(input_))
        newest = df.agg(F.max("schema_version")).first()[0]
        if newest is not None and newest > SCHEMA_VERSION:
            raise JobError(
                f"{input_}: export schema version {newest} is newer than this flowcast reads "
                f"(up to {SCHEMA_VERSION}); upgrade flowcast to read it"
            )
    return with_route(df), report


def with_route(df):
    """Add ``route`` ("SRC -> DST"), the key every per-route figure groups by."""
    from pyspark.sql import functions as F

    return df.withColumn("route", F.concat_ws(" -> ", F.col("src"), F.col("dst")))


def ensure_columns(df, columns: dict[str, str]):
    """``df`` with any of ``columns`` (name -> Spark SQL type) it lacks added as nulls.

    Jobs must run on data from before a column existed (older writers,
    tables assembled by hand), where absence means "not recorded".
    """
    from pyspark.sql import functions as F

    for name, type_ in columns.items():
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(type_))
    return df


def write_table(df, output: Path, name: str) -> Path:
    """Write a (small) result table as Parquet under ``output/tables/name``."""
    path = output / "tables" / name
    df.coalesce(1).write.mode("overwrite").parquet(str(path.resolve()))
    return path


def read_table(output: Path, name: str):
    """A result table back as pandas (tables are small), or None if absent."""
    import pyarrow.parquet as pq

    path = output / "tables" / name
    if not path.is_dir():
        return None
    return pq.read_table(path).to_pandas()


@dataclass
class Job:
    """One job: computes tables from events, then draws what it computed."""

    name: str
    compute: Callable[[Any], dict[str, Any]]  # events DataFrame -> {table name: DataFrame}
    plot: Callable[[Path], list[str]] | None = None  # output dir -> notes for the report


def run_jobs(spark, jobs: Sequence[Job], input_: str | Path, output: Path) -> dict[str, Any]:
    """Run ``jobs`` over one load of the input; write tables, plots and the HTML report."""
    import report  # spark/report.py, next to this file

    started = time.perf_counter()
    events, info = load_events(spark, input_)
    # Only what the jobs read.  Not cached: Parquet with column pruning rescans
    # faster than Spark builds an in-memory copy of a million rows.
    events = events.select(*JOB_COLUMNS)
    if info.events is None:
        info.events = events.count()
    output.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"input": str(input_), **info.as_dict(), "jobs": {}}
    for job in jobs:
        t0 = time.perf_counter()
        tables = job.compute(events)
        rows = {}
        for name, df in tables.items():
            path = write_table(df, output, name)
            rows[name] = _rows(path)
        notes = job.plot(output) if job.plot else []
        summary["jobs"][job.name] = {"tables": rows, "seconds": round(time.perf_counter() - t0, 3), "notes": notes}
    summary["seconds"] = round(time.perf_counter() - started, 3)
    runs = _merge_summary(output, summary)
    report.write_index(output, runs)
    return summary


def _rows(path: Path) -> int:
    """Rows of a written table, from the footers (no Spark job for a count)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in path.glob("*.parquet"))


def _merge_summary(output: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Keep the latest summary per job in ``output/summary.json`` (jobs may run one by one)."""
    path = output / "summary.json"
    try:
        merged = json.loads(path.read_text())
    except (OSError, ValueError):
        merged = {"jobs": {}}
    merged.update({k: v for k, v in summary.items() if k != "jobs"})
    merged.setdefault("jobs", {}).update(summary["jobs"])
    tmp = path.with_name(".summary.json.inprogress")
    tmp.write_text(json.dumps(merged, indent=2))
    os.replace(tmp, path)
    return merged


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--input", required=True, help="export directory (or a cluster URL: hdfs://, s3a://)")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"where tables and the report go (default {DEFAULT_OUTPUT})")
    p.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default local[*]; under spark-submit, whatever it was given)",
    )
    p.add_argument(
        "--local-dir", type=Path, default=None, help=f"Spark scratch space, spark.local.dir (local default {DEFAULT_LOCAL_DIR})"
    )
    return p


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_SUBMIT_OPTS" in os.environ


def open_session(master: str | None, app: str, local_dir: Path | None):
    """A session, and whether this call started it (a caller's session is not ours to stop)."""
    if master is not None:
        prepare(master)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    return session(master, app, local_dir=local_dir), True


def job_main(name: str, jobs: Sequence[Job], description: str, argv: Sequence[str] | None = None) -> int:
    """Command-line entry shared by every job script."""
    args = parser(f"{name}.py", description).parse_args(argv)
    master = args.master if args.master is not None else (None if _under_spark_submit() else "local[*]")
    try:
        spark, owned = open_session(master, f"flowcast-{name}", args.local_dir)
    except JavaMissing as error:
        print(f"flowcast spark: {error}", file=sys.stderr)
        return 2
    try:
        summary = run_jobs(spark, jobs, args.input, args.output)
    except JobError as error:
        print(f"flowcast spark {name}: {error}", file=sys.stderr)
        return 2
    finally:
        if owned:
            spark.stop()
    for message in summary["skipped"]:
        print(f"flowcast spark {name}: skipped {message}", file=sys.stderr)
    print(
        f"{name}: {summary['events']} events from {summary['files']} file(s), "
        f"{len(summary['skipped'])} skipped, {summary['seconds']:.1f}s; report: {args.output / 'index.html'}"
    )
    return 0
