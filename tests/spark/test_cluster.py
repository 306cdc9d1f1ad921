"""``flowcast spark all --master spark://...`` against a real standalone cluster on loopback.

The pip wheel has no ``sbin/start-*.sh``, so the master and one worker are
started through ``pyspark/bin/spark-class`` (which ``exec``s the JVM, so the
pid we hold is the daemon's own) and ended by that pid, whatever the test
did.  Readiness is read from the master's JSON status page (a worker ALIVE
with one core), never from a sleep.  The worker gets one core and a modest
heap: the box is shared.  The job runs as the command a user would type,
in its own process (its own driver JVM), and its tables must equal the
ones local mode computes from the same export.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import all as all_jobs
import fcspark
from flowcast.export.demo import EXPECTED
from flowcast.export.sparkenv import prepare

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 90.0  # two JVMs on a loaded 2-core box: generous, but bounded
JOB_TIMEOUT = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"


@dataclass
class Cluster:
    url: str
    ui: str
    logs: list[Path]

    def status(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as reply:
                return json.load(reply)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:] for p in self.logs if p.exists())


def _stop(proc: subprocess.Popen) -> None:
    """End one daemon by its pid: SIGTERM, a bounded wait, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


def _wait_for(condition, timeout: float, procs: list[subprocess.Popen]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if any(p.poll() is not None for p in procs):
            return False  # a daemon died: waiting longer cannot help
        time.sleep(0.25)  # polling interval of a condition, not synchronisation by sleep
    return False


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    env = dict(os.environ)
    prepare("spark://127.0.0.1", env)  # JAVA_HOME and PYSPARK_PYTHON, checked with a clear error
    scratch = tmp_path / "cluster"
    (scratch / "local").mkdir(parents=True)
    (scratch / "work").mkdir()
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(scratch / "local"),
        SPARK_WORKER_DIR=str(scratch / "work"),
        SPARK_LOG_DIR=str(scratch),
        SPARK_PID_DIR=str(scratch),
        SPARK_DAEMON_MEMORY="512m",
        SPARK_DAEMON_JAVA_OPTS=fcspark.FAST_JVM,
    )
    port, ui_port = _free_port(), _free_port()
    spark_class = str(_spark_class())
    url, ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
    logs = [scratch / "master.log", scratch / "worker.log"]
    procs: list[subprocess.Popen] = []
    handles = []
    try:
        for log, args in zip(
            logs,
            (
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
                [
                    "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", str(_free_port()),
                    "--webui-port", str(_free_port()), "--cores", "1", "--memory", "1536m",
                    "--work-dir", str(scratch / "work"),
                ],
            ),
        ):
            handle = open(log, "wb")
            handles.append(handle)
            procs.append(
                subprocess.Popen([spark_class, *args], env=env, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            )
        running = Cluster(url, ui, logs)

        def worker_alive() -> bool:
            status = running.status()
            return bool(status) and status.get("status") == "ALIVE" and any(
                w.get("state") == "ALIVE" and w.get("cores") == 1 for w in status.get("workers", [])
            )

        if not _wait_for(worker_alive, START_TIMEOUT, procs):
            pytest.fail(f"standalone master + worker not up within {START_TIMEOUT:.0f} s\n{running.log_tail()}")
        yield running
    finally:
        for proc in reversed(procs):  # worker first, so the master does not log a lost worker
            _stop(proc)
        for handle in handles:
            handle.close()


def _table(output: Path, name: str) -> list[tuple]:
    """A result table's rows in a canonical order (partition order differs between masters)."""
    rows = pq.read_table(output / "tables" / name).to_pylist()
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_spark_all_on_a_standalone_cluster_gives_the_local_tables(
    cluster: Cluster, spark, demo: Path, tmp_path: Path
) -> None:
    local_out = tmp_path / "local"
    local = fcspark.run_jobs(spark, all_jobs.JOBS, demo, local_out)
    cluster_out = tmp_path / "on-cluster"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    command = [
        sys.executable, "-m", "flowcast.cli.main", "spark", "all", "--master", cluster.url,
        "--input", str(demo), "--output", str(cluster_out), "--local-dir", str(tmp_path / "driver-local"),
    ]  # fmt: skip
    # Its own process group: the driver's JVM is its child, and a hung job must not outlive the test.
    job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=30)
        pytest.fail(f"flowcast spark all took over {JOB_TIMEOUT:.0f} s\n{stderr[-4000:]}\n{cluster.log_tail()}")
    assert job.returncode == 0, f"{stdout}\n{stderr[-4000:]}\n{cluster.log_tail()}"
    assert f"all: {EXPECTED['events']} events from 2 file(s), 0 skipped" in stdout

    # The job really ran on the cluster: the master lists it as a finished application.
    status = cluster.status()
    assert status is not None
    apps = [a["name"] for a in status.get("completedapps", []) + status.get("activeapps", [])]
    assert "flowcast-all" in apps, apps

    remote = json.loads((cluster_out / "summary.json").read_text())
    assert remote["events"] == local["events"] == EXPECTED["events"]
    names = sorted(t for job in local["jobs"].values() for t in job["tables"])
    assert names and names == sorted(t for job in remote["jobs"].values() for t in job["tables"])
    for name in names:
        here, there = _table(local_out, name), _table(cluster_out, name)
        assert here, f"table {name} is empty: the comparison would prove nothing"
        assert _same(here, there), f"table {name} differs between local[2] and the cluster"
