"""CAST per subscription: publish-to-delivery latency and seq lag; resyncs, resent and expired ranges.

Run: `spark-submit spark/cast.py --input DIR [--output DIR]` or
`flowcast spark cast --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import castmetrics  # noqa: E402
import fcspark  # noqa: E402

JOB = fcspark.Job("cast", castmetrics.cast, None)


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("cast", [JOB], __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
