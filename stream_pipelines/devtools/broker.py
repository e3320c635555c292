"""A single-node Apache Kafka broker in KRaft mode on 127.0.0.1, for local work and tests.

Runs the Maven Central jars (launching/jvm_bundles/kafka-broker.ivy.xml) with the machine's Java. Its log
lives under ``paths.broker`` (host-local: ``paths.local_root``, else the data root) so committed events
survive a restart. Topics are created idempotently from config by
``stream_pipelines.kafka.topics.ensure_topics``, which production points at the real cluster.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.devtools.processes import alive as _alive
from stream_pipelines.launching import jvm

LISTEN_HOST = "127.0.0.1"

_LOG4J2_PROPERTIES = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class BrokerError(RuntimeError):
    """The local broker could not be started, reached or stopped; the message says why."""


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    ready: bool
    bootstrap: str

    def describe(self) -> str:
        if not self.running:
            return f"broker: stopped (would listen on {self.bootstrap})"
        state = "ready" if self.ready else "starting (not answering yet)"
        return f"broker: running, pid {self.pid}, {state} on {self.bootstrap}"


@dataclass(frozen=True)
class SecuredListeners:
    """Two more listeners beside the plaintext one, as a secured production cluster has them: SASL_SSL
    with SCRAM-SHA-512 users, and SSL that requires a client certificate signed by the CA (mutual TLS).
    The plaintext listener stays: the broker's own traffic and every other local client use it."""

    sasl_ssl_port: int
    ssl_port: int
    keystore: Path  # the broker's PKCS#8 key and certificate chain, one PEM file
    ca: Path  # the CA whose client certificates the SSL listener accepts
    users: Mapping[str, str]  # SCRAM-SHA-512 user -> password

    def properties(self) -> dict[str, str]:
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            # A client that also presents a certificate over SASL_SSL (as some clusters ask) has it checked.
            "listener.name.sasl_ssl.ssl.client.auth": "requested",
        }


class LocalBroker:
    def __init__(self, config: PipelineConfig, secured: SecuredListeners | None = None) -> None:
        self.config = config
        self.secured = secured
        self.settings = config.broker
        self.home = Path(config.data_path("broker"))
        self.log_dir = self.home / "log"
        self.pid_file = self.home / "broker.pid"
        self.output_file = self.home / "broker.out"
        self.properties_file = self.home / "server.properties"
        self.bootstrap = f"{LISTEN_HOST}:{self.settings.port}"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> BrokerStatus:
        current = self.status()
        if current.running:
            if not current.ready:
                self._wait_until_ready(current.pid)
            return self.status()
        for port in self._ports():
            if not _port_is_free(port):
                raise BrokerError(
                    f"port {port} on {LISTEN_HOST} is already taken by another process, so the local broker "
                    f"cannot listen there. Stop that process, or choose other ports, e.g. "
                    f"--set broker.port=19092 --set broker.controller_port=19093 "
                    f"--set kafka.bootstrap_servers={LISTEN_HOST}:19092"
                )
        self.home.mkdir(parents=True, exist_ok=True)
        self._write_properties()
        if not (self.log_dir / "meta.properties").exists():
            self._format_storage()
        log4j = self.home / "log4j2.properties"
        log4j.write_text(_LOG4J2_PROPERTIES)
        command = [
            jvm.java_executable(),
            f"-Xmx{self.settings.heap}",
            f"-Xms{self.settings.heap}",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={log4j}",
            "-Djava.awt.headless=true",
            "-cp",
            jvm.kafka_classpath(),
            "kafka.Kafka",
            str(self.properties_file),
        ]
        with self.output_file.open("ab") as output:
            process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(str(process.pid))
        self._wait_until_ready(process.pid)
        self._create_scram_users()
        return self.status()

    def _ports(self) -> list[int]:
        ports = [self.settings.port, self.settings.controller_port]
        if self.secured is not None:
            ports += [self.secured.sasl_ssl_port, self.secured.ssl_port]
        return ports

    def _create_scram_users(self) -> None:
        """The SASL_SSL listener's users, set over the plaintext listener (idempotent: an upsert)."""
        if self.secured is None or not self.secured.users:
            return
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        upserts = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
            )
            for user, password in self.secured.users.items()
        ]
        for user, future in admin.alter_user_scram_credentials(upserts).items():
            try:
                future.result(30)
            except Exception as error:
                raise BrokerError(f"could not create the SCRAM user {user!r}: {error}") from None

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Controlled shutdown, SIGKILL after timeout_s. Returns False if it was not running."""
        pid = self._recorded_pid()
        if pid is None or not _alive(pid):
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> BrokerStatus:
        pid = self._recorded_pid()
        running = pid is not None and _alive(pid)
        return BrokerStatus(running, pid if running else None, running and self._answers(), self.bootstrap)

    # ------------------------------------------------------------------ internals

    def _recorded_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _write_properties(self) -> None:
        port, controller = self.settings.port, self.settings.controller_port
        served = {"PLAINTEXT": port}
        if self.secured is not None:
            served |= {"SASL_SSL": self.secured.sasl_ssl_port, "SSL": self.secured.ssl_port}
        advertised = ",".join(f"{name}://{LISTEN_HOST}:{number}" for name, number in served.items())
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LISTEN_HOST}:{controller}",
            "listeners": f"{advertised},CONTROLLER://{LISTEN_HOST}:{controller}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(f"{name}:{name}" for name in served)
            + ",CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "3",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Retention by size only: replayed scenarios carry old timestamps, and time-based
            # retention would delete them as soon as they land. 2 GiB per partition locally.
            "log.retention.ms": "-1",
            "log.retention.bytes": str(2 * 1024**3),
            "log.message.timestamp.before.max.ms": str(2**63 - 1),
            "auto.create.topics.enable": "false",
            **(self.secured.properties() if self.secured is not None else {}),
        }
        self.properties_file.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))

    def _format_storage(self) -> None:
        cluster_id = _kafka_cluster_id()
        result = subprocess.run(
            [
                jvm.java_executable(),
                "-cp",
                jvm.kafka_classpath(),
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster_id}",
                "--config",
                str(self.properties_file),
                "--ignore-formatted",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise BrokerError(
                f"formatting the broker storage in {self.log_dir} failed:\n{result.stderr.strip()}"
            )

    def _answers(self) -> bool:
        try:
            with socket.create_connection((LISTEN_HOST, self.settings.port), timeout=1):
                pass
        except OSError:
            return False
        from confluent_kafka.admin import AdminClient  # deferred: a C extension, only needed here

        try:
            metadata = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=3)
        except Exception:
            return False
        return bool(metadata.brokers)

    def _wait_until_ready(self, pid: int | None) -> None:
        deadline = time.monotonic() + self.settings.ready_timeout.seconds
        while time.monotonic() < deadline:
            if pid is not None and not _alive(pid):
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(
                    f"the broker exited during start-up. Last lines of {self.output_file}:\n{self._tail()}"
                )
            if self._answers():
                return
            time.sleep(0.5)
        raise BrokerError(
            f"the broker (pid {pid}) did not answer on {self.bootstrap} within "
            f"{self.settings.ready_timeout}. Last lines of {self.output_file}:\n{self._tail()}"
        )

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.output_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no output)"


def _kafka_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as kafka-storage random-uuid)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LISTEN_HOST, port))
        except OSError:
            return False
    return True
