"""Causal delivery per topic and publisher: buffering lag, rejected and abandoned messages, evidence, fetches.

Run: `spark-submit spark/causal.py --input DIR [--output DIR]` or
`flowcast spark causal --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcspark  # noqa: E402
import metrics  # noqa: E402
import report  # noqa: E402

JOB = fcspark.Job("causal", metrics.causal, report.causal_notes)


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("causal", [JOB], __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
