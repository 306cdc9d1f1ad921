"""Routed share-to-share latency, loss and refusals per route, across every hop (routers' events).

Run: `spark-submit spark/routed.py --input DIR [--output DIR]` or
`flowcast spark routed --input DIR [--master URL]`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcspark  # noqa: E402
import metrics  # noqa: E402

JOB = fcspark.Job("routed", metrics.routed, None)


def main(argv: Sequence[str] | None = None) -> int:
    return fcspark.job_main("routed", [JOB], __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
