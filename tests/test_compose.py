"""Static validation of the production-like stack in infra/compose (no Docker engine needed).

The build machines have no Docker engine, and the docker client here has no compose plugin, so the
compose file is validated by reading it: the YAML is parsed (anchors and merge keys resolved) and
interpolated the way compose does (``${VAR}``, ``${VAR:-default}``, ``${VAR:?message}``, ``$$``), then
checked for what would break ``up`` or leak a secret: the services exist, keys are compose keys,
images are pinned, mounted host paths exist in the repository, host ports do not collide,
``depends_on`` targets exist with conditions they can meet, long-running services have healthchecks,
secrets come only from the environment. It is also checked against the project: the pipeline
configuration the containers get (PIPELINE__* variables) loads, and names the Kafka listener, the Spark
master, the volumes and the metrics ports the other services provide; the Prometheus config matches
monitoring/prometheus.yml and passes ``promtool check config`` with the repository's rules (a missing
promtool fails, as in test_alert_rules); Grafana and Alertmanager reach what they point at; versions
match the rest of the repository.

``docker compose config -q`` runs in addition where the compose plugin is installed. Where it is not
(here), that one test is reported as skipped with the reason; it never passes without running, and
every check above runs regardless.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.launching.jvm import DESCRIPTOR_DIR
from stream_pipelines.observability import runbooks

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_DIR = ROOT / "infra" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
DOCKERFILE = ROOT / "infra" / "docker" / "Dockerfile"
README = ROOT / "infra" / "README.md"

REQUIRED_SERVICES = {
    "kafka",
    "spark-master",
    "postgres",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "prometheus",
    "alertmanager",
    "grafana",
}
SECRETS = {
    "POSTGRES_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_ADMIN_PASSWORD",
    "GRAFANA_ADMIN_PASSWORD",
}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN|CREDENTIAL|(^|_)KEY$")
SERVICE_KEYS = {
    "build", "image", "command", "entrypoint", "environment", "env_file", "ports", "expose", "volumes",
    "depends_on", "healthcheck", "restart", "profiles", "network_mode", "networks", "hostname",
    "container_name", "user", "working_dir", "labels", "deploy", "mem_limit", "cpus", "stop_grace_period",
    "stop_signal", "ulimits", "logging", "extra_hosts", "init", "tmpfs", "shm_size", "secrets", "configs",
    "pull_policy", "read_only", "cap_add", "cap_drop", "security_opt", "platform",
}  # fmt: skip
TOP_LEVEL_KEYS = {"name", "services", "volumes", "networks", "configs", "secrets", "include"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
DUMMY_SECRETS = {name: f"dummy-{name.lower()}" for name in SECRETS}


# --------------------------------------------------------------------------- reading like compose

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(LookupError):
    pass


def interpolate_text(text: str, environ: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("braced") or match.group("bare")
        op, arg = match.group("op"), match.group("arg") or ""
        value = environ.get(name)
        unset_or_empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in (":-", "-"):
            return arg if (value is None if op == "-" else unset_or_empty) else value  # type: ignore[return-value]
        if op in (":?", "?"):
            if value is None if op == "?" else unset_or_empty:
                raise MissingVariable(f"{name}: {arg}")
            return value  # type: ignore[return-value]
        if op in (":+", "+"):
            return "" if (value is None if op == "+" else unset_or_empty) else arg
        return value or ""

    return _VARIABLE.sub(substitute, text)


def interpolate(node: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(node, dict):
        return {key: interpolate(value, environ) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, environ) for value in node]
    if isinstance(node, str):
        return interpolate_text(node, environ)
    return node


@cache
def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@cache
def compose() -> dict[str, Any]:
    """The file as compose would run it with the secrets set (to placeholders) and defaults applied."""
    return interpolate(raw_compose(), DUMMY_SECRETS)


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def environment_of(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: str(value) for key, value in environment.items()}


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(part) for part in command]


def option(command: list[str], name: str) -> str:
    for index, part in enumerate(command):
        if part == name:
            return command[index + 1]
        if part.startswith(f"{name}="):
            return part.split("=", 1)[1]
    raise AssertionError(f"{name} not in {command}")


def volume_entries(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, source, target) for each volume entry, short or long syntax."""
    entries = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            entries.append((volume["type"], str(volume.get("source", "")), volume["target"]))
            continue
        source, _, rest = volume.partition(":")
        target = rest.split(":")[0] if rest else source
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        entries.append((kind, source, target))
    return entries


