"""The bookkeeping every local test server shares (the Spark standalone cluster, HDFS): daemons under one
home folder, each with a pid file and a log file, waited for until they answer."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from stream_pipelines.devtools.processes import alive, stop_process_group


@dataclass
class LocalDaemons:
    home: Path
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False, repr=False)
    # What a failure to start raises (each server has its own error type).
    failure: ClassVar[type[Exception]] = RuntimeError
    # The file under ``home`` that keeps what a restart (or another process's ``attach``) must find again.
    state_file: ClassVar[str] = "state.json"

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> bool:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    @classmethod
    def saved_state(cls, home: Path) -> dict[str, Any]:
        """What the last ``start`` under ``home`` recorded; empty when nothing (readable) is there."""
        try:
            return json.loads((Path(home) / cls.state_file).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _save_state(self, state: dict[str, Any]) -> None:
        (self.home / self.state_file).write_text(json.dumps(state, indent=2))

    def log_file(self, name: str) -> Path:
        return self.home / f"{name}.log"

    def daemon_running(self, name: str) -> bool:
        pid = self._pid(name)
        return pid is not None and alive(pid)

    def _start_daemon(self, name: str, command: list[str], environment: dict[str, str]) -> None:
        """Start one daemon in a session of its own, its output appended to its log, its pid recorded."""
        self.log_file(name).parent.mkdir(parents=True, exist_ok=True)
        with self.log_file(name).open("ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
                cwd=self.home,
                start_new_session=True,
            )
        self._processes[name] = process
        (self.home / f"{name}.pid").write_text(str(process.pid))

    def _stop_daemon(self, name: str, timeout_s: float) -> bool:
        """SIGTERM the daemon's process group, SIGKILL what lingers; True when it was running."""
        pid = self._pid(name)
        was_running = pid is not None and alive(pid)
        if was_running and pid is not None:
            stop_process_group(pid, timeout_s)
        (self.home / f"{name}.pid").unlink(missing_ok=True)
        process = self._processes.pop(name, None)
        if process is not None:
            process.wait(timeout_s)
        return was_running

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.home / f"{name}.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str, log_name: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [name for name, process in self._processes.items() if process.poll() is not None]
            if dead:
                raise self.failure(f"the {dead[0]} exited while waiting for {what}:\n{self._tail(dead[0])}")
            time.sleep(0.2)
        raise self.failure(f"timed out after {timeout_s}s waiting for {what}:\n{self._tail(log_name)}")

    def _tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.log_file(name).read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_file(name)})"
        return "\n".join(text.splitlines()[-lines:]) + f"\n(full log: {self.log_file(name)})"
