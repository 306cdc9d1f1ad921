"""``flowcast spark JOB --input DIR [--master URL]``: run a job from ``spark/``.

The jobs are plain PySpark scripts so ``spark-submit spark/JOB.py`` works
unchanged on a cluster; this command runs the same script in-process,
after checking Java first (a missing Java otherwise surfaces as an opaque
gateway error) and pinning local mode to loopback.  The jobs are found
through ``FLOWCAST_SPARK_JOBS``, else in the ``spark/`` folder next to the
flowcast package (a source checkout, so edits there count at once), else in
``flowcast/export/spark_jobs/``, where the wheel carries the same scripts
(setup.py maps ``spark/`` there).
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


#: where an installed wheel keeps the scripts of ``spark/`` (see setup.py)
PACKAGED_JOBS = Path(__file__).resolve().parent / "spark_jobs"


def jobs_dir() -> Path:
    """The folder of job scripts: the override, the checkout's ``spark/``, or the packaged copy.

    The checkout wins over the packaged copy so that a developer running an
    editable install gets the scripts they are editing, never a stale copy."""
    env = os.environ.get("FLOWCAST_SPARK_JOBS")
    if env:
        return Path(env)
    import flowcast

    checkout = Path(flowcast.__file__).resolve().parents[1] / "spark"
    # fcspark.py marks the jobs' folder: an unrelated site-packages/spark is not it
    if (checkout / "fcspark.py").is_file() or not PACKAGED_JOBS.is_dir():
        return checkout
    return PACKAGED_JOBS


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
        "usage: flowcast spark JOB --input DIR [--output DIR] [--master URL] [--local-dir DIR]\n\n"
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
