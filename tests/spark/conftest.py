"""One local SparkSession for every Spark test (starting one costs 5-16 s).

local[2] with 2 shuffle partitions, no UI, the fast JVM options and its
scratch space in a temporary folder: the settings the jobs use, sized for
tiny inputs.  A missing Java fails here, loudly, with what to install.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SPARK_DIR = Path(__file__).resolve().parents[2] / "spark"
if str(SPARK_DIR) not in sys.path:
    sys.path.insert(0, str(SPARK_DIR))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from flowcast.export.sparkenv import JavaMissing

    import fcspark

    try:
        session = fcspark.session(
            "local[2]", "flowcast-tests", local_dir=tmp_path_factory.mktemp("spark-local"), shuffle_partitions=2
        )
    except JavaMissing as error:
        pytest.fail(f"Spark tests need Java: {error}", pytrace=False)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo (a virtual-clock flow plus scripted traffic) as ``flowcast export`` collects it."""
    from flowcast.export.collect import collect
    from flowcast.export.demo import EXPECTED, write_demo

    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "live", batch=16)  # many flushes, as a busy house would
    report = collect([root / "live"], root / "collected")
    assert (report.events, report.skipped) == (EXPECTED["events"], [])
    return root / "collected"
