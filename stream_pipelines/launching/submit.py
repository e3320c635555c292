"""How an app or a job is launched: one spark-submit command line, shared by the front door and Airflow."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Literal

from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.registry import App, entry_point
from stream_pipelines.launching import driver_bundle, jvm, packed_env
from stream_pipelines.launching.spark_conf import spark_conf

# How a streaming app's queries are triggered (the driver's ``--trigger``): every trigger interval, or
# once over what is available now, then the app exits.
TriggerMode = Literal["processing", "available-now"]
RECONCILE_SCRIPT = "reconcile"
COMPACT_SCRIPT = "compact"


def driver_args(
    config: PipelineConfig, script_args: Sequence[str] = (), overrides: Sequence[str] = ()
) -> list[str]:
    """What a driver needs to load the very same config the launcher validated, then its own arguments.
    A driver in YARN reads the conf dir and the overrides from its bundle (``driver_bundle``)."""
    if config.drivers_in_cluster:
        return ["--env", config.env, "--conf-dir", driver_bundle.container_conf_dir(config), *script_args]
    # The folder the config was read from, not <project>/conf: a deployment may keep it anywhere.
    args = ["--env", config.env, "--conf-dir", str(config.conf_dir), *script_args]
    for override in overrides:
        args += ["--set", override]
    return args


def spark_submit_executable() -> str:
    beside_python = Path(sys.executable).parent / "spark-submit"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("spark-submit")
    if not found:
        raise FileNotFoundError("spark-submit is not on PATH; run `make setup` or activate .venv")
    return found


@dataclass(frozen=True)
class Submission:
    """One spark-submit of the package's ``spark_apps/<script>.py``: its Spark settings, the entry point
    and the driver's arguments; with drivers in YARN, the bundle that ships the config to the driver."""

    config: PipelineConfig
    name: str
    conf: dict[str, str]
    entry_point: str
    args: list[str]
    bundle: driver_bundle.DriverBundle | None

    def command(self) -> list[str]:
        command = [
            spark_submit_executable(),
            "--master",
            self.config.spark.master,
            "--deploy-mode",
            self.config.spark.deploy_mode,
            "--name",
            self.name,
        ]
        for key, value in self.conf.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, self.entry_point, *self.args]


def submission(
    config: PipelineConfig,
    script: str,
    script_args: Sequence[str] = (),
    overrides: Sequence[str] = (),
    app: str | None = None,
    launch_tag: str | None = None,
) -> Submission:
    """``script`` with exactly the streaming apps' Spark settings (those of ``app``'s driver when it is one
    of them); on YARN, ``launch_tag`` tags this launch's application."""
    conf = spark_conf(config, app, job=script)
    if launch_tag is not None:
        conf["spark.yarn.tags"] = f"{conf['spark.yarn.tags']},{launch_tag}"
    bundle = driver_bundle.write(config, tuple(overrides)) if config.drivers_in_cluster else None
    if bundle is not None:
        conf.update(bundle.spark_conf(conf))
    args = driver_args(config, script_args, overrides)
    return Submission(config, script, conf, entry_point(script), args, bundle)


def submit_command(
    config: PipelineConfig,
    script: str,
    script_args: Sequence[str] = (),
    overrides: Sequence[str] = (),
    app: str | None = None,
) -> list[str]:
    """The spark-submit line of ``submission``, for a launcher that runs it and waits."""
    return submission(config, script, script_args, overrides, app).command()


def spark_submit_command(
    config: PipelineConfig, app: App, trigger: TriggerMode, overrides: Sequence[str] = ()
) -> list[str]:
    """One streaming app, run with the given trigger."""
    return submit_command(config, app.name, ["--trigger", trigger], overrides, app=app.name)


def reconcile_submit_command(config: PipelineConfig, day: date, overrides: Sequence[str] = ()) -> list[str]:
    """The nightly reconciliation of event day D (spark_apps/reconcile.py in the package)."""
    return submit_command(config, RECONCILE_SCRIPT, ["--date", day.isoformat()], overrides)


def compact_submit_command(
    config: PipelineConfig, *, dry_run: bool = False, overrides: Sequence[str] = ()
) -> list[str]:
    """The compaction of every file sink's closed days (spark_apps/compact.py in the package)."""
    return submit_command(config, COMPACT_SCRIPT, ["--dry-run"] if dry_run else [], overrides)


def submit_environment(
    base: dict[str, str] | None = None, config: PipelineConfig | None = None
) -> dict[str, str]:
    """The launcher's environment with the venv's python for driver and workers; with a YARN ``config``,
    what spark-submit needs to reach YARN and to ship PySpark to the containers."""
    environment = dict(os.environ if base is None else base)
    if config is not None and config.on_yarn:
        environment.update(yarn_environment(config))
    if config is not None and config.drivers_in_cluster and config.yarn.python_environment:
        # spark-submit hands these on to the driver's container (spark.yarn.appMasterEnv.*), over the
        # settings: there the packed Python is the only one.
        environment["PYSPARK_PYTHON"] = environment["PYSPARK_DRIVER_PYTHON"] = packed_env.PACKED_PYTHON
        # pip's spark-submit runs PYSPARK_DRIVER_PYTHON to find its Spark home, unless it is named.
        environment.setdefault("SPARK_HOME", str(jvm.spark_home()))
    environment.setdefault("PYSPARK_PYTHON", sys.executable)
    environment.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local runs stay on loopback; without this Spark binds to the first interface it finds.
    environment.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    return environment


def yarn_environment(config: PipelineConfig) -> dict[str, str]:
    """``HADOOP_CONF_DIR`` (the ResourceManager's address), ``JAVA_HOME`` (the containers' Java, when the
    launcher knows it) and ``PYSPARK_ARCHIVES_PATH`` (PySpark for the containers' Python path: a pip
    install has no ``$SPARK_HOME/python/lib`` where spark-submit would look)."""
    environment: dict[str, str] = {}
    conf_dir = config.hadoop_conf_dir()
    if conf_dir:
        environment["HADOOP_CONF_DIR"] = conf_dir
    environment["JAVA_HOME"] = os.environ.get("JAVA_HOME") or str(
        Path(os.path.realpath(jvm.java_executable())).parent.parent
    )
    lib = jvm.spark_home() / "python" / "lib"
    archives = sorted(lib.glob("py4j-*-src.zip"))
    # ``local:`` says every node has the file at this path; with a packed environment a node has only
    # a JVM, so spark-submit uploads them with the application (4 MB).
    scheme = "" if config.yarn.python_environment else "local:"
    environment["PYSPARK_ARCHIVES_PATH"] = ",".join(
        f"{scheme}{path}" for path in [lib / "pyspark.zip", *archives]
    )
    return environment
