"""A real YARN (one ResourceManager, one NodeManager) on 127.0.0.1, over a real single-node HDFS.

The daemons are Hadoop's own mains, ``org.apache.hadoop.yarn.server.resourcemanager.ResourceManager``
and ``...nodemanager.NodeManager``, each a JVM of its own (so a test or the chaos run can restart the
NodeManager alone), on the jars the HDFS launcher uses (``hadoop-client-minicluster`` holds the YARN
servers too) plus BouncyCastle (``launching/jvm_bundles/yarn-server.ivy.xml``). The HDFS is
``devtools.hdfs``'s, under ``home/hdfs``: YARN's applications stage their files on it and the pipeline
keeps its data there.

``home/conf`` is the Hadoop client configuration (``core-site.xml``, ``hdfs-site.xml``, ``yarn-site.xml``):
spark-submit finds the ResourceManager through ``HADOOP_CONF_DIR`` pointing at it. The ports are chosen
free once and kept in ``home/yarn.json``, so a restart comes back on the same ones.

Containers: the NodeManager offers ``memory_mb`` (default 12 GB of this 24 GB machine) and
``vcores`` (default 8: virtual, the scheduler counts memory only). Each cluster-mode driver is an
ApplicationMaster, so the queue lets AMs take the whole cluster. Memory limits are not enforced on the
containers (no cgroups here, and the JVM's virtual size trips the virtual-memory check at once).
Container logs stay on the NodeManager (no aggregation), served by its REST API and deleted
``log_retain_s`` after their application ends.

From the shell: ``python -m stream_pipelines.devtools.yarn start|stop|status`` (state under
``data/yarn``); ``start`` prints what to export.
"""

from __future__ import annotations

import argparse
import json
import os
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
from stream_pipelines.core.resource_manager import unwrap
from stream_pipelines.devtools import hdfs
from stream_pipelines.devtools.daemons import LocalDaemons
from stream_pipelines.devtools.hdfs import HOST, LocalHdfs, _site, kept_ports
from stream_pipelines.launching import jvm

RESOURCEMANAGER_CLASS = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NODEMANAGER_CLASS = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
STATE_FILE = "yarn.json"
DAEMONS = ("resourcemanager", "nodemanager")
PORT_NAMES = (
    "rm_rpc",
    "rm_scheduler",
    "rm_tracker",
    "rm_admin",
    "rm_http",
    "nm_rpc",
    "nm_localizer",
    "nm_http",
)
JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:ReservedCodeCacheSize=64m",
    "-Xss512k",
    "-Djava.net.preferIPv4Stack=true",
    # Hadoop's web apps (Guice, Jersey 1) reflect into java.lang and java.util on Java 17.
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
)
# The plain Hadoop servers log through reload4j (log4j 1 syntax).
LOG4J = """\
log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.target=System.err
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{HH:mm:ss.SSS} %p %c{1}: %m%n
log4j.logger.org.apache.hadoop.yarn.server.resourcemanager.RMAppManager$ApplicationSummary=INFO
"""
CAPACITY_SCHEDULER = {
    "yarn.scheduler.capacity.root.queues": "default",
    "yarn.scheduler.capacity.root.default.capacity": "100",
    "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
    # Every cluster-mode driver is an ApplicationMaster: the default 10% would queue the second app.
    "yarn.scheduler.capacity.maximum-am-resource-percent": "1.0",
    "yarn.scheduler.capacity.root.default.maximum-am-resource-percent": "1.0",
    "yarn.scheduler.capacity.node-locality-delay": "0",
}


class YarnError(RuntimeError):
    """YARN could not be started or did not come up; the message says why and where the logs are."""


def java_home() -> str:
    """The JDK the containers run (the NodeManager starts them with ``$JAVA_HOME/bin/java``)."""
    return str(Path(os.path.realpath(jvm.java_executable())).parent.parent)


