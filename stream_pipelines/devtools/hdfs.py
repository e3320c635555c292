"""A real single-host HDFS (one NameNode, two DataNodes) on 127.0.0.1, from Maven Central jars.

The daemons are Hadoop's own mains, ``org.apache.hadoop.hdfs.server.namenode.NameNode`` and
``...datanode.DataNode``, each a JVM of its own (so a test can stop the NameNode alone and bring it back
on the same metadata), on the hdfs-server bundle (``launching/jvm_bundles/hdfs-server.ivy.xml``, resolved by
``make setup``) plus the Hadoop client and logging jars pyspark ships (``jvm.hdfs_server_classpath``).
Their config (``core-site.xml``, ``hdfs-site.xml``), metadata, blocks, pid files and logs live under
``home``; the ports are chosen free once and kept in ``home/hdfs.json``, so a restart comes back on the
same ones. Two DataNodes and a replication of 2: a file completes once either DataNode has reported its
last block, so the writer's first close call mostly finds it complete; with one DataNode that call
nearly always came first, and hdfs-native then waits 0.5 s before it asks again (measured over 200
closes: 0.51 s each with one DataNode; with two, a median of 0.009 s and one close in nine 0.5 s). The
NameNode keeps HDFS's default of completing a file only on a DataNode's report: letting it close on the
writer's commit (``dfs.namenode.file.close.num-committed-allowed``) made hdfs-native read about one
file in fifty as empty right after its close (``tests/test_hdfs_store.py``).
Nothing about the apps changes: point a path at it::

    pipelinectl run raw_archive --set paths.data_root=hdfs://127.0.0.1:<port>/pipeline

Use it as a context manager (tests), or from the shell (``python -m stream_pipelines.devtools.hdfs
start|stop|status``, state under ``data/hdfs``), where ``start`` prints ``fs.defaultFS``. The daemons run
as ``HADOOP_USER_NAME`` (else the OS user), the user Spark and the file layer act as, which makes that
user HDFS's superuser; ``/`` is made world-writable (sticky, 1777) so other users can make folders.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream_pipelines.core import store
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.devtools.daemons import LocalDaemons

HOST = "127.0.0.1"
# What `make up` and `make demo` put on a fresh local HDFS where the config reads the sensor metadata.
SENSOR_METADATA = PROJECT_ROOT / "conf" / "sensor_metadata.csv"
NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
STATE_FILE = "hdfs.json"
DATANODES = ("datanode", "datanode2")
DAEMONS = ("namenode", *DATANODES)
PORT_NAMES = (
    "namenode_rpc",
    "namenode_http",
    *(f"{datanode}_{port}" for datanode in DATANODES for port in ("xfer", "http", "ipc")),
)
# Small and quick to start: each daemon stays near 200 MB resident.
JVM_OPTIONS = (
    "-Xmx192m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:ReservedCodeCacheSize=64m",
    "-Xss512k",
    "-Djava.net.preferIPv4Stack=true",
)
LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_ERR
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
logger.started.name = org.apache.hadoop.hdfs.server.namenode.NameNode
logger.started.level = INFO
"""


class HdfsError(RuntimeError):
    """HDFS could not be started or did not come up; the message says why and where the logs are."""


