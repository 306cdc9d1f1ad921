"""The application's own shares: what each logged share held over time, and how often it changed.

The other jobs measure the plumbing (routes, links, caches); a user who
logged ``temperature`` and ``alarm`` wants to see those first.  Per share
(estate, house, share): how many updates, over how long, how many per
second, and its last fields (``shares``); per numeric field, its range and
last value (``share_fields``); and its value over time, cut into at most
:data:`SERIES_POINTS` buckets per share (``share_series``), so the plot is
drawn from a bounded table however long the run and however many shares
(:data:`SERIES_SHARES` shares, :data:`SERIES_FIELDS` fields each).

Fields travel as JSON text (flowcast.export.schema); they are read as a map
of field to text and a field counts as numeric where that text is a number.
Booleans, strings and nested values stay out of the numeric tables but are
in the last fields.  Pure Spark SQL, like metrics.py.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from fcspark import ensure_columns

__all__ = ["SERIES_FIELDS", "SERIES_POINTS", "SERIES_SHARES", "SHARE_COLUMNS", "shares"]

#: Buckets per share in the value-over-time table (and so points per plotted line).
SERIES_POINTS = 200
#: Shares (the busiest) and numeric fields per share (the most sampled) the value-over-time table holds.
SERIES_SHARES = 100
SERIES_FIELDS = 12
#: What this job reads; tables made by hand may lack them.
SHARE_COLUMNS = {"estate": "string", "house": "string", "share": "string", "fields": "string"}
KEY = ("estate", "house", "share")


def _seconds(later, earlier):
    return (F.unix_micros(later) - F.unix_micros(earlier)) / F.lit(1_000_000.0)


def shares(events: DataFrame) -> dict[str, DataFrame]:
    """Per logged share: updates and rate (``shares``), numeric fields' range (``share_fields``), value
    over time (``share_series``)."""
    changes = ensure_columns(events, SHARE_COLUMNS).filter(F.col("kind") == F.lit("share")).select(*KEY, "ts", "fields")
    summary = changes.groupBy(*KEY).agg(
        F.count("*").alias("updates"),
        F.min("ts").alias("first"),
        F.max("ts").alias("last"),
        F.max_by("fields", "ts").alias("last_fields"),
    )
    seconds = _seconds(F.col("last"), F.col("first"))
    summary = summary.select(
        *KEY, "updates", "first", "last", seconds.alias("seconds"),
        # Updates per second over the share's own span: n updates bound n-1 intervals.
        F.when(seconds > 0, (F.col("updates") - 1) / seconds).alias("per_second"),
        "last_fields",
    )
    numeric = (
        changes.select(*KEY, "ts", F.explode(F.from_json("fields", "map<string,string>")).alias("field", "text"))
        .withColumn("value", F.col("text").try_cast("double"))
        .filter(F.col("value").isNotNull() & ~F.isnan("value"))
    )
    fields = numeric.groupBy(*KEY, "field").agg(
        F.count("*").alias("samples"),
        F.min("value").alias("min"),
        F.avg("value").alias("mean"),
        F.max("value").alias("max"),
        F.max_by("value", "ts").alias("last"),
    )
    # The series is bounded whatever the data: the SERIES_SHARES busiest shares with a numeric field, SERIES_FIELDS fields each
    # (the most sampled), SERIES_POINTS buckets of each share's span (a share updated once has one bucket).
    plotted = summary.join(fields.select(*KEY).distinct(), list(KEY), "left_semi")  # shares with a number
    busiest = plotted.orderBy(F.desc("updates"), *KEY).limit(SERIES_SHARES)
    spans = busiest.select(*KEY, "first", F.greatest(F.col("seconds") / SERIES_POINTS, F.lit(1e-6)).alias("width"))
    ranked = fields.select(*KEY, "field", F.row_number().over(
        Window.partitionBy(*KEY).orderBy(F.desc("samples"), "field")).alias("rank"))
    chosen = ranked.filter(F.col("rank") <= SERIES_FIELDS).drop("rank").join(spans, list(KEY))
    bucket = F.floor(_seconds(F.col("ts"), F.col("first")) / F.col("width")).cast("long")
    series = (
        numeric.join(F.broadcast(chosen), [*KEY, "field"])
        .groupBy(*KEY, "field", bucket.alias("bucket"))
        .agg(
            F.min("ts").alias("at"),
            F.count("*").alias("samples"),
            F.min("value").alias("min"),
            F.avg("value").alias("mean"),
            F.max("value").alias("max"),
        )
    )
    return {"shares": summary, "share_fields": fields, "share_series": series}