@dataclass
class LocalYarn(LocalDaemons):
    """A ResourceManager and a NodeManager on loopback over ``hdfs``; ``start`` returns once the node is
    registered and the ResourceManager takes applications."""

    host: str = HOST
    ports: dict[str, int] = field(default_factory=dict)
    memory_mb: int = 12288
    vcores: int = 8
    log_retain_s: int = 3 * 3600
    user: str = field(default_factory=store.hadoop_user)
    hdfs: LocalHdfs | None = None
    failure = YarnError
    state_file = STATE_FILE

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        self.ports = kept_ports(self.saved_state(self.home), self.ports, PORT_NAMES, self.host)
        if self.hdfs is None:
            self.hdfs = LocalHdfs(home=self.home / "hdfs", user=self.user)

    # ------------------------------------------------------------------ addresses and state

    @property
    def conf_dir(self) -> Path:
        """``HADOOP_CONF_DIR`` for spark-submit and any Hadoop client of this cluster."""
        return self.home / "conf"

    @property
    def default_fs(self) -> str:
        assert self.hdfs is not None
        return self.hdfs.default_fs

    @property
    def rm_url(self) -> str:
        """The ResourceManager's web address (its REST API under ``/ws/v1/cluster``)."""
        return f"http://{self.host}:{self.ports['rm_http']}"

    @property
    def nm_url(self) -> str:
        return f"http://{self.host}:{self.ports['nm_http']}"

    def _get(self, url: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(url, timeout=3) as response:
                return json.loads(response.read().decode())
        except (OSError, urllib.error.URLError, ValueError):
            return {}

    def live_nodes(self, reported_since_s: float = 0.0) -> int:
        """Nodes the ResourceManager counts live; with ``reported_since_s`` (epoch seconds), only those
        whose NodeManager reported its health since then (a restarted one, not its old registration)."""
        nodes = unwrap(self._get(f"{self.rm_url}/ws/v1/cluster/nodes"), "nodes", "node") or []
        return sum(
            1
            for node in nodes
            if node.get("state") == "RUNNING"
            and int(node.get("lastHealthUpdate") or 0) / 1000 >= reported_since_s
        )

    def ready(self) -> bool:
        info = unwrap(self._get(f"{self.rm_url}/ws/v1/cluster/info"), "clusterInfo")
        return info.get("state") == "STARTED" and self.live_nodes() >= 1

    def running(self) -> list[str]:
        assert self.hdfs is not None
        return [*self.hdfs.running(), *(name for name in DAEMONS if self.daemon_running(name))]

    def status(self) -> dict[str, Any]:
        metrics = unwrap(self._get(f"{self.rm_url}/ws/v1/cluster/metrics"), "clusterMetrics")
        return {
            "resourcemanager": self.rm_url,
            "fs.defaultFS": self.default_fs,
            "HADOOP_CONF_DIR": str(self.conf_dir),
            "running": self.running(),
            "ready": self.ready(),
            "live_nodes": self.live_nodes(),
            "apps_running": metrics.get("appsRunning"),
            "memory_mb": {"total": metrics.get("totalMB"), "allocated": metrics.get("allocatedMB")},
            "ports": self.ports,
            "home": str(self.home),
        }

    def client_environment(self) -> dict[str, str]:
        """What a client of this cluster needs in its environment: spark-submit reads both."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "JAVA_HOME": java_home()}

    def pipeline_settings(self, data_root: str) -> list[str]:
        """Config overrides that run every driver in this YARN's containers (cluster mode), the data under
        ``data_root``: two containers per app of 1 GB + overhead each, as conf/yarn.yaml sizes them."""
        return [
            "spark.master=yarn",
            "spark.deploy_mode=cluster",
            "spark.class_archive=false",
            "spark.driver_memory=1g",
            f"yarn.resourcemanager_url={self.rm_url}",
            f"yarn.hadoop_conf_dir={self.conf_dir}",
            "spark.extra_conf.spark.executor.instances=1",
            "spark.extra_conf.spark.executor.cores=1",
            "spark.extra_conf.spark.executor.memory=1g",
            f"spark.extra_conf.spark.yarn.appMasterEnv.SPARK_LOCAL_IP={self.host}",
            f"spark.extra_conf.spark.executorEnv.SPARK_LOCAL_IP={self.host}",
            f"paths.data_root={data_root}",
        ]

    # ------------------------------------------------------------------ life cycle

    def start(self, timeout_s: float = 120.0) -> LocalYarn:
        assert self.hdfs is not None
        self.home.mkdir(parents=True, exist_ok=True)
        running = [name for name in DAEMONS if self.daemon_running(name)]
        if running:
            raise YarnError(f"already running under {self.home}: {', '.join(running)}; stop it first")
        self._record_state()
        try:
            if not self.hdfs.running():
                self.hdfs.start()
            self._write_conf()
            for name in DAEMONS:
                self._launch(name)
            self._wait(
                self.ready, timeout_s, "the ResourceManager with a live NodeManager", "resourcemanager"
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 20.0, *, with_hdfs: bool = True) -> bool:
        """Stop the NodeManager (and the containers it started), the ResourceManager, then HDFS (unless
        ``with_hdfs`` is false: an HDFS shared with others, as the tests' session one)."""
        assert self.hdfs is not None
        stopped = False
        for name in reversed(DAEMONS):
            stopped |= self._stop_daemon(name, timeout_s)
        if with_hdfs:
            stopped |= self.hdfs.stop()
        return stopped

    def restart_nodemanager(self, down_s: float = 0.0, timeout_s: float = 120.0) -> float:
        """Stop the NodeManager (it kills its containers as it goes: no recovery here), wait ``down_s``,
        start it again on the same ports, and return once the ResourceManager counts it live again: the
        seconds from its start to then. Re-registering under the same node id, it tells the
        ResourceManager that none of its containers runs any more, and their applications fail."""
        self._stop_daemon("nodemanager", 30.0)
        time.sleep(down_s)
        began, began_epoch = time.monotonic(), time.time()
        self._launch("nodemanager")
        self._wait(
            lambda: self.live_nodes(reported_since_s=began_epoch) >= 1,
            timeout_s,
            "the restarted NodeManager to register",
            "nodemanager",
        )
        return time.monotonic() - began

    def forget_processes(self) -> None:
        """The daemons outlive this process (a shell ``start``); ``stop`` finds them by their pid files."""
        assert self.hdfs is not None
        self._processes.clear()
        self.hdfs._processes.clear()

    @classmethod
    def attach(cls, home: Path) -> LocalYarn | None:
        """The YARN a ``start`` (maybe in another process) set up under ``home``, if any."""
        state = cls.saved_state(Path(home))
        if not state:
            return None
        hdfs = LocalHdfs.attach(Path(home) / "hdfs")
        return cls(home=Path(home), user=state.get("user") or store.hadoop_user(), hdfs=hdfs)

    # ------------------------------------------------------------------ internals

    def _record_state(self) -> None:
        self._save_state(
            {"host": self.host, "user": self.user, "ports": self.ports, "resourcemanager": self.rm_url}
        )

    def _write_conf(self) -> None:
        assert self.hdfs is not None
        ports, home, host = self.ports, self.home, self.host
        yarn = {
            "yarn.resourcemanager.hostname": host,
            "yarn.resourcemanager.address": f"{host}:{ports['rm_rpc']}",
            "yarn.resourcemanager.scheduler.address": f"{host}:{ports['rm_scheduler']}",
            "yarn.resourcemanager.resource-tracker.address": f"{host}:{ports['rm_tracker']}",
            "yarn.resourcemanager.admin.address": f"{host}:{ports['rm_admin']}",
            "yarn.resourcemanager.webapp.address": f"{host}:{ports['rm_http']}",
            "yarn.resourcemanager.webapp.https.address": f"{host}:0",
            "yarn.nodemanager.hostname": host,
            "yarn.nodemanager.address": f"{host}:{ports['nm_rpc']}",
            "yarn.nodemanager.localizer.address": f"{host}:{ports['nm_localizer']}",
            "yarn.nodemanager.webapp.address": f"{host}:{ports['nm_http']}",
            "yarn.nodemanager.webapp.https.address": f"{host}:0",
            "yarn.nodemanager.resource.memory-mb": str(self.memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(self.vcores),
            "yarn.scheduler.minimum-allocation-mb": "128",
            "yarn.scheduler.maximum-allocation-mb": str(self.memory_mb),
            "yarn.scheduler.maximum-allocation-vcores": str(self.vcores),
            "yarn.nodemanager.local-dirs": f"{home}/nm-local",
            "yarn.nodemanager.log-dirs": f"{home}/nm-logs",
            "yarn.nodemanager.log.retain-seconds": str(self.log_retain_s),
            "yarn.log-aggregation-enable": "false",
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "100",
            "yarn.nodemanager.env-whitelist": (
                "JAVA_HOME,HADOOP_COMMON_HOME,HADOOP_HDFS_HOME,HADOOP_CONF_DIR,HADOOP_YARN_HOME,"
                "HADOOP_MAPRED_HOME,PATH,LANG,TZ,HADOOP_USER_NAME"
            ),
            "yarn.nodemanager.delete.debug-delay-sec": "0",
            # Each container's launch script and file listing in its logs, as many clusters keep them:
            # what a driver's secrets must never be in (tests/test_yarn_cluster_mode.py looks).
            "yarn.nodemanager.log-container-debug-info.enabled": "true",
            # Heartbeats of a second: an application's state and a node's loss show up fast.
            "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms": "500",
            "yarn.nodemanager.health-checker.interval-ms": "5000",
            "yarn.nm.liveness-monitor.expiry-interval-ms": "30000",
            # An ApplicationMaster registers once its driver's SparkContext is up: a driver's first start
            # on a packed Python, its files cold from YARN's unpacking, took over 30 s here.
            "yarn.am.liveness-monitor.expiry-interval-ms": "120000",
            "yarn.resourcemanager.system-metrics-publisher.enabled": "false",
            "yarn.timeline-service.enabled": "false",
            "yarn.resourcemanager.recovery.enabled": "false",
            "yarn.nodemanager.recovery.enabled": "false",
        }
        conf = self.conf_dir
        conf.mkdir(parents=True, exist_ok=True)
        self.hdfs._write_conf()
        for name in ("core-site.xml", "hdfs-site.xml"):
            (conf / name).write_text((self.hdfs.home / "conf" / name).read_text())
        (conf / "yarn-site.xml").write_text(_site(yarn))
        (conf / "capacity-scheduler.xml").write_text(_site(CAPACITY_SCHEDULER))
        (conf / "log4j.properties").write_text(LOG4J)

    def _command(self, main_class: str) -> list[str]:
        logging = f"-Dlog4j.configuration=file:{self.conf_dir / 'log4j.properties'}"
        classpath = jvm.yarn_server_classpath(self.conf_dir)
        return [jvm.java_executable(), *JVM_OPTIONS, logging, "-cp", classpath, main_class]

    def _launch(self, name: str) -> None:
        main_class = RESOURCEMANAGER_CLASS if name == "resourcemanager" else NODEMANAGER_CLASS
        environment = {
            **os.environ,
            "HADOOP_USER_NAME": self.user,
            "HADOOP_CONF_DIR": str(self.conf_dir),
            "JAVA_HOME": java_home(),
        }
        self._start_daemon(name, self._command(main_class), environment)


# ---------------------------------------------------------------------------- a config's own YARN


def for_config(config: PipelineConfig) -> LocalYarn:
    """The local YARN a config with ``yarn.manage_local`` names: its home is ``paths.yarn`` (host-local),
    its ResourceManager's web port that of ``yarn.resourcemanager_url``, over the config's local HDFS."""
    port = urllib.parse.urlsplit(config.yarn.resourcemanager_url or "").port
    ports = {"rm_http": port} if port else {}
    return LocalYarn(home=Path(config.data_path("yarn")), ports=ports, hdfs=hdfs.for_config(config))


def start_for(config: PipelineConfig) -> str:
    """Start the config's local YARN (and its HDFS) unless it runs; one line saying what was done."""
    cluster = for_config(config)
    if cluster.daemon_running("resourcemanager"):
        cluster._wait(cluster.ready, 120, "the running YARN to take applications", "resourcemanager")
        return f"yarn: already running, ResourceManager {cluster.rm_url}"
    cluster.start()
    cluster.forget_processes()
    return (
        f"yarn: started, ResourceManager {cluster.rm_url} ({cluster.memory_mb} MB, {cluster.vcores} vcores "
        f"for containers), HADOOP_CONF_DIR={cluster.conf_dir}"
    )


def stop_for(config: PipelineConfig) -> bool:
    """Stop the config's local YARN, its containers with it; True when it was running. Its HDFS is
    ``hdfs.stop_for``'s to stop, after."""
    return for_config(config).stop(with_hdfs=False)


# ---------------------------------------------------------------------------- shell entry point


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stream_pipelines.devtools.yarn",
        description="start, stop or show a single-node YARN (ResourceManager + NodeManager) over HDFS",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--home", default=str(PROJECT_ROOT / "data" / "yarn"), help="config, HDFS, logs, pid files"
    )
    args = parser.parse_args(argv)
    home = Path(args.home)
    if args.action == "start":
        cluster = LocalYarn(home=home)
        try:
            cluster.start()
        except YarnError as error:
            print(f"yarn: {error}", file=sys.stderr)
            return 1
        cluster.forget_processes()
        print(f"yarn: ResourceManager {cluster.rm_url}, fs.defaultFS={cluster.default_fs}")
        print(f"yarn: export HADOOP_CONF_DIR={cluster.conf_dir}")
        return 0
    running = LocalYarn.attach(home)
    if args.action == "stop":
        stopped = running.stop() if running is not None else False
        print("yarn: stopped" if stopped else "yarn: was not running")
        return 0
    if running is None or not running.running():
        print(f"yarn: not running (nothing started under {home})")
        return 1
    print(json.dumps(running.status(), indent=2))
    return 0 if running.ready() else 1


if __name__ == "__main__":
    sys.exit(main())
