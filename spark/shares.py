"""Each logged share of the application: updates, updates per second, its fields' range and value over time.

Run: `spark-submit spark/shares.py --input DIR [--output DIR]` or
`flowcast spark shares --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcspark  # noqa: E402
import report  # noqa: E402
import sharemetrics  # noqa: E402

JOB = fcspark.Job("shares", sharemetrics.shares, report.plot_shares)


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("shares", [JOB], __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
