"""The wheel works without the checkout: ``--version``, ``demo`` and ``spark all`` from an installed flowcast.

Everything the checkout gives for free -- ``spark/`` beside the package,
``houses/`` and ``flows/`` in the working folder -- is exactly what an
installed package lacks, so only a real install proves the wheel carries
it.  The wheel is built from a copy of the source (a build writes
``build/`` and stale files there would leak into the next wheel), with
the interpreter's own setuptools and no index, then installed into a new
venv.  That venv gets the dependencies from the project venv's
site-packages through a plain ``.pth`` path line: a plain line does not
run the editable install's finder there, so ``flowcast`` can only come
from the wheel -- which the first test checks.  Every command runs with
a temporary working folder, outside the checkout, each bounded in time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# local state and build output, never part of what a wheel is built from
SKIP_NAMES = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis", "out"}
SKIP_PATHS = {ROOT / "houses" / "run", ROOT / "houses" / "keeps"}


def _can_build_offline() -> bool:
    """bdist_wheel ships in setuptools since 70.1; before that it needs the wheel package."""
    import importlib.util

    return importlib.util.find_spec("setuptools.command.bdist_wheel") is not None or (
        importlib.util.find_spec("wheel") is not None)


def _ignore(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in SKIP_NAMES or n.endswith(".egg-info") or Path(folder, n) in SKIP_PATHS}


class Installed:
    """The venv holding the wheel, and a way to run its commands from outside the checkout."""

    def __init__(self, venv: Path, work: Path) -> None:
        self.venv = venv
        self.work = work  # the working folder of every command; TMPDIR too, so the demo's copy lands here
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLOWCAST_SPARK_JOBS", "PYTHONHOME")}
        self.env["TMPDIR"] = str(work / "tmp")
        (work / "tmp").mkdir()

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def site_packages(self) -> Path:
        return Path(self.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())

    def run(self, command: list[str], timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(command, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done

    def flowcast(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.venv / "bin" / "flowcast"), *args], timeout=timeout, check=check)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    # the test extra installs setuptools>=70.1: a venv without it is a broken set-up, not a reason to pass
    assert _can_build_offline(), "building the wheel offline needs setuptools>=70.1 (or wheel): pip install -e '.[test]'"
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=_ignore, symlinks=True)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(base / "dist"), str(source)],
        capture_output=True, text=True, timeout=120,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (base / "dist").glob("flowcast-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index", "-q",
         str(wheel)],
        check=True, capture_output=True, timeout=120,
    )
    work = base / "work"
    work.mkdir()
    env = Installed(venv, work)
    # the dependencies (pyyaml, pyarrow, pyspark, ...): the project venv's site-packages, appended after the venv's own
    deps = "\n".join(dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]))
    (env.site_packages() / "_flowcast_test_deps.pth").write_text(deps + "\n")
    return env


def test_the_installed_wheel_is_what_runs(installed: Installed) -> None:
    done = installed.run([str(installed.python), "-c", "import flowcast; print(flowcast.__file__)"])
    where = Path(done.stdout.strip())
    assert where.is_relative_to(installed.venv), where
    assert not where.is_relative_to(ROOT)
    packaged = where.parent
    assert (packaged / "export" / "spark_jobs" / "all.py").is_file()
    assert (packaged / "house" / "examples" / "houses" / "pingpong-alpha.yaml").is_file()
    assert not (packaged / "house" / "examples" / "houses" / "run").exists()  # a checkout's logs are not packaged


def test_version_comes_from_the_metadata(installed: Installed) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert installed.flowcast("--version", timeout=30).stdout.strip() == f"flowcast {version}"


def test_demo_runs_outside_a_checkout_in_a_temporary_folder(installed: Installed) -> None:
    site = installed.site_packages()
    before = sorted(p for p in site.rglob("*") if "__pycache__" not in p.parts)
    done = installed.flowcast("demo", "--timeout", "30", timeout=90)
    assert "ping-pong over: five volleys returned" in done.stdout
    assert [f"pong: ball.in value={n}" in done.stdout for n in range(1, 6)] == [True] * 5
    runs = list((installed.work / "tmp").glob("flowcast-demo-*"))
    assert len(runs) == 1, runs
    assert f"running in {runs[0]}" in done.stdout
    assert (runs[0] / "houses" / "run" / "alpha" / "logs" / "manor.log").is_file()
    after = sorted(p for p in site.rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # nothing written into the installed package
    assert sorted(p.name for p in installed.work.iterdir()) == ["tmp"]  # nor into the working folder


def test_spark_all_finds_its_jobs_in_the_package(installed: Installed) -> None:
    from flowcast.export.demo import EXPECTED

    done = installed.run([str(installed.python), "-c", "from flowcast.export.sparkcli import jobs_dir; print(jobs_dir())"])
    assert Path(done.stdout.strip()).is_relative_to(installed.venv)
    installed.run([str(installed.python), "-c", "from flowcast.export.demo import write_demo; write_demo('live')"])
    installed.flowcast("export", "live", "--out", "collected", "--include-today", "--no-progress")
    done = installed.flowcast("spark", "all", "--input", "collected", "--output", "report", timeout=180)
    assert f"all: {EXPECTED['events']} events" in done.stdout, done.stdout + done.stderr
    assert (installed.work / "report" / "index.html").is_file()
