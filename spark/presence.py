"""Presence timeline of each remote estate as its peers saw it.

Run: `spark-submit spark/presence.py --input DIR [--output DIR]` or
`flowcast spark presence --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcspark  # noqa: E402
import metrics  # noqa: E402
import report  # noqa: E402

JOB = fcspark.Job("presence", metrics.presence, report.plot_presence)


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("presence", [JOB], __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
