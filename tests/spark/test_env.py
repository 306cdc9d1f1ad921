"""Finding Java and the CLI's plain answers, without starting Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcast.export import sparkcli
from flowcast.export.sparkenv import JavaMissing, find_java_home, is_local, prepare


def test_java_17_is_found_here() -> None:
    home, version = find_java_home()
    assert version in (17, 21) and (home / "bin" / "java").is_file()


def test_missing_java_says_what_to_install(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "JAVA_HOME": str(tmp_path / "nope")}
    with pytest.raises(JavaMissing, match="Spark needs Java 17 or 21 and none was found.*set JAVA_HOME"):
        find_java_home(env, search=[])


def test_local_masters_are_pinned_to_loopback_clusters_are_not() -> None:
    env: dict[str, str] = {"PATH": "/usr/bin:/bin"}
    prepare("local[*]", env)
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1" and "JAVA_HOME" in env and env["PYSPARK_PYTHON"]
    env = {"PATH": "/usr/bin:/bin"}
    prepare("spark://head:7077", env)
    assert "SPARK_LOCAL_IP" not in env
    assert is_local(None) and is_local("local[2]") and not is_local("yarn")


def test_cli_lists_jobs_and_suggests_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(sparkcli.available_jobs()) >= {"latency", "throughput", "loss", "causal", "presence", "all", "stream_latency"}
    assert sparkcli.main(["latncy", "--input", "x"]) == 2
    assert "no job 'latncy'; did you mean 'latency'?" in capsys.readouterr().err


def test_cli_without_java_fails_before_spark(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setattr("flowcast.export.sparkenv._JVM_DIRS", ())
    monkeypatch.setattr(sparkcli, "find_java_home", lambda: find_java_home(search=[]))
    assert sparkcli.main(["latency", "--input", str(tmp_path)]) == 2
    assert "Spark needs Java 17 or 21" in capsys.readouterr().err
