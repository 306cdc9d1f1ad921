"""``flowcast demo``: the ping-pong example, end to end on loopback, narrated.

Starts estates alpha and beta (``houses/pingpong-*.yaml``) as two
``flowcast run`` processes -- each a supervisor with its house processes,
joined by an encrypted road on 127.0.0.1 -- waits until the five volleys
are over, prints what the houses logged and what ``flowcast status`` sees,
then stops both.  Everything is bounded in time; a stuck demo says where.

In a checkout the demo runs in ``houses/run/``; an installed flowcast runs
it in a fresh temporary folder holding a copy of the examples the wheel
carries (never in site-packages, which may be read-only or shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ESTATES = ("pingpong-beta", "pingpong-alpha")


#: where an installed wheel keeps houses/, flows/ and behaviors/ (setup.py maps them here)
PACKAGED_EXAMPLES = Path(__file__).resolve().parent / "examples"
EXAMPLE_FOLDERS = ("houses", "flows", "behaviors")


def example_root(*needed: str) -> Path | None:
    """The checkout (or, failing that, the working folder) holding every one of ``needed``
    (paths like ``houses/pingpong-alpha.yaml``), or None when neither has them."""
    for place in (Path(__file__).resolve().parents[2], Path.cwd()):
        if all((place / path).is_file() for path in needed):
            return place
    return None


def demo_root(command: str, *needed: str) -> Path | None:
    """Where a demo runs: the checkout (or working folder) holding ``needed``, else a
    temporary copy of the packaged examples, else None (with the reason printed).

    The copy is made because a demo writes next to its layouts (keys in
    ``houses/keeps``, logs and caches in ``houses/run``), and an installed
    package's folder is no place for that.  The copy is left behind so its
    logs can be read after the demo; it lives in the system's temp folder."""
    root = example_root(*needed)
    if root is not None:
        return root
    if not all((PACKAGED_EXAMPLES / path).is_file() for path in needed):
        print(f"{command}: the examples are missing ({', '.join(needed)}): neither a flowcast checkout"
              f" nor the installed package ({PACKAGED_EXAMPLES}) holds them", file=sys.stderr)
        return None
    root = Path(tempfile.mkdtemp(prefix="flowcast-demo-"))
    for folder in EXAMPLE_FOLDERS:
        if (PACKAGED_EXAMPLES / folder).is_dir():
            shutil.copytree(PACKAGED_EXAMPLES / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    print(f"{command}: running in {root} (a copy of the examples installed with flowcast)")
    return root


def _flow_lines(log: Path) -> list[str]:
    """What the flow printed: the log minus the timestamped runtime lines."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line and not line[:4].isdigit() and not line.startswith("---")]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["cast"]:  # flowcast demo cast: CAST between estates abc and xyz
        from flowcast.house.castdemo import main as cast_demo

        return cast_demo(argv[1:])
    if argv[:1] == ["causal"]:  # flowcast demo causal: a causal log between estates alpha, beta and gamma
        from flowcast.house.causaldemo import main as causal_demo

        return causal_demo(argv[1:])
    parser = argparse.ArgumentParser(prog="flowcast demo", description=__doc__.splitlines()[0],
                                     epilog="'flowcast demo cast' and 'flowcast demo causal' run the CAST and causal examples instead (... --help)")
    parser.add_argument("--timeout", type=float, default=30.0, help="give up after this many seconds (default 30)")
    args = parser.parse_args(argv)
    root = demo_root("flowcast demo", "houses/pingpong-alpha.yaml", "houses/pingpong-beta.yaml", "flows/ping.flo", "flows/pong.flo")
    if root is None:
        return 2
    houses = root / "houses"
    for estate in ("alpha", "beta"):
        shutil.rmtree(houses / "run" / estate, ignore_errors=True)  # this run's logs only
    print("flowcast demo: ping-pong between estates alpha and beta on 127.0.0.1 (UDP 7530, 7531)")
    print("  alpha runs flows/ping.flo, beta runs flows/pong.flo; the ball is a share routed over the road\n")
    command = [sys.executable, "-m", "flowcast.cli.main", "run"]
    outputs = {name: tempfile.TemporaryFile() for name in ESTATES}  # not a pipe: nobody reads it while it runs
    processes = {
        name: subprocess.Popen([*command, str(houses / f"{name}.yaml")], cwd=root, start_new_session=True,
                               stdout=outputs[name], stderr=subprocess.STDOUT)
        for name in ESTATES
    }
    alpha_log = houses / "run" / "alpha" / "logs" / "manor.log"
    beta_log = houses / "run" / "beta" / "logs" / "manor.log"
    end = time.monotonic() + args.timeout
    over = False
    try:
        while time.monotonic() < end:
            if any(p.poll() is not None for p in processes.values()):
                break
            if any("ping-pong over" in line for line in _flow_lines(alpha_log)):
                over = True
                break
            time.sleep(0.1)
        time.sleep(1.2)  # let each house write one more status file, for the table below
        print("beta (pong) printed:")
        for line in _flow_lines(beta_log):
            print("   ", line)
        print("alpha (ping) printed:")
        for line in _flow_lines(alpha_log):
            print("   ", line)
        print()
        from flowcast.house.status import main as status

        status([str(houses / "pingpong-alpha.yaml"), "--once"])
    finally:
        for name, process in processes.items():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for name, process in processes.items():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            outputs[name].seek(0)
            out = outputs[name].read()
            if process.returncode not in (0, -signal.SIGTERM) or not over:
                print(f"\n{name} exited {process.returncode}:\n{out.decode(errors='replace')}", file=sys.stderr)
    if not over:
        print(f"flowcast demo: no 'ping-pong over' within {args.timeout:g} s; logs in {houses / 'run'}", file=sys.stderr)
        return 1
    print(f"\nflowcast demo: done; full logs in {houses / 'run'}/*/logs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
