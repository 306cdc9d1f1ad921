"""Getting a process ready to start Spark, before pyspark is imported.

Spark's own failure when Java is missing or too old is a gateway error
(``[JAVA_GATEWAY_EXITED]``) that names neither Java nor a fix, so Java is
found and checked here first and the error says what to install.  Local
mode also needs ``SPARK_LOCAL_IP=127.0.0.1`` (or Spark binds the external
interface) and ``PYSPARK_PYTHON`` set to this interpreter (or Python
workers start the system python, which has no pyarrow).  A cluster master
URL changes none of the job code; only the loopback pinning is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, MutableMapping
from pathlib import Path

from flowcast.errors import Error

__all__ = ["JavaMissing", "SUPPORTED_JAVA", "find_java_home", "java_version", "is_local", "prepare"]

#: Java feature versions pyspark 4 runs on.
SUPPORTED_JAVA = (17, 21)
_JVM_DIRS = ("/usr/lib/jvm", "/usr/java", "/opt/java", "/Library/Java/JavaVirtualMachines")


class JavaMissing(RuntimeError, Error):
    """No usable Java for Spark; the message says what was looked at and what to do."""


def java_version(java: Path) -> int | None:
    """The feature version (17, 21, ...) ``java -version`` reports, or None."""
    try:
        proc = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def _candidates(env: MutableMapping[str, str], search: Iterable[str]) -> list[Path]:
    homes: list[Path] = []
    if env.get("JAVA_HOME"):
        homes.append(Path(env["JAVA_HOME"]))
    on_path = shutil.which("java", path=env.get("PATH", ""))
    if on_path:
        homes.append(Path(os.path.realpath(on_path)).parent.parent)
    for base in search:
        p = Path(base)
        if p.is_dir():
            homes.extend(sorted(p.iterdir()))
    return homes


def find_java_home(
    env: MutableMapping[str, str] | None = None, search: Iterable[str] = _JVM_DIRS
) -> tuple[Path, int]:
    """A Java home of a supported version: JAVA_HOME, then ``java`` on PATH, then the usual dirs."""
    env = os.environ if env is None else env
    seen: list[str] = []
    for home in _candidates(env, search):
        java = home / "bin" / "java"
        if not java.is_file():
            java = home / "Contents" / "Home" / "bin" / "java"  # macOS bundles
            if not java.is_file():
                continue
        version = java_version(java)
        seen.append(f"{java.parent.parent} (Java {version})")
        if version in SUPPORTED_JAVA:
            return java.parent.parent, version
    looked = "; found " + ", ".join(seen) if seen else "; found no Java at all"
    raise JavaMissing(
        "Spark needs Java 17 or 21 and none was found (looked at JAVA_HOME, java on PATH, "
        f"{', '.join(search) or 'no JVM dirs'}{looked}). Install one (e.g. apt-get install "
        "openjdk-17-jre-headless) or set JAVA_HOME to it."
    )


def is_local(master: str | None) -> bool:
    return master is None or master == "local" or master.startswith("local[") or master.startswith("local-cluster")


def prepare(master: str | None, env: MutableMapping[str, str] | None = None) -> Path:
    """Set JAVA_HOME, PYSPARK_PYTHON and (local mode) SPARK_LOCAL_IP; returns the Java home."""
    env = os.environ if env is None else env
    home, _ = find_java_home(env)
    env["JAVA_HOME"] = str(home)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local(master):
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return home