@dataclass
class LocalHdfs(LocalDaemons):
    """A NameNode and two DataNodes on loopback; ``start`` returns once HDFS takes writes (out of safe mode,
    both DataNodes live)."""

    user: str = field(default_factory=store.hadoop_user)
    host: str = HOST
    ports: dict[str, int] = field(default_factory=dict)
    failure = HdfsError
    state_file = STATE_FILE

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        self.ports = kept_ports(self.saved_state(self.home), self.ports, PORT_NAMES, self.host)

    # ------------------------------------------------------------------ addresses and state

    @property
    def default_fs(self) -> str:
        """``fs.defaultFS``: the URL prefix of every path on this HDFS (``hdfs://127.0.0.1:<port>``)."""
        return f"hdfs://{self.host}:{self.ports['namenode_rpc']}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.ports['namenode_http']}"

    def url(self, path: str = "/") -> str:
        return f"{self.default_fs}/{path.lstrip('/')}"

    def namenode_state(self) -> dict[str, Any]:
        """What the NameNode's JMX says of itself; empty when it does not answer."""
        state: dict[str, Any] = {}
        for bean in ("FSNamesystemState", "NameNodeInfo"):
            try:
                query = f"{self.webui_url}/jmx?qry=Hadoop:service=NameNode,name={bean}"
                with urllib.request.urlopen(query, timeout=2) as response:
                    beans = json.loads(response.read().decode()).get("beans") or [{}]
            except (OSError, urllib.error.URLError, ValueError):
                return {}
            state.update(beans[0])
        return state

    def ready(self) -> bool:
        """The NameNode answers, is out of safe mode and has both DataNodes live, which reported their
        storage: a write can succeed. (A restarted NameNode counts a DataNode live a moment before its
        storage report arrives, and refuses new blocks until then.)"""
        state = self.namenode_state()
        return (
            state.get("NumLiveDataNodes", 0) >= len(DATANODES)
            and state.get("CapacityRemaining", 0) > 0
            and state.get("FSState") == "Operational"
            and state.get("Safemode", "?") == ""
            and self._takes_a_write()
        )

    def _takes_a_write(self) -> bool:
        """A block can be written: after a NameNode restart, its JMX can count the DataNode live and with
        capacity a moment before the NameNode hands it out for new blocks ("All DataNodes failed")."""
        probe = store.location(None, self.url(f".ready/{os.getpid()}"))
        try:
            store.write_atomically(probe, b"ready")
            store.remove_tree(probe)
        except Exception:  # any refusal means "not yet"; the caller waits and asks again
            return False
        return True

    def running(self) -> list[str]:
        return [name for name in DAEMONS if self.daemon_running(name)]

    def status(self) -> dict[str, Any]:
        state = self.namenode_state()
        return {
            "fs.defaultFS": self.default_fs,
            "user": self.user,
            "running": self.running(),
            "ready": self.ready(),
            "live_datanodes": state.get("NumLiveDataNodes"),
            "safemode": state.get("Safemode"),
            "ports": self.ports,
            "home": str(self.home),
        }

    # ------------------------------------------------------------------ life cycle

    def start(self, timeout_s: float = 90.0) -> LocalHdfs:
        self.home.mkdir(parents=True, exist_ok=True)
        running = self.running()
        if running:
            raise HdfsError(f"already running under {self.home}: {', '.join(running)}; stop it first")
        self._record_state()
        try:
            self._write_conf()
            if not (self.home / "name" / "current").is_dir():
                self._format()
            for name in DAEMONS:
                self._launch(name)
            self._wait(self.ready, timeout_s, "HDFS to leave safe mode with its DataNodes live", "namenode")
            self._open_root()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 20.0) -> bool:
        """Stop the DataNodes, then the NameNode; True when anything was running."""
        stopped = False
        for name in reversed(DAEMONS):
            stopped |= self._stop_daemon(name, timeout_s)
        return stopped

    def stop_namenode(self, timeout_s: float = 20.0) -> bool:
        """The NameNode alone (a fault: clients wait or fail); the DataNodes keep their blocks and wait."""
        return self._stop_daemon("namenode", timeout_s)

    def start_namenode(self, timeout_s: float = 90.0, *, wait: bool = True) -> float:
        """Bring the NameNode back on the same ports and metadata; seconds until HDFS takes writes (with
        ``wait``; without, it returns at once and the NameNode stays in safe mode until a DataNode
        reports)."""
        if self.daemon_running("namenode"):
            raise HdfsError(f"the NameNode under {self.home} is already running")
        began = time.monotonic()
        self._launch("namenode")
        if wait:
            self._wait(self.ready, timeout_s, "the NameNode to leave safe mode", "namenode")
        return time.monotonic() - began

    def stop_datanodes(self, timeout_s: float = 20.0) -> bool:
        """The DataNodes alone: their blocks stay on disk; a NameNode started without them stays in safe
        mode."""
        return any([self._stop_daemon(name, timeout_s) for name in DATANODES])

    def start_datanodes(self) -> None:
        for name in DATANODES:
            self._launch(name)

    @classmethod
    def attach(cls, home: Path) -> LocalHdfs | None:
        """The HDFS a ``start`` (maybe in another process) set up under ``home``, if any."""
        state = cls.saved_state(Path(home))
        if not state:
            return None
        return cls(home=Path(home), user=state.get("user") or store.hadoop_user())

    # ------------------------------------------------------------------ internals

    def _record_state(self) -> None:
        self._save_state(
            {"host": self.host, "user": self.user, "ports": self.ports, "fs.defaultFS": self.default_fs}
        )

    def _conf_dir(self, daemon: str = "namenode") -> Path:
        """The clients' and the NameNode's config; each DataNode past the first has its own (its ports and
        its block folder)."""
        return self.home / ("conf" if daemon in ("namenode", DATANODES[0]) else f"conf-{daemon}")

    def _write_conf(self) -> None:
        ports, home, host = self.ports, self.home, self.host
        core = {"fs.defaultFS": self.default_fs, "hadoop.tmp.dir": f"{home}/tmp"}
        hdfs = {
            "dfs.namenode.name.dir": f"file://{home}/name",
            "dfs.namenode.rpc-address": f"{host}:{ports['namenode_rpc']}",
            "dfs.namenode.http-address": f"{host}:{ports['namenode_http']}",
            "dfs.namenode.https-address": f"{host}:0",
            "dfs.namenode.secondary.http-address": f"{host}:0",
            "dfs.namenode.secondary.https-address": f"{host}:0",
            "dfs.namenode.backup.address": f"{host}:0",
            "dfs.namenode.backup.http-address": f"{host}:0",
            "dfs.datanode.https.address": f"{host}:0",
            # The name the DataNode registers under, which clients then connect to for blocks.
            "dfs.datanode.hostname": host,
            "dfs.replication": str(len(DATANODES)),
            # Out of safe mode as soon as the DataNode reported its blocks (the default waits 30 s more).
            "dfs.namenode.safemode.extension": "0",
            "dfs.namenode.safemode.min.datanodes": "1",
            "dfs.heartbeat.interval": "1",
            "dfs.namenode.handler.count": "8",
            "dfs.namenode.service.handler.count": "4",
            "dfs.datanode.handler.count": "4",
            "dfs.permissions.enabled": "true",
        }
        for datanode in DATANODES:
            conf = self._conf_dir(datanode)
            conf.mkdir(parents=True, exist_ok=True)
            (conf / "core-site.xml").write_text(_site(core))
            (conf / "hdfs-site.xml").write_text(_site({**hdfs, **self._datanode_settings(datanode)}))
            (conf / "log4j2.properties").write_text(LOG4J2)

    def _datanode_settings(self, datanode: str) -> dict[str, str]:
        """Where a DataNode keeps its blocks and listens (the first's are the clients' config too)."""
        ports, host = self.ports, self.host
        folder = "data" if datanode == DATANODES[0] else f"data-{datanode}"
        return {
            "dfs.datanode.data.dir": f"file://{self.home}/{folder}",
            "dfs.datanode.address": f"{host}:{ports[f'{datanode}_xfer']}",
            "dfs.datanode.http.address": f"{host}:{ports[f'{datanode}_http']}",
            "dfs.datanode.ipc.address": f"{host}:{ports[f'{datanode}_ipc']}",
        }

    def _command(self, main_class: str, *arguments: str, daemon: str = "namenode") -> list[str]:
        from stream_pipelines.launching import jvm

        return [
            jvm.java_executable(),
            *JVM_OPTIONS,
            "-cp",
            jvm.hdfs_server_classpath(self._conf_dir(daemon)),
            main_class,
            *arguments,
        ]

    def _environment(self) -> dict[str, str]:
        # The daemons' user is the one that formats, so it owns / and is HDFS's superuser.
        return {**os.environ, "HADOOP_USER_NAME": self.user}

    def _format(self) -> None:
        command = self._command(NAMENODE_CLASS, "-format", "-force", "-nonInteractive", "-clusterid", "local")
        self.log_file("format").parent.mkdir(parents=True, exist_ok=True)
        with self.log_file("format").open("ab") as log:
            done = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._environment(),
                cwd=self.home,
                timeout=120,
                check=False,
            )
        if done.returncode != 0:
            raise HdfsError(f"formatting the NameNode failed:\n{self._tail('format')}")

    def _launch(self, name: str) -> None:
        main_class = NAMENODE_CLASS if name == "namenode" else DATANODE_CLASS
        self._start_daemon(name, self._command(main_class, daemon=name), self._environment())

    def _open_root(self) -> None:
        """``/`` to 1777 (anyone makes folders, only owners remove theirs), through WebHDFS as its owner."""
        request = urllib.request.Request(
            f"{self.webui_url}/webhdfs/v1/?op=SETPERMISSION&permission=1777&user.name={self.user}",
            method="PUT",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()


def _site(properties: dict[str, str]) -> str:
    body = "".join(
        f"  <property><name>{name}</name><value>{value}</value></property>\n"
        for name, value in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def kept_ports(
    saved: dict[str, Any], given: dict[str, int], names: Sequence[str], host: str
) -> dict[str, int]:
    """Each named port: given, else the one the last start recorded (``saved``), else a free one."""
    ports = {**saved.get("ports", {}), **{name: port for name, port in given.items() if port}}
    taken = set(ports.values())
    for name in names:
        if not ports.get(name):
            ports[name] = _free_port(host, taken)
            taken.add(ports[name])
    return ports


def _free_port(host: str, taken: set[int]) -> int:
    """A free port below the ephemeral range (32768+ on Linux), so that no outgoing connection takes it
    while the NameNode is down between a stop and a start on the same port."""
    for _attempt in range(200):
        port = random.randint(20000, 32000)
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        return port
    raise HdfsError(f"no free port on {host} between 20000 and 32000")


# ---------------------------------------------------------------------------- a config's own HDFS


def for_config(config: PipelineConfig) -> LocalHdfs:
    """The local HDFS a config with ``hdfs.manage_local`` names: its home is ``paths.hdfs`` (host-local),
    its NameNode on the port of ``spark.hadoop.fs.defaultFS``."""
    port = urllib.parse.urlsplit(config.spark.extra_conf[store.DEFAULT_FS]).port
    return LocalHdfs(home=Path(config.data_path("hdfs")), ports={"namenode_rpc": port})


def start_for(config: PipelineConfig) -> str:
    """Start the config's local HDFS unless it runs, and put the sensor metadata file where the config
    reads it; one line saying what was done."""
    cluster = for_config(config)
    if cluster.running():
        cluster._wait(cluster.ready, 90, "the running HDFS to take writes", "namenode")
        said = f"hdfs: already running, fs.defaultFS={cluster.default_fs}"
    else:
        cluster.start()
        cluster._processes.clear()  # the daemons outlive this process; `stop_for` finds their pid files
        said = f"hdfs: started, fs.defaultFS={cluster.default_fs} (NameNode UI {cluster.webui_url})"
    seeded = seed_sensor_metadata(config)
    return said + (f"; sensor metadata put at {seeded}" if seeded else "")


def stop_for(config: PipelineConfig) -> bool:
    """Stop the config's local HDFS; True when it was running. Its files stay for the next start."""
    return for_config(config).stop()


def seed_sensor_metadata(config: PipelineConfig) -> str | None:
    """Copy the project's sensor metadata (conf/sensor_metadata.csv) to the config's ``hdfs://`` metadata
    path when nothing is there yet, as the lab's setup puts it on HDFS; the URL when it copied."""
    target_url = config.project_path(config.sensors.metadata_path)
    if store.scheme(target_url) != "hdfs":
        return None
    target = store.location(config.spark.extra_conf, target_url)
    if target.exists():
        return None
    store.write_atomically(target, SENSOR_METADATA.read_bytes())
    return str(target)


# ---------------------------------------------------------------------------- shell entry point


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stream_pipelines.devtools.hdfs",
        description="start, stop or show a single-host HDFS (NameNode + two DataNodes) on 127.0.0.1",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--home",
        default=str(PROJECT_ROOT / "data" / "hdfs"),
        help="config, metadata, blocks, pid files, logs",
    )
    parser.add_argument("--port", type=int, default=0, help="NameNode RPC port (0: a free one, kept after)")
    args = parser.parse_args(argv)
    home = Path(args.home)
    if args.action == "start":
        cluster = LocalHdfs(home=home, ports={"namenode_rpc": args.port} if args.port else {})
        try:
            cluster.start()
        except HdfsError as error:
            print(f"hdfs: {error}", file=sys.stderr)
            return 1
        # The daemons outlive this command; `stop` finds them through the pid files.
        cluster._processes.clear()
        print(
            f"hdfs: fs.defaultFS={cluster.default_fs} (user {cluster.user}, NameNode UI {cluster.webui_url})"
        )
        print(f"hdfs: use it with --set paths.data_root={cluster.url('pipeline')}")
        return 0
    running = LocalHdfs.attach(home)
    if args.action == "stop":
        stopped = running.stop() if running is not None else False
        print("hdfs: stopped" if stopped else "hdfs: was not running")
        return 0
    if running is None or not running.running():
        print(f"hdfs: not running (nothing started under {home})")
        return 1
    status = running.status()
    if not status["ready"]:
        print(f"hdfs: {', '.join(status['running'])} running under {home}, but not ready (safe mode?)")
        return 1
    print(f"hdfs: fs.defaultFS={status['fs.defaultFS']} up, {status['live_datanodes']} live DataNode(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
