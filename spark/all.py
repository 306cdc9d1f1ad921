"""Every flowcast job over one load of the input, and one report linking them all.

Run: `spark-submit spark/all.py --input DIR [--output DIR]` or
`flowcast spark all --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cast  # noqa: E402
import causal  # noqa: E402
import fcspark  # noqa: E402
import latency  # noqa: E402
import loss  # noqa: E402
import presence  # noqa: E402
import routed  # noqa: E402
import shares  # noqa: E402
import throughput  # noqa: E402

JOBS = [shares.JOB, routed.JOB, latency.JOB, throughput.JOB, loss.JOB, causal.JOB, presence.JOB, cast.JOB]


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("all", JOBS, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
