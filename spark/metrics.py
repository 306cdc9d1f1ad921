"""The figures, as DataFrame transformations from events to result tables.

Pure Spark SQL functions only (no Python UDFs), so executors on a cluster
need no flowcast and no Python packages beyond pyspark itself.  Every
function takes the events DataFrame of :func:`fcspark.load_events` (with a
``route`` column) and returns ``{table name: DataFrame}``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from fcspark import ensure_columns

__all__ = ["causal", "delivery_latencies", "latency", "loss", "presence", "throughput"]

#: percentile_approx accuracy: relative rank error 1/ACCURACY; on small inputs it is exact.
ACCURACY = 10_000
HIST_BINS = 30


def _seconds_between(later: str, earlier: str):
    return (F.unix_micros(F.col(later)) - F.unix_micros(F.col(earlier))) / F.lit(1_000_000.0)


def _kind(name: str):
    return F.col("kind") == F.lit(name)


def delivery_latencies(events: DataFrame) -> DataFrame:
    """Delivered events with their latency: as reported, else sent-to-delivered time."""
    delivered = events.filter(_kind("delivered")).select("route", "msg_id", "ts", "latency")
    sent = events.filter(_kind("sent")).groupBy("route", "msg_id").agg(F.min("ts").alias("sent_ts"))
    joined = delivered.join(sent, ["route", "msg_id"], "left")
    return joined.select(
        "route", "msg_id", "ts", F.coalesce(F.col("latency"), _seconds_between("ts", "sent_ts")).alias("latency")
    )


def latency(events: DataFrame) -> dict[str, DataFrame]:
    """p50/p95/p99 delivery latency per route, and a histogram per route."""
    lat = delivery_latencies(events)
    stats = lat.groupBy("route").agg(
        F.count("*").alias("delivered"),
        F.count("latency").alias("timed"),
        F.percentile_approx("latency", [0.5, 0.95, 0.99], ACCURACY).alias("p"),
        F.min("latency").alias("min"),
        F.avg("latency").alias("mean"),
        F.max("latency").alias("max"),
    )
    stats = stats.select(
        "route", "delivered", "timed",
        F.col("p")[0].alias("p50"), F.col("p")[1].alias("p95"), F.col("p")[2].alias("p99"),
        "min", "mean", "max",
    )
    timed = lat.filter(F.col("latency").isNotNull())
    bounds = timed.groupBy("route").agg(F.min("latency").alias("lo"), F.max("latency").alias("hi"))
    width = F.greatest(F.col("hi") - F.col("lo"), F.lit(1e-9)) / F.lit(HIST_BINS)
    binned = timed.join(F.broadcast(bounds), "route").withColumn(
        "bin", F.least(F.floor((F.col("latency") - F.col("lo")) / width), F.lit(HIST_BINS - 1)).cast("int")
    )
    hist = binned.groupBy("route", "bin", "lo", "hi").agg(F.count("*").alias("count")).select(
        "route",
        "bin",
        (F.col("lo") + F.col("bin") * (F.greatest(F.col("hi") - F.col("lo"), F.lit(1e-9)) / HIST_BINS)).alias("from"),
        (F.col("lo") + (F.col("bin") + 1) * (F.greatest(F.col("hi") - F.col("lo"), F.lit(1e-9)) / HIST_BINS)).alias("to"),
        "count",
    )
    return {"latency": stats, "latency_hist": hist}


def throughput(events: DataFrame) -> dict[str, DataFrame]:
    """Delivered messages and bytes per route per minute (UTC minutes)."""
    per_minute = (
        events.filter(_kind("delivered"))
        .groupBy("route", F.window("ts", "1 minute"))
        .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"))
        .select("route", F.col("window.start").alias("minute"), "messages", "bytes")
    )
    return {"throughput": per_minute}


def loss(events: DataFrame) -> dict[str, DataFrame]:
    """Per route: sent, delivered, lost (sent, never delivered nor acknowledged), resent, missed segments, denied."""
    msgs = events.filter(F.col("msg_id").isNotNull())

    def n(kind: str):
        return F.sum(_kind(kind).cast("long"))

    counts = msgs.groupBy("route").agg(
        F.countDistinct(F.when(_kind("sent"), F.col("msg_id"))).alias("sent"),
        F.countDistinct(F.when(_kind("delivered"), F.col("msg_id"))).alias("delivered"),
        n("acknowledged").alias("acknowledged"),
        n("resent").alias("resent"),
        n("segment-missed").alias("missed"),
        n("denied").alias("denied"),
    )
    sent_ids = msgs.filter(_kind("sent")).select("route", "msg_id").distinct()
    done_ids = msgs.filter(F.col("kind").isin("delivered", "acknowledged")).select("route", "msg_id").distinct()
    lost = sent_ids.join(done_ids, ["route", "msg_id"], "left_anti").groupBy("route").agg(F.count("*").alias("lost"))
    table = counts.join(lost, "route", "left").fillna(0, ["lost"])
    return {"loss": table.select("route", "sent", "delivered", "lost", "acknowledged", "resent", "missed", "denied")}


def causal(events: DataFrame) -> dict[str, DataFrame]:
    """Causal buffering lag per route: how long buffered messages waited for their dependencies.

    Lag is the ``lag`` a mailbox reported on delivery, else buffered-to-
    delivered time.  Data from before mailboxes existed has no buffered
    events (and perhaps no ``lag`` column): the table is then empty, not an
    error.
    """
    events = ensure_columns(events, {"lag": "double", "msg_id": "string"})
    buffered = events.filter(_kind("buffered")).groupBy("route", "msg_id").agg(F.min("ts").alias("buffered_ts"))
    delivered = (
        events.filter(_kind("delivered"))
        .groupBy("route", "msg_id")
        .agg(F.min("ts").alias("delivered_ts"), F.max("lag").alias("reported"))
    )
    joined = buffered.join(delivered, ["route", "msg_id"], "left").withColumn(
        "wait", F.coalesce(F.col("reported"), _seconds_between("delivered_ts", "buffered_ts"))
    )
    stats = joined.groupBy("route").agg(
        F.count("*").alias("buffered"),
        F.count("delivered_ts").alias("released"),
        F.percentile_approx("wait", [0.5, 0.95], ACCURACY).alias("p"),
        F.max("wait").alias("max_lag"),
    )
    return {
        "causal": stats.select(
            "route", "buffered", "released",
            F.col("p")[0].alias("p50_lag"), F.col("p")[1].alias("p95_lag"), "max_lag",
        )
    }


def presence(events: DataFrame) -> dict[str, DataFrame]:
    """Presence timeline: each (observer estate, remote estate) status interval."""
    changes = events.filter(_kind("presence")).select(
        F.col("estate").alias("observer"),
        "remote",
        F.col("ts").alias("since"),
        F.trim(F.split(F.col("detail"), ":").getItem(0)).alias("status"),
    )
    order = Window.partitionBy("observer", "remote").orderBy("since")
    timeline = changes.withColumn("until", F.lead("since").over(order)).withColumn(
        "seconds", _seconds_between("until", "since")
    )
    return {"presence": timeline.select("observer", "remote", "status", "since", "until", "seconds")}