def published_ports(service: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    """(host ip, host port, container port, protocol) for each published port."""
    found = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            found.append(
                (
                    str(port.get("host_ip", "0.0.0.0")),
                    int(port["published"]),
                    int(port["target"]),
                    port.get("protocol", "tcp"),
                )
            )
            continue
        text, _, protocol = str(port).partition("/")
        parts = text.rsplit(":", 2)
        assert len(parts) >= 2, f"port {port!r} is not published on the host (no host port)"
        host_ip = parts[0] if len(parts) == 3 else "0.0.0.0"
        found.append((host_ip, int(parts[-2]), int(parts[-1]), protocol or "tcp"))
    return found


def megabytes(size: str) -> int:
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", size.strip().lower())
    assert match, f"unreadable size {size!r}"
    factor = {"k": 1 / 1024, "": 1 / 1024 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[match.group(2)]
    return int(int(match.group(1)) * factor)


def spark_workers() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in services().items() if name.startswith("spark-worker")}


def driver_service() -> str:
    """The service where the apps' drivers run: the one Airflow runs its tasks in (LocalExecutor)."""
    (name,) = [
        name for name, service in services().items() if command_of(service)[:2] == ["airflow", "scheduler"]
    ]
    assert environment_of(services()[name])["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    return name


# --------------------------------------------------------------------------- shape


def test_the_stack_has_every_service_with_compose_keys_only() -> None:
    assert set(services()) >= REQUIRED_SERVICES, f"missing: {REQUIRED_SERVICES - set(services())}"
    assert len(spark_workers()) >= 2, "the stack needs at least two Spark workers"
    unknown_top = {key for key in raw_compose() if not key.startswith("x-")} - TOP_LEVEL_KEYS
    assert not unknown_top, f"not compose top-level keys: {unknown_top}"
    for name, service in services().items():
        unknown = set(service) - SERVICE_KEYS
        assert not unknown, f"{name}: not compose service keys: {unknown}"
        assert "image" in service or "build" in service, f"{name}: neither image nor build"


def test_images_are_pinned() -> None:
    for name, service in services().items():
        image = service.get("image")
        assert image, f"{name}: give the image a name and tag (also for built images)"
        reference, _, _digest = image.partition("@")
        repository, _, tag = reference.rpartition(":")
        assert repository and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: image {image!r} is not pinned"
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("FROM "):
            base = line.split()[1]
            assert ":" in base and not base.endswith(":latest"), f"Dockerfile base {base!r} is not pinned"


def test_project_image_is_built_from_the_repository() -> None:
    built = {name: service for name, service in services().items() if "build" in service}
    assert {"airflow-scheduler", "spark-master", *spark_workers()} <= set(built)
    for name, service in built.items():
        context = (COMPOSE_DIR / service["build"]["context"]).resolve()
        assert context == ROOT, f"{name}: build context {context} is not the repository root"
        assert (context / service["build"]["dockerfile"]).resolve() == DOCKERFILE
        assert service["image"] == built["airflow-scheduler"]["image"], f"{name}: a second project image"
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY") and "--from" not in line:
            sources = [part for part in line.split()[1:] if not part.startswith("--")][:-1]
            for source in sources:
                assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is not in the repository"
    ignore = DOCKERFILE.with_name("Dockerfile.dockerignore").read_text().split()
    assert {".venv", ".cache", "data", ".git"} <= set(ignore), "the build context would carry local state"


# --------------------------------------------------------------------------- volumes and ports


def test_mounted_host_paths_exist_and_named_volumes_are_declared() -> None:
    declared = set(compose().get("volumes") or {})
    used = set()
    for name, service in services().items():
        targets = [target for _, _, target in volume_entries(service)]
        assert len(targets) == len(set(targets)), f"{name}: two mounts on one target"
        for kind, source, target in volume_entries(service):
            assert target.startswith("/"), f"{name}: mount target {target!r} is not absolute"
            if kind == "bind":
                assert not source.startswith(("/", "~")), f"{name}: {source} is outside the repository"
                path = (COMPOSE_DIR / source).resolve()
                assert path.is_relative_to(ROOT), f"{name}: {source} is outside the repository"
                assert path.exists(), f"{name}: mounted host path {source} ({path}) does not exist"
            elif kind == "volume":
                assert source in declared, f"{name}: volume {source!r} is not declared under volumes:"
                used.add(source)
    assert declared == used, f"declared but unused volumes: {declared - used}"


def test_kafka_logs_checkpoints_and_outputs_live_on_volumes() -> None:
    kafka_environment = environment_of(services()["kafka"])
    kafka_targets = {target: source for kind, source, target in volume_entries(services()["kafka"])}
    assert kafka_environment["KAFKA_LOG_DIRS"] in kafka_targets

    config = load_config(environ=environment_of(services()[driver_service()]))
    data_root = config.project_path(config.paths.data_root)
    shared = [data_root, config.data_path("checkpoints"), config.data_path("outputs")]
    # The driver commits what the executors write: both sides must mount the same volumes.
    for name in [driver_service(), *spark_workers()]:
        mounts = {target: (kind, source) for kind, source, target in volume_entries(services()[name])}
        for path in shared:
            assert path in mounts and mounts[path][0] == "volume", f"{name}: {path} is not on a volume"
    sources = {
        name: {target: source for _, source, target in volume_entries(services()[name]) if target in shared}
        for name in [driver_service(), *spark_workers()]
    }
    assert len({tuple(sorted(mounts.items())) for mounts in sources.values()}) == 1, sources


def test_host_ports_do_not_collide() -> None:
    taken: dict[tuple[int, str], str] = {}
    for name, service in services().items():
        for _host_ip, host_port, _container, protocol in published_ports(service):
            key = (host_port, protocol)
            assert key not in taken, f"host port {host_port}/{protocol}: {taken.get(key)} and {name}"
            taken[key] = name
    assert taken, "nothing is published: no UI would be reachable"
    # By default every UI listens on the host's loopback only; STACK_BIND_ADDRESS opens them up.
    for name, service in raw_compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("${STACK_BIND_ADDRESS:-127.0.0.1}:"), (
                f"{name}: {port} is on every address"
            )
    for name, service in services().items():
        if service.get("network_mode", "").startswith("service:"):
            assert not service.get("ports"), f"{name} shares a network namespace: publish on its owner"


# --------------------------------------------------------------------------- start-up order and health


def test_depends_on_targets_exist_and_their_conditions_can_be_met() -> None:
    graph: dict[str, set[str]] = {}
    for name, service in services().items():
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {target: {"condition": "service_started"} for target in depends}
        graph[name] = set(depends)
        for target, spec in depends.items():
            assert target in services(), f"{name} depends on {target!r}, which is not a service"
            condition = spec.get("condition", "service_started")
            assert condition in CONDITIONS, f"{name} -> {target}: unknown condition {condition!r}"
            if condition == "service_healthy":
                assert "healthcheck" in services()[target], f"{name} waits for {target} to be healthy"
            if condition == "service_completed_successfully":
                assert services()[target].get("restart") == "no", f"{target} is waited on to finish"
            if not service.get("profiles"):
                assert not services()[target].get("profiles"), f"{name} needs {target}, which is opt-in"
        mode = service.get("network_mode", "")
        if mode.startswith("service:"):
            assert mode.split(":", 1)[1] in depends, f"{name} shares {mode} without depending on it"

    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in visiting, f"depends_on cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        visiting.add(name)
        for target in graph[name]:
            visit(target, (*path, name))
        visiting.discard(name)
        done.add(name)

    for name in graph:
        visit(name, ())


def test_long_running_services_have_healthchecks() -> None:
    for name, service in services().items():
        restart = service.get("restart", "no")
        if restart == "no":
            continue
        check = service.get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
        assert check["test"][0] in {"CMD", "CMD-SHELL"}, f"{name}: healthcheck test must start with CMD"
        for key in ("interval", "timeout"):
            assert re.fullmatch(r"\d+(ms|s|m|h)", str(check.get(key, "30s"))), f"{name}: bad {key}"


# --------------------------------------------------------------------------- secrets


def test_secrets_come_only_from_the_environment() -> None:
    for name, service in raw_compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            text = str(value)
            if SECRET_NAME.search(key) and not key.endswith("_FILE"):  # *_FILE: where a secret lives
                required = re.search(r"\$\{[A-Z_]+:\?", text)
                assert required, f"{name}: {key} must be ${{VAR:?...}}, not a literal"
            credentials = re.search(r"://[^:/@\s]+:(\$\{[^}]*\}|[^@\s]+)@", text)
            if credentials:
                assert credentials.group(1).startswith("${"), f"{name}: {key} has a literal password"
    with pytest.raises(MissingVariable):
        interpolate(raw_compose(), {})
    missing = set()
    for secret in SECRETS:
        try:
            interpolate(raw_compose(), {k: v for k, v in DUMMY_SECRETS.items() if k != secret})
        except MissingVariable as error:
            missing.add(str(error).split(":")[0])
    assert missing == SECRETS, f"not required by the compose file: {SECRETS - missing}"
    documented = README.read_text()
    for secret in SECRETS:
        assert f"`{secret}`" in documented, f"infra/README.md does not document {secret}"


# --------------------------------------------------------------------------- the project's view


def test_pipeline_config_in_the_containers_loads_and_names_the_stack() -> None:
    users = {name: s for name, s in services().items() if "PIPELINE_ENV" in environment_of(s)}
    assert {driver_service(), "kafka-init"} <= set(users)
    kafka = environment_of(services()["kafka"])
    internal = dict(item.split("://", 1) for item in kafka["KAFKA_ADVERTISED_LISTENERS"].split(","))[
        kafka["KAFKA_INTER_BROKER_LISTENER_NAME"]
    ]
    master = command_of(services()["spark-master"])
    master_url = f"spark://{option(master, '--host')}:{option(master, '--port')}"
    for name, service in users.items():
        config = load_config(environ=environment_of(service))
        assert config.kafka.bootstrap_servers == internal, f"{name}: Kafka is at {internal}"
        assert config.spark.master == master_url, f"{name}: the Spark master is {master_url}"
        assert not config.broker.manage_local, f"{name}: the stack's broker is not the app's to start"
        assert config.metrics.host == "0.0.0.0", f"{name}: Prometheus scrapes from another container"
    for name, worker in spark_workers().items():
        command = command_of(worker)
        assert command[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert command[2] == master_url, f"{name} registers with {command[2]}"
        assert option(command, "--host") == name, f"{name}: --host must be its own service name"
    # The executors connect back to the driver: it must not advertise loopback.
    local_ip = environment_of(services()[driver_service()]).get("SPARK_LOCAL_IP")
    assert local_ip == driver_service(), f"the driver advertises {local_ip}, which executors cannot reach"


def test_each_app_fits_on_the_workers() -> None:
    config = load_config(environ=environment_of(services()[driver_service()]))
    extra = config.spark.extra_conf
    cores = [int(option(command_of(w), "--cores")) for w in spark_workers().values()]
    memory = [megabytes(option(command_of(w), "--memory")) for w in spark_workers().values()]
    executor_cores = int(extra["spark.executor.cores"])
    executor_memory = megabytes(extra["spark.executor.memory"])
    assert executor_cores <= min(cores) and executor_memory <= min(memory), "an executor fits no worker"
    # Every app streams all the time: together they must fit, or one would wait for cores forever.
    assert len(APP_NAMES) * int(extra["spark.cores.max"]) <= sum(cores)
    per_app = int(extra["spark.cores.max"]) // executor_cores
    assert len(APP_NAMES) * per_app * executor_memory <= sum(memory)


def test_prometheus_config_matches_the_repository_and_is_valid() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: run infra/scripts/install_test_servers.sh (make test does)")
    ours = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    repository = yaml.safe_load((ROOT / "monitoring" / "prometheus.yml").read_text())
    assert ours["global"] == repository["global"]
    # The alerts' links point at the Airflow UI where this stack publishes it on the host.
    assert ours["global"]["external_labels"][runbooks.UI_LABEL] == "http://127.0.0.1:8080"
    assert '"${STACK_BIND_ADDRESS:-127.0.0.1}:8080:8080"' in COMPOSE_FILE.read_text()
    assert ours["rule_files"] == repository["rule_files"]

    # The repository discovers the apps' drivers (file_sd); here they are static, on one container.
    discovery = ("static_configs", "file_sd_configs")

    def jobs(config: dict[str, Any]) -> dict[str, Any]:
        found = {}
        for job in config["scrape_configs"]:
            settings = {key: value for key, value in job.items() if key not in discovery}
            targets = [
                (static["labels"], [target.rsplit(":", 1)[1] for target in static["targets"]])
                for static in job.get("static_configs", [])
                if "app" not in static["labels"]
            ]
            found[job["job_name"]] = (settings, targets)
        return found

    assert jobs(ours) == jobs(repository), "same jobs, labels and ports; only the hosts differ"
    config = load_config(environ=environment_of(services()[driver_service()]))
    scraped = {
        static["labels"]["app"]: static["targets"]
        for job in ours["scrape_configs"]
        for static in job["static_configs"]
        if "app" in static["labels"]
    }
    assert scraped == {app: [f"{driver_service()}:{port}"] for app, port in config.metrics.ports.items()}

    listen = option(command_of(services()["alertmanager"]), "--web.listen-address").rsplit(":", 1)[1]
    (target,) = [
        target
        for manager in ours["alerting"]["alertmanagers"]
        for static in manager["static_configs"]
        for target in static["targets"]
    ]
    assert target == f"alertmanager:{listen}"

    prometheus = services()["prometheus"]
    mounts = {target: source for _, source, target in volume_entries(prometheus)}
    config_path = option(command_of(prometheus), "--config.file")
    assert (COMPOSE_DIR / mounts[config_path]).resolve() == COMPOSE_DIR / "prometheus.yml"
    rules_dir = str(Path(config_path).parent / Path(ours["rule_files"][0]).parent)
    assert (COMPOSE_DIR / mounts[rules_dir]).resolve() == ROOT / "monitoring" / "rules"


def test_prometheus_config_passes_promtool_with_the_rules(tmp_path: Path) -> None:
    """Laid out as in the container: the config, and the rules folder beside it."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: run infra/scripts/install_test_servers.sh (make test does)")
    shutil.copy(COMPOSE_DIR / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copytree(ROOT / "monitoring" / "rules", tmp_path / "rules")
    result = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    rules = len(list((ROOT / "monitoring" / "rules").glob("*.yml")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {rules} rule files found" in result.stdout + result.stderr


def test_alertmanager_uses_the_repository_config_and_reaches_the_receiver() -> None:
    alertmanager = services()["alertmanager"]
    mounts = {target: source for _, source, target in volume_entries(alertmanager)}
    config_path = option(command_of(alertmanager), "--config.file")
    assert (COMPOSE_DIR / mounts[config_path]).resolve() == ROOT / "monitoring" / "alertmanager.yml"
    routes = yaml.safe_load((ROOT / "monitoring" / "alertmanager.yml").read_text())
    urls = {hook["url"] for receiver in routes["receivers"] for hook in receiver.get("webhook_configs", [])}
    receiver = services()["webhook-receiver"]
    assert receiver["network_mode"] == "service:alertmanager", "127.0.0.1 must be the receiver's address"
    command = command_of(receiver)
    address = f"http://{option(command, '--host')}:{option(command, '--port')}/"
    assert urls and all(url.startswith(address) for url in urls), (urls, address)
    listen = option(command_of(alertmanager), "--web.listen-address")
    assert option(command, "--port") != listen.rsplit(":", 1)[1], "one namespace, two servers, one port"


def test_grafana_provisions_the_dashboard_and_the_prometheus_datasource() -> None:
    grafana = services()["grafana"]
    mounts = {target: source for _, source, target in volume_entries(grafana)}
    provisioning = {
        target: (COMPOSE_DIR / source).resolve()
        for target, source in mounts.items()
        if target.startswith("/etc/grafana/provisioning/")
    }
    datasources = yaml.safe_load(
        next((provisioning["/etc/grafana/provisioning/datasources"]).glob("*.yml")).read_text()
    )["datasources"]
    (prometheus_source,) = [source for source in datasources if source["type"] == "prometheus"]
    assert prometheus_source["isDefault"] is True
    port = option(command_of(services()["prometheus"]), "--web.listen-address").rsplit(":", 1)[1]
    assert prometheus_source["url"] == f"http://prometheus:{port}"

    providers = yaml.safe_load(
        next((provisioning["/etc/grafana/provisioning/dashboards"]).glob("*.yml")).read_text()
    )["providers"]
    folders = {provider["options"]["path"] for provider in providers}
    dashboards = {
        target: (COMPOSE_DIR / source).resolve()
        for target, source in mounts.items()
        if target.endswith(".json")
    }
    assert ROOT / "monitoring" / "grafana" / "streaming_pipelines.json" in dashboards.values()
    assert all(str(Path(target).parent) in folders for target in dashboards), (dashboards, folders)
    home = environment_of(grafana).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    assert home is None or home in dashboards


def test_versions_match_the_rest_of_the_repository() -> None:
    ivy = (DESCRIPTOR_DIR / "kafka-broker.ivy.xml").read_text()
    kafka_version = re.search(r'name="kafka_2\.13" rev="([^"]+)"', ivy).group(1)  # type: ignore[union-attr]
    assert services()["kafka"]["image"] == f"apache/kafka:{kafka_version}", "Kafka differs from the local one"

    dockerfile = DOCKERFILE.read_text()
    setup = (ROOT / "infra" / "scripts" / "setup.sh").read_text()
    uv_pin = re.search(r"^UV_VERSION=(\S+)", setup, re.M).group(1)  # type: ignore[union-attr]
    assert f"ARG UV_VERSION={uv_pin}" in dockerfile, "the image's uv differs from setup.sh's"
    assert re.search(r"^FROM python:3\.11\.\d+-slim", dockerfile, re.M), "the project is Python 3.11"
    assert "openjdk-17" in dockerfile
    assert "requirements.lock" in dockerfile and "setup-jvm" in dockerfile

    pyproject = (ROOT / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)  # type: ignore[union-attr]
    assert services()["airflow-scheduler"]["image"] == f"stream-pipelines:{version}"


# --------------------------------------------------------------------------- docker compose itself


def test_docker_compose_config_accepts_the_file() -> None:
    """The compose plugin's own validation; runs only where the plugin is installed (see the module doc)."""
    docker = shutil.which("docker")
    probe = (
        subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False)
        if docker
        else None
    )
    if probe is None or probe.returncode != 0:
        reason = "no docker client"
        if probe is not None:
            reason = (probe.stderr or probe.stdout).strip().splitlines()[0]
        pytest.skip(f"docker compose plugin not available ({reason}); the static checks above still ran")
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "--profile", "demo", "config", "-q"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **DUMMY_SECRETS},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
