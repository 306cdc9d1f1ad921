"""Structured Streaming: follow a live export directory, keep the per-route latency table current.

Segments appear under their final name only when complete (the writer
renames ``.NAME.inprogress``), so the file source never reads a torn file;
``ignoreCorruptFiles`` is still on, because a long-running query should
outlive one damaged file rather than die on it.  Each micro-batch rewrites
``OUTPUT/tables/stream_latency/latency.parquet`` atomically (hidden name,
then rename), so a reader of the table never sees half a snapshot.

Latency here is the ``latency`` the receiver reported on ``delivered``
events: deriving it from sent/delivered pairs would need a stream-stream
join with watermarks, which the batch job (``latency.py``) does instead.

Run: ``spark-submit spark/stream_latency.py --input DIR [--output DIR]
[--trigger SECONDS] [--timeout SECONDS]`` or ``flowcast spark stream_latency ...``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcspark  # noqa: E402
import metrics  # noqa: E402

from flowcast.export.schema import SCHEMA_VERSION, SchemaVersionError  # noqa: E402

TABLE = Path("tables") / "stream_latency" / "latency.parquet"


def source(spark, input_: str | Path):
    """The live events under ``input_`` (DAY/HOUSE/*.parquet, new days included)."""
    return (
        spark.readStream.schema(fcspark.spark_schema())
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .option("ignoreCorruptFiles", "true")
        .parquet(str(Path(input_).resolve()) if "://" not in str(input_) else str(input_))
    )


def latency_table(events):
    from pyspark.sql import functions as F

    delivered = fcspark.with_route(events).filter((F.col("kind") == "delivered") & F.col("latency").isNotNull())
    return delivered.groupBy("route").agg(
        F.count("*").alias("delivered"),
        F.percentile_approx("latency", [0.5, 0.95, 0.99], metrics.ACCURACY).alias("p"),
        F.max("latency").alias("max"),
        F.max("ts").alias("latest"),
        F.max("schema_version").alias("newest_version"),
    ).select(
        "route", "delivered",
        F.col("p")[0].alias("p50"), F.col("p")[1].alias("p95"), F.col("p")[2].alias("p99"),
        "max", "latest", "newest_version",
    )


def snapshot_writer(output: Path):
    """A foreachBatch callback publishing each complete table atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowcast.export.layout import inprogress, publish

    final = output / TABLE
    final.parent.mkdir(parents=True, exist_ok=True)

    def write(batch_df, batch_id: int) -> None:
        rows = batch_df.toPandas()
        newest = rows["newest_version"].max() if len(rows) else None
        if newest is not None and newest > SCHEMA_VERSION:
            # Stop the query rather than publish figures mixed with rows of a layout we do not know.
            raise SchemaVersionError(
                f"live input holds export schema version {newest}, newer than this flowcast reads "
                f"(up to {SCHEMA_VERSION}); upgrade flowcast to read it"
            )
        table = pa.Table.from_pandas(rows.drop(columns=["newest_version"]), preserve_index=False)
        table = table.append_column("batch", pa.array([batch_id] * table.num_rows, pa.int64()))
        tmp = inprogress(final)
        pq.write_table(table, tmp, compression="zstd")
        publish(tmp, final)

    return write


def start(spark, input_: str | Path, output: Path, *, trigger: float = 1.0, checkpoint: Path | None = None):
    """Start the query; returns the StreamingQuery (stop it, or ``awaitTermination``)."""
    output.mkdir(parents=True, exist_ok=True)
    checkpoint = checkpoint or output / ".checkpoint" / "stream_latency"
    return (
        latency_table(source(spark, input_))
        .writeStream.outputMode("complete")
        .foreachBatch(snapshot_writer(output))
        .option("checkpointLocation", str(checkpoint.resolve()))
        .trigger(processingTime=f"{trigger} seconds")
        .queryName("flowcast_stream_latency")
        .start()
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = fcspark.parser("stream_latency.py", __doc__.splitlines()[0])
    p.add_argument("--trigger", type=float, default=1.0, help="seconds between micro-batches (default 1)")
    p.add_argument("--timeout", type=float, default=None, help="stop after this many seconds (default: run until Ctrl-C)")
    args: argparse.Namespace = p.parse_args(argv)
    master = args.master if args.master is not None else (None if fcspark._under_spark_submit() else "local[*]")
    try:
        spark, owned = fcspark.open_session(master, "flowcast-stream-latency", args.local_dir)
    except fcspark.JavaMissing as error:
        print(f"flowcast spark: {error}", file=sys.stderr)
        return 2
    query = start(spark, args.input, args.output, trigger=args.trigger)
    print(f"stream_latency: following {args.input}; table {args.output / TABLE}", flush=True)
    try:
        query.awaitTermination(args.timeout)
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        if owned:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
