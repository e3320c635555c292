"""Process helpers shared by everything that starts servers: liveness that sees zombies, group stops."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """True while the process exists and has not exited (a zombie answers kill(0) but is gone)."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_process_group(pid: int, timeout_s: float = 20.0) -> None:
    """SIGTERM the process's group, then SIGKILL what is left after timeout_s."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not alive(pid):
            return


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now, found through /proc parent links.

    Taken before a stop: a child that moved to a process group of its own (Airflow's task workers do)
    escapes a group signal, and once its parent is gone it can no longer be traced to it.
    """
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().split(")")[-1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def stop_processes(pids: set[int], timeout_s: float = 10.0) -> int:
    """SIGTERM each live process, SIGKILL what is left after timeout_s; returns how many were alive."""
    live = {pid for pid in pids if alive(pid)}
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + timeout_s
        while any(alive(pid) for pid in live) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not any(alive(pid) for pid in live):
            break
    return len(live)
