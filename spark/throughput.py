"""Delivered messages and bytes per route per minute, with a throughput-over-time plot.

Run: `spark-submit spark/throughput.py --input DIR [--output DIR]` or
`flowcast spark throughput --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcspark  # noqa: E402
import metrics  # noqa: E402
import report  # noqa: E402

JOB = fcspark.Job("throughput", metrics.throughput, report.plot_throughput)


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("throughput", [JOB], __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
