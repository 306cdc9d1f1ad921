"""Delivery latency p50/p95/p99 per route, with a latency histogram per route.

Run: `spark-submit spark/latency.py --input DIR [--output DIR]` or
`flowcast spark latency --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcspark  # noqa: E402
import metrics  # noqa: E402
import report  # noqa: E402

JOB = fcspark.Job("latency", metrics.latency, report.plot_latency)


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("latency", [JOB], __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
