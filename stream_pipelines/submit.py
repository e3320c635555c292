"""How an app is launched: one spark-submit command line, shared by the front door and Airflow."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from stream_pipelines.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.registry import app as declared_app
from stream_pipelines.runtime import TriggerMode, spark_conf

SPARK_APPS_DIR = PROJECT_ROOT / "spark_apps"


def application_path(app: str) -> str:
    return declared_app(app).entry_point


def application_args(
    config: PipelineConfig, trigger: TriggerMode, overrides: Sequence[str] = ()
) -> list[str]:
    """What the driver needs to load the very same config the launcher validated."""
    args = ["--env", config.env, "--conf-dir", str(config.conf_dir), "--trigger", trigger]
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


def spark_submit_command(
    config: PipelineConfig, app: str, trigger: TriggerMode, overrides: Sequence[str] = ()
) -> list[str]:
    command = [
        spark_submit_executable(),
        "--master",
        config.spark.master,
        "--deploy-mode",
        config.spark.deploy_mode,
        "--name",
        app,
    ]
    for key, value in spark_conf(config).items():
        command += ["--conf", f"{key}={value}"]
    return [*command, application_path(app), *application_args(config, trigger, overrides)]


def submit_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The launcher's environment with the venv's python for driver and workers."""
    environment = dict(os.environ if base is None else base)
    environment.setdefault("PYSPARK_PYTHON", sys.executable)
    environment.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local runs stay on loopback; without this Spark binds to the first interface it finds.
    environment.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    return environment
