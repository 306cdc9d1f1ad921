"""CAST's figures: how far behind each subscriber is, and how much was sent again.

The publishing estate records what it stored, forwarded, resent from a
cursor (``cast-resync`` served), declared expired (``cast-gap`` sent) and
let lapse; the subscribing house what it delivered and dropped as a
duplicate (flowcast.export.castevents).  Neither end can say alone how far
behind a subscriber is, so the job lines them up: a delivery's latency is
its time minus its ``cast-stored`` time (joined by message id, as the
``routed`` job joins by route and id), and its **seq lag** is how many
seqs the cache had stored by the time it was delivered beyond it -- the
publisher's ``high`` as of that moment, minus the delivered seq.

Pure Spark SQL, like metrics.py: executors need no flowcast.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from fcspark import ensure_columns

__all__ = ["CAST_COLUMNS", "cast", "cast_deliveries"]

ACCURACY = 10_000
#: The columns version 2 of the export schema added for CAST (older data reads them as nulls).
CAST_COLUMNS = {"seq": "bigint", "upto": "bigint", "count": "bigint", "sub": "string", "name": "string"}
#: Kinds the publishing house records; the others are the subscribing house's.
PUBLISHER_SIDE = ("cast-stored", "cast-forwarded", "cast-lease-expired")


def _kind(name: str):
    return F.col("kind") == F.lit(name)


def _seconds_between(later: str, earlier: str):
    return (F.unix_micros(F.col(later)) - F.unix_micros(F.col(earlier))) / F.lit(1_000_000.0)


def cast_deliveries(events: DataFrame) -> DataFrame:
    """Each ``cast-delivered`` event with its publish-to-delivery latency and its seq lag."""
    events = ensure_columns(events, CAST_COLUMNS)
    stored = events.filter(_kind("cast-stored"))
    delivered = events.filter(_kind("cast-delivered"))
    # A retried publish is stored once but recorded twice (the second ``duplicate``): its first time counts.
    first = stored.groupBy(F.col("estate").alias("publisher"), "msg_id").agg(F.min("ts").alias("stored_ts"))
    timed = delivered.join(
        first, (delivered["remote"] == first["publisher"]) & (delivered["msg_id"] == first["msg_id"]), "left"
    ).select(
        delivered["estate"], delivered["house"], delivered["sub"], delivered["remote"].alias("publisher"),
        delivered["msg_id"], delivered["ts"], delivered["seq"],
        F.coalesce(_seconds_between("ts", "stored_ts"), delivered["latency"]).alias("latency"),
    )
    # The cache's high seq as of each delivery: one sort per publishing estate, stored before delivered at a tie.
    marks = stored.select(F.col("estate").alias("publisher"), "ts", F.lit(0).alias("order"), F.col("seq").alias("high"),
                          F.lit(None).cast("string").alias("msg_id"), F.lit(None).cast("string").alias("sub"))
    ends = timed.select("publisher", "ts", F.lit(1).alias("order"), F.lit(None).cast("bigint").alias("high"), "msg_id", "sub")
    order = Window.partitionBy("publisher").orderBy("ts", "order").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    highs = (
        marks.unionByName(ends)
        .withColumn("high_then", F.max("high").over(order))
        .filter(F.col("order") == 1)
        .select("publisher", "sub", "msg_id", "ts", "high_then")
        .dropDuplicates(["publisher", "sub", "msg_id", "ts"])
    )
    return timed.join(highs, ["publisher", "sub", "msg_id", "ts"], "left").withColumn(
        "seq_lag", F.greatest(F.col("high_then") - F.col("seq"), F.lit(0))
    )


def cast(events: DataFrame) -> dict[str, DataFrame]:
    """``cast_lag`` per subscription (latency and seq lag of deliveries) and ``cast_resync`` (what was sent again)."""
    events = ensure_columns(events, CAST_COLUMNS)
    deliveries = cast_deliveries(events)
    lag = deliveries.groupBy("estate", "house", "sub", "publisher").agg(
        F.count("*").alias("delivered"),
        F.max("seq").alias("last_seq"),
        F.count("latency").alias("timed"),
        F.percentile_approx("latency", [0.5, 0.99], ACCURACY).alias("p"),
        F.max("latency").alias("max"),
        F.percentile_approx("seq_lag", [0.5, 0.99], ACCURACY).alias("q"),
        F.max("seq_lag").alias("max_seq_lag"),
    )
    lag = lag.select(
        F.concat_ws("/", "estate", "house").alias("subscriber"), "sub", "publisher", "delivered", "last_seq", "timed",
        F.col("p")[0].alias("p50"), F.col("p")[1].alias("p99"), "max",
        F.col("q")[0].alias("p50_seq_lag"), F.col("q")[1].alias("p99_seq_lag"), "max_seq_lag",
    )
    # Each row from both ends as (publisher, subscriber estate, subscription): at the publisher the
    # other estate is the subscriber, at the subscriber it is the publisher.
    mine = events.filter(F.col("kind").startswith("cast-") & ~_kind("cast-stored") & F.col("sub").isNotNull())
    served = F.col("kind").isin(*PUBLISHER_SIDE) | (F.col("detail").isin("served", "sent"))
    sides = mine.select(
        F.when(served, F.col("estate")).otherwise(F.col("remote")).alias("publisher"),
        F.when(served, F.col("remote")).otherwise(F.col("estate")).alias("subscriber"),
        "sub", "kind", "detail", "count", "name", served.alias("served"),
    )

    def n(condition):
        return F.sum(condition.cast("long"))

    def total(condition):
        return F.coalesce(F.sum(F.when(condition, F.col("count"))), F.lit(0)).cast("long")

    resent = sides.groupBy("publisher", "subscriber", "sub").agg(
        F.max(F.when(F.col("served"), F.col("name"))).alias("pattern"),
        n(_kind("cast-resync") & F.col("served")).alias("resyncs"),
        total(_kind("cast-resync") & F.col("served")).alias("resync_seqs"),
        n(_kind("cast-resync") & ~F.col("served")).alias("asked"),
        total(_kind("cast-forwarded")).alias("forwarded"),
        n(_kind("cast-forwarded")).alias("batches"),
        n(_kind("cast-duplicate")).alias("duplicates"),
        n(_kind("cast-gap") & ~F.col("served")).alias("gaps"),
        total(_kind("cast-gap") & ~F.col("served")).alias("gap_seqs"),
        n(_kind("cast-lease-expired")).alias("leases_expired"),
    )
    return {"cast_lag": lag, "cast_resync": resent}
