"""The figures, as DataFrame transformations from events to result tables.

Pure Spark SQL functions only (no Python UDFs), so executors on a cluster
need no flowcast and no Python packages beyond pyspark itself.  Every
function takes the events DataFrame of :func:`fcspark.load_events` and
returns ``{table name: DataFrame}``.

Aggregations key on ``src, dst`` and name the route (``"SRC -> DST"``) only
in the small results: building and hashing a million concatenated strings
costs more than the aggregation itself.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from fcspark import ensure_columns

__all__ = ["CAUSAL_COLUMNS", "carried", "causal", "delivery_latencies", "latency", "loss", "presence", "routed", "routed_latencies", "throughput"]

#: percentile_approx accuracy: relative rank error 1/ACCURACY; on small inputs it is exact.
ACCURACY = 10_000
BINS_PER_DECADE = 10
MIN_LATENCY = 1e-6  # seconds; shorter latencies land in the first bin (negative ones are "skewed", untimed)
#: What routers record, share to share (flowcast.routing.events); the other message kinds are the transport's hops.
ROUTER_KINDS = ("routed", "landed", "refused")


def _seconds_between(later: str, earlier: str):
    return (F.unix_micros(F.col(later)) - F.unix_micros(F.col(earlier))) / F.lit(1_000_000.0)


def _honest(latency):
    """A latency, or null where it is negative: the two ends' clocks disagree (estates on two hosts
    whose wall clocks differ), and a negative figure, or one clamped to zero, would be a made-up one."""
    return F.when(latency >= 0, latency)


def _skewed(latency):
    return (latency < 0).cast("long")


def _route():
    return F.concat_ws(" -> ", F.col("src"), F.col("dst")).alias("route")


def carried(events: DataFrame) -> DataFrame:
    """Which share routes each transport stream carries: ``stream`` -> ``carries`` ("a > b, ...").

    A link hop's route names a stream, not shares (the transport knows no
    shares).  A router sends each share pair on stream crc32("SRC>DST") mod
    2**16 (flowcast.routing.pair), so the routers' ``routed`` events name
    every stream's pairs; two pairs that hash alike are both listed.
    """
    share = lambda column: F.split(F.col(column), "/").getItem(0)  # noqa: E731
    pairs = events.filter(_kind("routed")).select(share("src").alias("s"), share("dst").alias("d")).distinct()
    return (
        pairs.select(
            (F.crc32(F.concat_ws(">", "s", "d").cast("binary")) % F.lit(65536)).alias("stream"),
            F.concat_ws(" > ", "s", "d").alias("pair"),
        )
        .groupBy("stream")
        .agg(F.concat_ws(", ", F.sort_array(F.collect_set("pair"))).alias("carries"))
    )


def _with_carries(table: DataFrame, events: DataFrame) -> DataFrame:
    """``table`` (one row per link route, ``src`` still a column) with the share routes its stream carries."""
    stream = F.when(F.col("src").startswith("/"), F.element_at(F.split(F.col("src"), "/"), -1).try_cast("long"))
    return table.withColumn("stream", stream).join(F.broadcast(carried(events)), "stream", "left").drop("stream")


def _kind(name: str):
    return F.col("kind") == F.lit(name)


def _first_pair(events: DataFrame, start: str, end: str, reported: str) -> DataFrame:
    """Per message (src, dst, msg_id): the first ``start`` and ``end`` event times,
    and the largest ``reported`` value on an ``end`` event.

    One hash aggregation by message instead of a join of one kind to the
    other (a sort-merge join costs about twice as much here); a message
    seen twice counts once, at its first event of each kind.
    """
    return (
        events.filter(F.col("kind").isin(start, end))
        .groupBy("src", "dst", "msg_id")
        .agg(
            F.min(F.when(_kind(start), F.col("ts"))).alias("start_ts"),
            F.min(F.when(_kind(end), F.col("ts"))).alias("end_ts"),
            F.max(F.when(_kind(end), F.col(reported))).alias("reported"),
        )
    )


def delivery_latencies(events: DataFrame) -> DataFrame:
    """Each delivered message with its latency: as reported, else sent-to-delivered time.

    A message delivered twice counts once, at its first delivery.
    """
    per_message = _first_pair(events, "sent", "delivered", "latency").filter(F.col("end_ts").isNotNull())
    return per_message.select(
        "src", "dst", "msg_id", F.col("end_ts").alias("ts"),
        _honest(F.coalesce(F.col("reported"), _seconds_between("end_ts", "start_ts"))).alias("latency"),
        _skewed(F.coalesce(F.col("reported"), _seconds_between("end_ts", "start_ts"))).alias("skewed"),
    )


def latency(events: DataFrame) -> dict[str, DataFrame]:
    """p50/p95/p99 delivery latency per route, and a histogram per route.

    Histogram bins are fixed on a log scale (10 per decade), so they need no
    first pass for each route's range, and tails stay visible.
    """
    lat = delivery_latencies(events).cache()  # read twice: the stats and the histogram
    stats = lat.groupBy("src", "dst").agg(
        F.count("*").alias("delivered"),
        F.count("latency").alias("timed"),
        F.coalesce(F.sum("skewed"), F.lit(0)).alias("skewed"),
        F.percentile_approx("latency", [0.5, 0.95, 0.99], ACCURACY).alias("p"),
        F.min("latency").alias("min"),
        F.avg("latency").alias("mean"),
        F.max("latency").alias("max"),
    )
    stats = _with_carries(stats, events).select(
        _route(), "carries", "delivered", "timed", "skewed",
        F.col("p")[0].alias("p50"), F.col("p")[1].alias("p95"), F.col("p")[2].alias("p99"),
        "min", "mean", "max",
    )
    timed = lat.filter(F.col("latency").isNotNull())
    bin_ = F.floor(F.log10(F.greatest(F.col("latency"), F.lit(MIN_LATENCY))) * BINS_PER_DECADE).cast("int")
    hist = (
        timed.groupBy("src", "dst", bin_.alias("bin"))
        .agg(F.count("*").alias("count"))
        .select(
            _route(),
            "bin",
            F.pow(F.lit(10.0), F.col("bin") / BINS_PER_DECADE).alias("from"),
            F.pow(F.lit(10.0), (F.col("bin") + 1) / BINS_PER_DECADE).alias("to"),
            "count",
        )
    )
    return {"latency": stats, "latency_hist": hist}


def throughput(events: DataFrame) -> dict[str, DataFrame]:
    """Delivered messages and bytes per route per minute (UTC minutes)."""
    per_minute = (
        events.filter(_kind("delivered"))
        .groupBy("src", "dst", F.window("ts", "1 minute"))
        .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"))
    )
    per_minute = _with_carries(per_minute, events).select(
        _route(), "carries", F.col("window.start").alias("minute"), "messages", "bytes")
    return {"throughput": per_minute}


def loss(events: DataFrame) -> dict[str, DataFrame]:
    """Per route: sent, delivered, lost (sent, never delivered nor acknowledged), resent, missed segments, denied.

    One shuffle by message: each message's events fold into flags and
    counts, then routes sum them (distinct counts and an anti-join would
    shuffle the events three times).
    """

    def has(*kinds: str):
        return F.max(F.col("kind").isin(*kinds).cast("int"))

    def n(kind: str):
        return F.sum(_kind(kind).cast("long"))

    per_message = (
        events.filter(F.col("msg_id").isNotNull() & ~F.col("kind").isin(*ROUTER_KINDS)
                      & ~F.col("kind").startswith("cast-") & ~F.col("kind").startswith("causal-"))  # other jobs'
        .groupBy("src", "dst", "msg_id")
        .agg(
            has("sent").alias("sent"),
            has("delivered").alias("delivered"),
            has("delivered", "acknowledged").alias("done"),
            n("acknowledged").alias("acknowledged"),
            n("resent").alias("resent"),
            n("segment-missed").alias("missed"),
            n("denied").alias("denied"),
        )
    )
    table = per_message.groupBy("src", "dst").agg(
        F.sum("sent").cast("long").alias("sent"),
        F.sum("delivered").cast("long").alias("delivered"),
        F.sum(((F.col("sent") == 1) & (F.col("done") == 0)).cast("long")).alias("lost"),
        F.sum("acknowledged").alias("acknowledged"),
        F.sum("resent").alias("resent"),
        F.sum("missed").alias("missed"),
        F.sum("denied").alias("denied"),
    )
    table = _with_carries(table, events)
    return {"loss": table.select(_route(), "carries", "sent", "delivered", "lost", "acknowledged", "resent", "missed", "denied")}


def routed_latencies(events: DataFrame) -> DataFrame:
    """Each ``landed`` message with its latency from the latest ``routed`` event of its id at or before it.

    Ids repeat when a house restarts (they are built from its clock's
    stamps), so a landing is matched as of its time, not by id alone: one
    sort per message id, which holds a routed and a landed event or two.
    """
    ends = events.filter(F.col("kind").isin("routed", "landed")).select("src", "dst", "msg_id", "ts", "kind")
    order = (
        Window.partitionBy("src", "dst", "msg_id")
        .orderBy("ts", _kind("landed").cast("int"))  # same tick (a route within one house): routed first
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    since = F.last(F.when(_kind("routed"), F.col("ts")), ignorenulls=True).over(order)
    # No routed event at or before the landing: the sender's clock is ahead of the lander's (two hosts),
    # or the routed event was not recorded.  The first is told apart as "skewed": a routed event of the
    # id right after the landing.
    after = F.first(F.when(_kind("routed"), F.col("ts")), ignorenulls=True).over(
        order.rowsBetween(Window.currentRow, Window.unboundedFollowing))
    return (
        ends.withColumn("routed_ts", since)
        .withColumn("routed_after", after)
        .filter(_kind("landed"))
        .select(
            "src", "dst", "msg_id", "ts", _seconds_between("ts", "routed_ts").alias("latency"),
            (F.col("routed_ts").isNull() & F.col("routed_after").isNotNull()).cast("long").alias("skewed"),
        )
    )


def routed(events: DataFrame) -> dict[str, DataFrame]:
    """Share-to-share routes across every hop: routed, landed, refused, lost and latency per route,
    and the refusals by kind.

    Counts, not ids, give ``lost`` (routed, neither landed nor refused by
    the end of the data): an id can shift when a message of the same stamp
    was refused on the way (flowcast.routing.events), a count cannot.
    """
    mine = events.filter(F.col("kind").isin(*ROUTER_KINDS))

    def n(kind: str):
        return F.sum(_kind(kind).cast("long")).alias(kind)

    counts = mine.groupBy("src", "dst").agg(n("routed"), n("landed"), n("refused"))
    stats = routed_latencies(events).groupBy("src", "dst").agg(
        F.count("latency").alias("timed"),
        F.sum("skewed").alias("skewed"),
        F.min("latency").alias("min"),
        F.percentile_approx("latency", [0.5, 0.95, 0.99], ACCURACY).alias("p"),
        F.max("latency").alias("max"),
    )
    table = counts.join(stats, ["src", "dst"], "left").select(
        _route(), "routed", "landed", "refused",
        F.greatest(F.col("routed") - F.col("landed") - F.col("refused"), F.lit(0)).alias("lost"),
        F.coalesce(F.col("timed"), F.lit(0)).alias("timed"), F.coalesce(F.col("skewed"), F.lit(0)).alias("skewed"),
        "min", F.col("p")[0].alias("p50"), F.col("p")[1].alias("p95"), F.col("p")[2].alias("p99"), "max",
    )
    refusals = (
        mine.filter(_kind("refused"))
        .groupBy("src", "dst", F.trim(F.split(F.col("detail"), ":").getItem(0)).alias("reason"))
        .agg(F.count("*").alias("count"))
        .select(_route(), "reason", "count")
    )
    return {"routed": table, "routed_refused": refusals}


#: The columns the causal job reads that older data (or a table made by hand) may lack: read as nulls.
CAUSAL_COLUMNS = {
    "estate": "string", "house": "string", "lag": "double", "latency": "double", "msg_id": "string", "topic": "string", "publisher": "string",
    "sub": "string", "detail": "string", "remote": "string",
}


def causal(events: DataFrame) -> dict[str, DataFrame]:
    """Causal delivery per subscription, topic and publisher: buffering lag, rejected and abandoned
    messages (``causal``); what was kept as evidence, by reason (``causal_evidence``); how long missing
    dependencies took to fetch, per relay asked (``causal_fetch``).

    Lag is the ``lag`` the mailbox reported on delivery (it stamped the
    message when it buffered it), else buffered-to-delivered time, over the
    messages that were buffered: one delivered at once has none to report.
    One shuffle by message folds its events into flags, as ``loss`` does.
    Data without causal events or columns gives empty tables, not an error.
    """
    events = ensure_columns(events, CAUSAL_COLUMNS).filter(F.col("kind").startswith("causal-"))

    def has(kind: str):
        return F.max(_kind(kind).cast("int"))

    subscribed = events.filter(F.col("sub").isNotNull() & F.col("kind").isin(
        "causal-buffered", "causal-delivered", "causal-rejected", "causal-abandoned"))
    per_message = (
        subscribed.groupBy("estate", "house", "sub", "topic", "publisher", "msg_id")
        .agg(
            has("causal-buffered").alias("was_buffered"),
            has("causal-delivered").alias("delivered"),
            has("causal-rejected").alias("rejected"),
            has("causal-abandoned").alias("abandoned"),
            F.min(F.when(_kind("causal-buffered"), F.col("ts"))).alias("start_ts"),
            F.min(F.when(_kind("causal-delivered"), F.col("ts"))).alias("end_ts"),
            F.max(F.when(_kind("causal-delivered"), F.col("lag"))).alias("reported"),
        )
        .withColumn("released", (F.col("was_buffered") == 1) & (F.col("delivered") == 1))
        .withColumn("wait", F.when(F.col("released"), F.coalesce(F.col("reported"), _seconds_between("end_ts", "start_ts"))))
    )
    stats = per_message.groupBy("estate", "house", "sub", "topic", "publisher").agg(
        F.sum("delivered").cast("long").alias("delivered"),
        F.sum("was_buffered").cast("long").alias("buffered"),
        F.sum(F.col("released").cast("long")).alias("released"),
        F.percentile_approx("wait", [0.5, 0.95], ACCURACY).alias("p"),
        F.max("wait").alias("max_lag"),
        F.sum("rejected").cast("long").alias("rejected"),
        F.sum("abandoned").cast("long").alias("abandoned"),
    )
    table = stats.select(
        F.concat_ws("/", "estate", "house").alias("subscriber"), "sub", "topic", "publisher", "delivered",
        "buffered", "released", F.col("p")[0].alias("p50_lag"), F.col("p")[1].alias("p95_lag"), "max_lag",
        "rejected", "abandoned",
    )
    kept = events.filter(F.col("kind").isin("causal-rejected", "causal-abandoned", "causal-equivocation"))
    evidence = (
        kept.groupBy(
            F.concat_ws("/", "estate", "house").alias("observer"), "topic", "publisher",
            F.regexp_replace(F.col("kind"), "^causal-", "").alias("kind"),
            F.when(_kind("causal-rejected"), F.trim(F.split(F.col("detail"), ":").getItem(0))).alias("reason"),
        )
        .agg(F.countDistinct("msg_id").alias("messages"), F.count("*").alias("events"))
    )
    fetched = (
        events.filter(_kind("causal-fetched"))
        .groupBy(F.concat_ws("/", "estate", "house").alias("relay"), "topic", F.col("remote").alias("source"))
        .agg(
            F.count("*").alias("fetched"),
            F.percentile_approx("latency", [0.5, 0.95], ACCURACY).alias("p"),
            F.max("latency").alias("max_wait"),
        )
        .select("relay", "topic", "source", "fetched", F.col("p")[0].alias("p50_wait"), F.col("p")[1].alias("p95_wait"), "max_wait")
    )
    return {"causal": table, "causal_evidence": evidence, "causal_fetch": fetched}


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
