"""Keeps one command running, as a service manager does (systemd's ``Restart=always``): when it exits or
dies it is started again after a pause, which doubles while it keeps failing fast. `make up` and
`make chaos` run each Airflow component under one, so that a scheduler killed with -9, or a component
that gave up while the metadata database was away, comes back by itself. A production host does this
with its own service manager (see docs/deploy.md).

    python -m stream_pipelines.devtools.keeper --name airflow-scheduler-a \\
        --kill-on "waiting for running tasks to finish" -- airflow scheduler

``--kill-on`` names a line of the command's output after which it is stuck rather than ending: an
Airflow scheduler whose loop failed (its metadata database went away) then waits for its running
tasks, the supervisors, which never end. Unless the keeper was asked to stop, the command is killed
(-9) a few seconds after that line, as a crash would end it, and started again.

SIGTERM or SIGINT stops the command and the keeper after it: the command gets the signal (once: a
signal to the process group reaches it anyway), then SIGKILL after ``STOP_GRACE_S``. The command's
output and a line for each start and end go to the keeper's output, the command's log.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import BinaryIO

from stream_pipelines.devtools.processes import process_table

# The first pause before a start again, and the longest: doubled after each run shorter than STABLE_S.
RESTART_DELAY_S = (5.0, 60.0)
STABLE_S = 60.0
# Below the 20 s that `make down` (stop_process_group) waits before its own SIGKILL.
STOP_GRACE_S = 15.0
# How long a command that printed its --kill-on line may take to end on its own.
STUCK_GRACE_S = 5.0
# A command that got the group's signal needs no second one (Airflow reads a second as "do not wait").
FORWARD_AFTER_S = 2.0


def say(name: str, message: str) -> None:
    line = f"[{datetime.now(UTC).isoformat(timespec='seconds')}] keeper {name}: {message}\n"
    sys.stdout.buffer.write(line.encode())
    sys.stdout.buffer.flush()


def next_delay(previous_s: float | None, ran_s: float) -> float:
    """The pause before the next start: the first one after a stable run, else double the last."""
    first, longest = RESTART_DELAY_S
    if previous_s is None or ran_s >= STABLE_S:
        return first
    return min(previous_s * 2, longest)


def _copy(output: BinaryIO, kill_on: bytes | None, stuck: threading.Event) -> None:
    """The command's output onto the keeper's, line by line; ``stuck`` set at the --kill-on line."""
    for line in iter(output.readline, b""):
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
        if kill_on is not None and kill_on in line:
            stuck.set()


def keep(name: str, command: Sequence[str], kill_on: str | None = None) -> int:
    stop_asked: float | None = None

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stop_asked
        stop_asked = stop_asked or time.monotonic()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    delay: float | None = None
    while stop_asked is None:
        started = time.monotonic()
        try:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as error:
            say(name, f"cannot start {command[0]}: {error}")
            return 2
        stuck = threading.Event()
        copier = threading.Thread(
            target=_copy, args=(child.stdout, kill_on.encode() if kill_on else None, stuck), daemon=True
        )
        copier.start()
        say(name, f"started (pid {child.pid})")
        forwarded, stuck_at = False, None
        while child.poll() is None:
            now = time.monotonic()
            if stop_asked is not None:
                if not forwarded and now - stop_asked >= FORWARD_AFTER_S:
                    child.terminate()
                    forwarded = True
                if now - stop_asked >= STOP_GRACE_S:
                    say(name, f"pid {child.pid} did not stop within {STOP_GRACE_S:.0f}s: killed")
                    child.kill()
            elif stuck.is_set():
                stuck_at = stuck_at or now
                if now - stuck_at >= STUCK_GRACE_S:
                    say(name, f"pid {child.pid} printed {kill_on!r} and did not end: killed, as a crash")
                    child.kill()
            time.sleep(0.2)
        copier.join(timeout=5)
        ran = time.monotonic() - started
        if stop_asked is not None:
            say(name, f"stopped (pid {child.pid}, exit {child.returncode})")
            return 0
        delay = next_delay(delay, ran)
        ended = f"pid {child.pid} ended with {child.returncode} after {ran:.0f}s"
        say(name, f"{ended}; starting again in {delay:.0f}s")
        deadline = time.monotonic() + delay
        while stop_asked is None and time.monotonic() < deadline:
            time.sleep(0.2)
    return 0


def kept_pid(keeper_pid: int) -> int | None:
    """The process a keeper runs now (its child); None between two starts."""
    table = process_table().values()
    children = [proc.pid for proc in table if proc.ppid == keeper_pid and proc.state != "Z"]
    return min(children) if children else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="what the log lines call the command")
    parser.add_argument(
        "--kill-on", help="a line of the command's output after which it is stuck: killed and started again"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to keep running: give it after --")
    return keep(args.name, command, args.kill_on)


if __name__ == "__main__":
    sys.exit(main())
