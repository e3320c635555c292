"""Processes on this host, as the lease, the supervisor, the control store's records and the scratch
clean-up judge them: from ``/proc`` on Linux (a zombie has exited), from signal 0 elsewhere. A record
names the host that wrote it (``this_host``), since its pid means a process only there.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def proc_stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (state, ppid, pgrp, ...); empty once the process is gone."""
    try:
        # The command name in parentheses may hold spaces and ")"; the fields after it do not.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return []


# A zombie has exited: under a container's PID 1 that does not reap orphans, a kill -9'd driver stays
# one for good, and must not hold its app's lease or look like a driver still draining.
_GONE_STATES = ("Z", "X")


def process_exists(pid: object) -> bool:
    """Whether a process of that pid runs on this host (records name the pid of who wrote them)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    if not _has_proc():
        return _signalable(pid)  # no /proc (not Linux): a zombie cannot be told apart here
    fields = proc_stat(pid)
    return bool(fields) and fields[0] not in _GONE_STATES


def this_host() -> str:
    """The name a record gives for the host that wrote it: its pid names a process only there."""
    return socket.gethostname()


def ended_on_this_host(host: object, pid: object) -> bool:
    """Whether a record written on ``host`` names a process known to have ended: on this host, a pid that
    no longer runs. Another host's process cannot be looked at from here, so it is never known to have
    ended."""
    return host == this_host() and not process_exists(pid)


def _has_proc() -> bool:
    return Path("/proc/self/stat").exists()


def _signalable(target: int, *, group: bool = False) -> bool:
    """Whether signal 0 reaches the process (or the process group): it exists, zombie or not."""
    try:
        (os.killpg if group else os.kill)(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    return True


def process_age_s(pid: int) -> float | None:
    """How long the process has run; None once it is gone."""
    fields = proc_stat(pid)
    try:
        # starttime: field 22 of /proc/<pid>/stat (20th after the name), in clock ticks since boot.
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None
    return time.clock_gettime(time.CLOCK_BOOTTIME) - started_s


def group_running(group: int) -> bool:
    """Whether any process of that process group runs (its exited, unreaped members do not count)."""
    if not _signalable(group, group=True):
        return False
    if not _has_proc():
        return True  # no /proc (not Linux): a zombie cannot be told apart here
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))
            if len(fields) > 2 and fields[2] == str(group) and fields[0] not in _GONE_STATES:
                return True
    return False
