"""Process helpers shared by everything that starts servers: liveness that sees zombies, group stops."""

from __future__ import annotations

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
