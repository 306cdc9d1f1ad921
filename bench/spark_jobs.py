"""A Spark job over 1,000,000 events in local mode: target under 30 s.

What a person waits for after ``flowcast spark latency --input DIR``: the
load (footer checks, Parquet scan, cache), the per-route percentiles with
the sent/delivered join, the histogram, the result tables, the plots and
the HTML page.  Session start is timed apart (it does not grow with the
input) and so is the run of every job over the same input.

Input: synthetic export segments written with the export schema -- 500,000
sent and 500,000 delivered message events on 8 routes over one hour, in 10
segment files, half the deliveries with a reported latency and half left
for the job to derive (the costly path).

Run: ``.venv/bin/python bench/spark_jobs.py [--json] [--quick] [--events N]``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "spark"))

from _common import Figures, parser  # noqa: E402

TARGET_S = 30.0
EPOCH = 1_795_305_600.0


def synthesise(root: Path, events: int, files: int = 10, seed: int = 7) -> None:
    """Write ``events`` events (half sent, half delivered) as ``files`` segments."""
    import numpy as np
    import pyarrow as pa

    from flowcast.export.layout import partition_dir
    from flowcast.export.schema import SCHEMA, SCHEMA_VERSION
    from flowcast.export.segments import write_parquet

    rng = np.random.default_rng(seed)
    messages = events // 2
    per_file = -(-messages // files)
    routes = np.array([f"r{i}/h/alpha/ -> r{i}/h/beta/" for i in range(8)], dtype=object)
    for f in range(files):
        lo, hi = f * per_file, min(messages, (f + 1) * per_file)
        n = hi - lo
        if n <= 0:
            break
        ids = np.char.add("m", np.arange(lo, hi).astype(str)).astype(object)
        route = rng.integers(0, 8, n)
        sent_at = np.sort(rng.uniform(0, 3600, n))
        latency = rng.exponential(0.02, n) + 0.001
        reported = np.where(rng.random(n) < 0.5, latency, np.nan)
        stamp = np.concatenate([sent_at, sent_at + latency])
        ts = (np.round(stamp * 1e6).astype(np.int64) + int(EPOCH * 1e6)).astype("datetime64[us]")
        src = np.array([r.split(" -> ")[0] for r in routes], dtype=object)[np.concatenate([route, route])]
        dst = np.array([r.split(" -> ")[1] for r in routes], dtype=object)[np.concatenate([route, route])]
        m = 2 * n
        kind = np.array(["sent"] * n + ["delivered"] * n, dtype=object)
        houses = np.array(["a"] * n + ["b"] * n, dtype=object)
        cols = {
            "schema_version": pa.array(np.full(m, SCHEMA_VERSION, np.int16)),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "stamp": pa.array(stamp),
            "estate": pa.array(np.where(houses == "a", "alpha", "beta").astype(object), pa.string()),
            "house": pa.array(houses, pa.string()),
            "kind": pa.array(kind, pa.string()),
            "msg_id": pa.array(np.concatenate([ids, ids]), pa.string()),
            "src": pa.array(src, pa.string()),
            "dst": pa.array(dst, pa.string()),
            "size": pa.array(np.full(m, 100, np.int64)),
            "latency": pa.array(np.concatenate([np.full(n, np.nan), reported]), from_pandas=True),
        }
        table = pa.table([cols.get(fld.name, pa.nulls(m, fld.type)) for fld in SCHEMA], schema=SCHEMA)
        write_parquet(table, partition_dir(root, date(2026, 11, 22), "bench") / f"bench.{f:03d}.parquet")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="events to synthesise (default 1,000,000)")
    args = p.parse_args(argv)
    events = 10_000 if args.quick else args.events
    scratch = Path(tempfile.mkdtemp(prefix="flowcast-bench-spark-", dir=os.path.join(os.path.dirname(HERE), "out") if os.path.isdir(os.path.join(os.path.dirname(HERE), "out")) else None))
    try:
        t0 = time.perf_counter()
        synthesise(scratch / "events", events)
        synth = time.perf_counter() - t0

        import all as all_jobs
        import fcspark
        import latency

        t0 = time.perf_counter()
        spark = fcspark.session("local[*]", "flowcast-bench", local_dir=scratch / "local")
        start = time.perf_counter() - t0
        runs = []
        for _ in range(max(1, args.repeats)):
            t0 = time.perf_counter()
            summary = fcspark.run_jobs(spark, [latency.JOB], scratch / "events", scratch / "out")
            runs.append(time.perf_counter() - t0)
        assert summary["events"] == events, summary
        t0 = time.perf_counter()
        fcspark.run_jobs(spark, all_jobs.JOBS, scratch / "events", scratch / "all")
        every = time.perf_counter() - t0
        spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures = Figures("bench/spark_jobs.py", events=events, repeats=args.repeats, master="local[*]", target_s=TARGET_S)
    figures.add("synthesise input (pyarrow)", synth, "s")
    figures.add("spark session start", start, "s")
    figures.add(
        f"latency job over {events:,} events (first run)", runs[0], "s", ratios={"x target 30 s": runs[0] / TARGET_S}
    )
    figures.add(
        f"latency job over {events:,} events (best)", min(runs), "s", ratios={"x target 30 s": min(runs) / TARGET_S}
    )
    figures.add(f"all {len(all_jobs.JOBS)} jobs over {events:,} events", every, "s", ratios={"x target 30 s": every / TARGET_S})
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
