"""``flowcast demo``: the ping-pong example, end to end on loopback, narrated.

Starts estates alpha and beta (``houses/pingpong-*.yaml``) as two
``flowcast run`` processes -- each a supervisor with its house processes,
joined by an encrypted road on 127.0.0.1 -- waits until the five volleys
are over, prints what the houses logged and what ``flowcast status`` sees,
then stops both.  Everything is bounded in time; a stuck demo says where.
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


def example_root(*needed: str) -> Path | None:
    """The checkout (or, failing that, the working folder) holding every one of ``needed``
    (paths like ``houses/pingpong-alpha.yaml``), or None: an installed package has no examples."""
    for place in (Path(__file__).resolve().parents[2], Path.cwd()):
        if all((place / path).is_file() for path in needed):
            return place
    return None


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
    root = example_root("houses/pingpong-alpha.yaml", "flows/ping.flo")
    if root is None:
        print("flowcast demo: run it from a flowcast checkout (it needs houses/pingpong-*.yaml and flows/ping.flo)", file=sys.stderr)
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
