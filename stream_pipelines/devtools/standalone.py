"""A Spark standalone cluster (one master, N workers) on 127.0.0.1, from the pyspark distribution.

The pip wheel ships ``bin/spark-class`` but not ``sbin/start-master.sh``/``start-worker.sh``, so the
daemons are started the way those scripts would: ``spark-class org.apache.spark.deploy.master.Master``
and ``... worker.Worker spark://host:port``, each in its own process group, with a pid file and a log
under ``home``. Nothing about the apps changes: point them at the cluster by config only::

    pipelinectl run raw_archive --set spark.master=spark://127.0.0.1:7077

Use it as a context manager (tests), or from the shell (``python -m stream_pipelines.devtools.standalone
start|stop|status``, state under ``data/standalone``), where ``stop`` finds the daemons by their pid
files and ``status`` by the ``cluster.json`` that ``start`` leaves. Port 0 means "pick a free loopback
port" (tests); the shell defaults are 7077 for the master, 8090 for its web UI and 8091+ for the
workers' (Spark's own 8080 is Airflow's in ``make up``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.devtools.daemons import LocalDaemons
from stream_pipelines.devtools.processes import free_port

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STATE_FILE = "cluster.json"


class StandaloneError(RuntimeError):
    """The cluster could not be started or did not come up; the message says why and where the logs are."""


def spark_home() -> Path:
    """The pyspark distribution's root (holds bin/spark-class and jars/)."""
    import pyspark  # deferred: importing this module must stay cheap and side-effect free

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster(LocalDaemons):
    """One master and ``workers`` workers on loopback; ``start`` returns once every worker registered."""

    workers: int = 1
    worker_cores: int = 1
    worker_memory: str = "1g"
    master_port: int = 0
    master_webui_port: int = 0
    worker_webui_port: int = 0
    host: str = HOST
    daemon_memory: str = "256m"
    failure = StandaloneError

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        if self.master_port == 0:
            self.master_port = free_port(self.host)
        if self.master_webui_port == 0:
            self.master_webui_port = free_port(self.host)

    # ------------------------------------------------------------------ addresses and state

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.master_webui_port}"

    def work_dir(self, index: int = 0) -> Path:
        """Where worker ``index`` keeps its executors' folders: <app id>/<executor id>/{stdout,stderr}."""
        return self.home / f"worker-{index}" / "work"

    def master_state(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The master's JSON status page: workers, activeapps, completedapps, ..."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=timeout_s) as response:
            return json.loads(response.read().decode())

    def alive_workers(self) -> int:
        try:
            state = self.master_state()
        except (OSError, urllib.error.URLError, ValueError):
            return 0
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def completed_apps(self, name: str | None = None) -> list[dict[str, Any]]:
        apps = self.master_state().get("completedapps", [])
        return [app for app in apps if name is None or app.get("name") == name]

    def executor_logs(self, app_id: str) -> list[Path]:
        """The stderr files the workers kept for one application's executors."""
        return sorted(
            path for index in range(self.workers) for path in self.work_dir(index).glob(f"{app_id}/*/stderr")
        )

    # ------------------------------------------------------------------ life cycle

    def start(self, timeout_s: float = 90.0) -> StandaloneCluster:
        self.home.mkdir(parents=True, exist_ok=True)
        running = sorted(path.stem for path in self.home.glob("*.pid") if self.daemon_running(path.stem))
        if running:
            raise StandaloneError(f"already running under {self.home}: {', '.join(running)}; stop it first")
        try:
            self._launch("master", [MASTER_CLASS, *self._master_args()])
            self._wait(self._answers, timeout_s, "the master's web UI to answer", "master")
            for index in range(self.workers):
                self.work_dir(index).mkdir(parents=True, exist_ok=True)
                self._launch(f"worker-{index}", [WORKER_CLASS, *self._worker_args(index)])
            self._wait(
                lambda: self.alive_workers() >= self.workers,
                timeout_s,
                f"{self.workers} worker(s) to register with {self.master_url}",
                "worker-0",
            )
        except BaseException:
            self.stop()
            raise
        self._state_file().write_text(
            json.dumps(
                {
                    "host": self.host,
                    "master_port": self.master_port,
                    "master_webui_port": self.master_webui_port,
                    "workers": self.workers,
                }
            )
        )
        return self

    @classmethod
    def attach(cls, home: Path) -> StandaloneCluster | None:
        """The cluster a ``start`` (maybe in another process) left running under ``home``, if any."""
        try:
            state = json.loads((Path(home) / STATE_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return cls(home=Path(home), **state)

    def stop(self, timeout_s: float = 20.0) -> bool:
        """Stop the workers, then the master (by process group); True when anything was running."""
        names = sorted((p.stem for p in self.home.glob("*.pid")), key=lambda n: n == "master")
        stopped = False
        for name in names:
            stopped |= self._stop_daemon(name, timeout_s)
        self._state_file().unlink(missing_ok=True)
        return stopped

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def _state_file(self) -> Path:
        return self.home / STATE_FILE

    def _master_args(self) -> list[str]:
        return [
            "--host",
            self.host,
            "--port",
            str(self.master_port),
            "--webui-port",
            str(self.master_webui_port),
        ]

    def _worker_args(self, index: int) -> list[str]:
        webui = self.worker_webui_port + index if self.worker_webui_port else free_port(self.host)
        return [
            self.master_url,
            "--host",
            self.host,
            "--cores",
            str(self.worker_cores),
            "--memory",
            self.worker_memory,
            "--webui-port",
            str(webui),
            "--work-dir",
            str(self.work_dir(index)),
        ]

    def _environment(self) -> dict[str, str]:
        environment = dict(os.environ)
        home = spark_home()
        environment["SPARK_HOME"] = str(home)
        environment["SPARK_LOCAL_IP"] = self.host
        environment["SPARK_DAEMON_MEMORY"] = self.daemon_memory
        # No conf dir of our own: the jars' log4j2 defaults (INFO to stderr, into the log file) apply.
        environment.pop("SPARK_CONF_DIR", None)
        # Executors a worker starts run Python (data sources, UDFs) with the interpreter the driver
        # names; this is only the fallback for a driver that names none.
        environment.setdefault("PYSPARK_PYTHON", sys.executable)
        return environment

    def _launch(self, name: str, arguments: Sequence[str]) -> None:
        spark_class = spark_home() / "bin" / "spark-class"
        self._start_daemon(name, [str(spark_class), *arguments], self._environment())

    def _answers(self) -> bool:
        try:
            self.master_state(timeout_s=2.0)
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return True


# ---------------------------------------------------------------------------- shell entry point


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stream_pipelines.devtools.standalone",
        description="start, stop or show a Spark standalone master + workers on 127.0.0.1",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--home", default=str(PROJECT_ROOT / "data" / "standalone"), help="pid files, logs and work dirs"
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cores", type=int, default=1, help="cores each worker offers")
    parser.add_argument("--memory", default="1g", help="memory each worker offers to executors")
    parser.add_argument("--port", type=int, default=7077, help="master RPC port")
    # Not Spark's 8080/8081: `make up` serves Airflow on 8080. The same ports as the compose stack.
    parser.add_argument("--webui-port", type=int, default=8090, help="master web UI port")
    parser.add_argument("--worker-webui-port", type=int, default=8091, help="first worker's web UI port")
    args = parser.parse_args(argv)
    cluster = StandaloneCluster(
        home=Path(args.home),
        workers=args.workers,
        worker_cores=args.cores,
        worker_memory=args.memory,
        master_port=args.port,
        master_webui_port=args.webui_port,
        worker_webui_port=args.worker_webui_port,
    )
    if args.action == "start":
        try:
            cluster.start()
        except StandaloneError as error:
            print(f"standalone: {error}", file=sys.stderr)
            return 1
        # The daemons outlive this command; `stop` finds them through the pid files.
        cluster._processes.clear()
        print(f"standalone: master {cluster.master_url} (UI {cluster.webui_url}), {args.workers} worker(s)")
        print(f"standalone: run an app on it with --set spark.master={cluster.master_url}")
        return 0
    running = StandaloneCluster.attach(Path(args.home))
    if args.action == "stop":
        # The pid files are enough to stop, even when the state file is gone.
        stopped = (running or cluster).stop()
        print("standalone: stopped" if stopped else "standalone: was not running")
        return 0
    if running is None:
        print(f"standalone: not running (nothing started under {args.home})")
        return 1
    if not running._answers():
        print(f"standalone: started under {args.home}, but no master answers at {running.webui_url}")
        return 1
    workers = running.alive_workers()
    print(f"standalone: master {running.master_url} up, {workers} alive worker(s), UI {running.webui_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
