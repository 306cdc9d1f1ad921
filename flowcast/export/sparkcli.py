"""``flowcast spark JOB --input DIR [--master URL]``: run a job from ``spark/``.

The jobs are plain PySpark scripts so ``spark-submit spark/JOB.py`` works
unchanged on a cluster; this command runs the same script in-process,
after checking Java first (a missing Java otherwise surfaces as an opaque
gateway error) and pinning local mode to loopback.  The ``spark/`` folder
is found next to the flowcast package (a source checkout) or through
``FLOWCAST_SPARK_JOBS``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from flowcast.export.sparkenv import JavaMissing, find_java_home

__all__ = ["available_jobs", "jobs_dir", "main"]

_HELPERS = {"fcspark", "metrics", "castmetrics", "report"}


def jobs_dir() -> Path:
    env = os.environ.get("FLOWCAST_SPARK_JOBS")
    if env:
        return Path(env)
    import flowcast

    return Path(flowcast.__file__).resolve().parents[1] / "spark"


def available_jobs(where: Path | None = None) -> list[str]:
    where = where or jobs_dir()
    if not where.is_dir():
        return []
    return sorted(
        p.stem
        for p in where.glob("*.py")
        if p.stem not in _HELPERS and not p.stem.startswith("_") and "def main(" in p.read_text(encoding="utf-8")
    )


def _usage(jobs: list[str]) -> str:
    return (
        "usage: flowcast spark JOB --input DIR [--output DIR] [--master URL]\n\n"
        "jobs: " + (", ".join(jobs) if jobs else f"(none found in {jobs_dir()})")
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    where = jobs_dir()
    jobs = available_jobs(where)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(jobs))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in jobs:
        from flowcast.flow.errors import did_you_mean

        hint = did_you_mean(name, jobs)
        print(f"flowcast spark: no job {name!r}{'; ' + hint if hint else ''}\n{_usage(jobs)}", file=sys.stderr)
        return 2
    try:
        find_java_home()
    except JavaMissing as error:
        print(f"flowcast spark: {error}", file=sys.stderr)
        return 2
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    module = importlib.import_module(name)
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
