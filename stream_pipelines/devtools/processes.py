"""Process helpers shared by everything that starts servers: liveness that sees zombies, group stops."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from stream_pipelines.core.procfs import proc_stat, process_exists


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (another process may still take it before the caller binds)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def alive(pid: int) -> bool:
    """True while the process runs: our own exited child is reaped, anyone's zombie counts as gone."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    return process_exists(pid)


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


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    argv: tuple[str, ...]


def process_table() -> dict[int, Proc]:
    """Every process now: its parent, state (``Z`` for a zombie) and command line."""
    table: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = proc_stat(int(entry.name))
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if len(fields) > 1:
            argv = tuple(arg for arg in command.split("\0") if arg)
            table[int(entry.name)] = Proc(int(entry.name), int(fields[1]), fields[0], argv)
    return table


def cpu_seconds(pids: set[int]) -> float:
    """User plus system CPU of these processes and of their children they have reaped, in seconds.

    A process that is gone counts nothing: take the set and both readings while it lives.
    """
    ticks = 0
    for pid in pids:
        fields = proc_stat(pid)
        if len(fields) > 14:
            # utime, stime, cutime, cstime: fields 14-17 of /proc/<pid>/stat, 11-14 after the name.
            ticks += sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of the process and of every process below it now (a driver JVM and its Python workers)."""
    return cpu_seconds({pid, *descendants(pid)})


def parent_pid(pid: int) -> int | None:
    """The parent of a live process, from /proc; None once it is gone."""
    fields = proc_stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now, found through /proc parent links.

    Taken before a stop: a child that moved to a process group of its own (Airflow's task workers do)
    escapes a group signal, and once its parent is gone it can no longer be traced to it.
    """
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        parent = parent_pid(int(entry.name))
        if parent is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def started_with(pid: int, variable: str, value: str) -> bool:
    """Whether the process runs with ``variable=value`` in its environment (a private stack or the demo
    hands its settings to everything it starts as ``PIPELINE__...`` variables)."""
    return environment_of(pid).get(variable) == value


def environment_of(pid: int) -> dict[str, str]:
    """The environment the process started with; empty when it is gone or not ours to read."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.partition(b"=") for entry in environ.split(b"\0") if entry)
    return {name.decode(errors="replace"): value.decode(errors="replace") for name, _, value in pairs}


def processes_started_with(variable: str, value: str) -> set[int]:
    """Every live process (not this one) with ``variable=value`` in its environment."""
    return {
        pid
        for pid, proc in process_table().items()
        if pid != os.getpid() and proc.state != "Z" and started_with(pid, variable, value)
    }


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
