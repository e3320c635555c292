"""The package as a platform team installs it: a wheel built from the tracked files, installed into a new
virtualenv outside any checkout (the pins as constraints), run from another folder with the conf dir the
installed `pipelinectl init-conf` wrote, and Airflow parsing the DAG files the installed `pipelinectl
airflow-dags` wrote. Nothing may come from the source tree."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from stream_pipelines.core import shipped
from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.core.registry import APP_NAMES, APPS
from stream_pipelines.launching import jvm
from tests.conftest import (
    InstalledSite,
    Replay,
    committed_rows,
    files_source_overrides,
    make_overrides_config,
    outside_environment,
    run,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(installed_site: InstalledSite) -> Path:
    return installed_site.venv


@pytest.fixture(scope="module")
def conf_dir(installed_site: InstalledSite) -> Path:
    return installed_site.conf_dir


def modules_from_the_checkout(modules: list[str]) -> list[str]:
    return [path for path in modules if path.startswith(str(PROJECT_ROOT))]


def test_the_wheel_ships_the_entry_points_and_the_plugin_and_leaves_the_tooling_out(installed):
    [wheel] = (installed.parent / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {
        f"stream_pipelines/spark_apps/{script}.py" for script in (*APP_NAMES, "reconcile", "compact")
    } <= set(names)
    assert not [name for name in names if name.startswith("stream_pipelines/devtools")]
    # conf/, monitoring/ and the runbooks as they are in the checkout (the files, not the links to them),
    # and the DAGs.
    shipped_files = {
        "stream_pipelines/shipped/conf/": PROJECT_ROOT / "conf",
        "stream_pipelines/shipped/monitoring/rules/": PROJECT_ROOT / "monitoring" / "rules",
    }
    for prefix, folder in shipped_files.items():
        for source in folder.iterdir():
            assert zipfile.ZipFile(wheel).read(prefix + source.name) == source.read_bytes(), source
    assert "stream_pipelines/shipped/monitoring/prometheus.yml" in names
    runbooks = (PROJECT_ROOT / "docs" / "runbooks.md").read_bytes()
    assert zipfile.ZipFile(wheel).read("stream_pipelines/shipped/docs/runbooks.md") == runbooks
    assert not [name for name in names if name.startswith("stream_pipelines/shipped/") and name[-3:] == ".py"]
    assert {f"stream_pipelines/airflow/dags/{module}.py" for module in shipped.dag_modules()} <= set(names)
    [entry_points] = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    declared = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert (
        "[airflow.plugins]" in declared
        and "stream_pipelines.airflow.plugin:StreamingPipelinePlugin" in declared
    )
    [metadata] = [name for name in names if name.endswith(".dist-info/METADATA")]
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    assert "apache-airflow<4,>=3.3.2" in requires and "pyspark<4.2,>=4.1.3" in requires, requires


def test_the_installed_cli_runs_from_anywhere_with_a_named_conf_dir_and_nothing_from_the_checkout(
    installed, conf_dir, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = outside_environment()
    pipelinectl = str(installed / "bin" / "pipelinectl")

    # No conf dir named: the error says how to name one.
    refused = subprocess.run(
        [pipelinectl, "status"], cwd=elsewhere, env=environment, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "PIPELINE_CONF_DIR" in refused.stderr, refused.stderr

    # The deployment names its conf dir, and where its JVM artifacts were resolved (here, the ones
    # `make setup` resolved for this session: jars, not modules).
    named = {
        **environment,
        "PIPELINE_CONF_DIR": str(conf_dir),
        jvm.CACHE_VARIABLE: str(jvm.cache_root()),
    }
    status = run(
        [pipelinectl, "status", "--set", f"paths.data_root={tmp_path}/data"], cwd=elsewhere, env=named
    )
    assert [line.split(":")[0] for line in status.stdout.splitlines()] == [f"app {app}" for app in APP_NAMES]

    probe = (
        "import json, sys\n"
        "from stream_pipelines import cli\n"
        "from stream_pipelines.core import registry\n"
        "from stream_pipelines.launching.submit import reconcile_submit_command\n"
        "from stream_pipelines.core.config import load_config\n"
        "from stream_pipelines.airflow import health\n"
        "from stream_pipelines.launching import jvm\n"
        "from stream_pipelines.reconciliation.job import code_version\n"
        "import datetime, os\n"
        "command = reconcile_submit_command(load_config(), datetime.date(2026, 1, 1))\n"
        "del os.environ[jvm.CACHE_VARIABLE]\n"
        "print(json.dumps({'modules': sorted({m.__file__ for m in list(sys.modules.values())\n"
        "                                      if getattr(m, '__file__', None)}),\n"
        "                  'entry_point': registry.RAW_ARCHIVE.entry_point, 'command': command,\n"
        "                  'alert_rules': str(health.ALERT_RULES), 'jvm_cache': str(jvm.cache_root()),\n"
        "                  'code_version': code_version()}))\n"
    )
    user_cache = tmp_path / "user-cache"
    seen = json.loads(
        run(
            [str(installed / "bin" / "python"), "-c", probe],
            cwd=elsewhere,
            env={**named, "XDG_CACHE_HOME": str(user_cache)},
        ).stdout
    )
    from_checkout = modules_from_the_checkout(seen["modules"])
    assert from_checkout == [], from_checkout[:5]
    # The page's alert rules are the package's copy; an install with no cache named caches per user, and
    # its reconciliation reports record the package's version (an install has no git commit).
    assert seen["alert_rules"].startswith(str(installed / "lib")) and Path(seen["alert_rules"]).is_file()
    assert seen["jvm_cache"] == str(user_cache / "stream-pipelines" / "jvm")
    assert seen["code_version"] == "stream-pipelines 0.1.0"
    site_packages = str(installed / "lib")
    assert seen["entry_point"].startswith(site_packages) and Path(seen["entry_point"]).is_file()
    script = next(part for part in seen["command"] if part.endswith("reconcile.py"))
    assert script.startswith(site_packages) and Path(script).is_file(), seen["command"]
    assert str(installed / "bin" / "spark-submit") == seen["command"][0]


def test_the_installed_package_runs_an_app_through_spark_submit_from_its_own_entry_point(
    installed, conf_dir, tmp_path
):
    """raw_archive over a files replay, started by the installed `pipelinectl run` from another folder with
    no PYTHONPATH: its spark-submit, its entry point and its driver's Python are the new virtualenv's (the
    checkout is nowhere on their path), and the archive holds every replayed line once."""
    replay = Replay(tmp_path / "replay")
    events = [
        {
            "event_id": f"e{i}",
            "sensor_id": "sensor-0001",
            "temperature": 20.0 + i,
            "ts": f"2026-01-01T00:0{i}:00Z",
        }
        for i in range(5)
    ]
    replay.batch("sensors", events[:3])
    replay.batch("sensors", events[3:])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = outside_environment(
        PIPELINE_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        **{jvm.CACHE_VARIABLE: str(jvm.cache_root())},
    )
    settings = [
        f"paths.data_root={tmp_path / 'data'}",
        *files_source_overrides(replay.root),
        "spark.shuffle_partitions=2",
        "spark.driver_memory=1g",
        "spark.class_archive=false",  # trained on the checkout's classpath, not this install's
        "metrics.enabled=false",
    ]
    for topic in make_overrides_config(settings).kafka.topics.inputs():  # the archive reads every input
        (replay.root / topic.name).mkdir(exist_ok=True)
    command = [str(installed / "bin" / "pipelinectl"), "run", "raw_archive", "--trigger", "available-now"]
    for setting in settings:
        command += ["--set", setting]
    with (tmp_path / "run.log").open("w") as log:
        ran = subprocess.run(
            command, cwd=elsewhere, env=environment, stdout=log, stderr=subprocess.STDOUT, timeout=600
        )
    output = (tmp_path / "run.log").read_text()
    assert ran.returncode == 0, output[-4000:]
    archived = [
        row["value"]
        for row in committed_rows(
            make_overrides_config(settings), str(tmp_path / "data" / "archive"), ["value"]
        )
    ]
    assert sorted(json.loads(value)["event_id"] for value in archived) == [e["event_id"] for e in events]


AIRFLOW_PROBE = """
import json, sys
from airflow import plugins_manager
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(sys.argv[1], safe_mode=True)  # safe mode: only files that mention airflow and dag
from stream_pipelines.airflow import health
from stream_pipelines.core.registry import APPS
links = {app.supervisor_dag_id for app in APPS.values()} | {
    link.removeprefix("/dags/") for app in APPS for link in health.action_links(app).values()
    if link.startswith("/dags/")
}
print(json.dumps({
    "errors": {path: str(error) for path, error in bag.import_errors.items()},
    "filelocs": {dag_id: dag.fileloc for dag_id, dag in bag.dags.items()},
    "supervised": {dag_id: health.app_of_dag(dag_id) for dag_id in bag.dags},
    "linked": sorted(links),
    "plugins": {info["name"]: str(info["source"]) for info in plugins_manager.get_plugin_info()},
    "plugin_errors": plugins_manager.get_import_errors(),
    "modules": sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)}),
}))
"""


def test_the_installed_pipelinectl_writes_dag_files_that_airflow_parses_with_the_page_registered(
    installed, conf_dir, tmp_path
):
    """A DAGs folder and an Airflow home of their own, the DAG files written by the installed `pipelinectl
    airflow-dags`: Airflow (the new virtualenv's) imports every DAG with no error, from those files, and
    registers the page from the package's entry point; every DAG the page links to is there."""
    dags_folder, plugins_folder = tmp_path / "airflow-dags", tmp_path / "plugins"
    plugins_folder.mkdir()
    environment = outside_environment(
        AIRFLOW_HOME=str(tmp_path / "airflow-home"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(plugins_folder),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PIPELINE_CONF_DIR=str(conf_dir),
    )
    written = run(
        [str(installed / "bin" / "pipelinectl"), "airflow-dags", str(dags_folder)],
        cwd=tmp_path,
        env=environment,
    )
    assert f"wrote {len(shipped.dag_modules())} DAG files in {dags_folder}" in written.stdout
    assert sorted(path.name for path in dags_folder.iterdir()) == sorted(
        path.name for path in (PROJECT_ROOT / "dags").glob("*.py")
    )

    seen = json.loads(
        run(
            [str(installed / "bin" / "python"), "-c", AIRFLOW_PROBE, str(dags_folder)],
            cwd=tmp_path,
            env=environment,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert seen["errors"] == {}
    expected = {app.supervisor_dag_id for app in APPS.values()} | {
        "pipeline_control",
        "checkpoint_reset",
        "output_maintenance",
        "reconciliation_days",
        "nightly_reconciliation",
        "compliance_sign_off",
    }
    assert set(seen["filelocs"]) == expected
    assert {Path(fileloc).parent for fileloc in seen["filelocs"].values()} == {dags_folder}
    assert set(seen["linked"]) <= set(seen["filelocs"])
    assert {seen["supervised"][app.supervisor_dag_id] for app in APPS.values()} == set(APPS)
    assert "stream-pipelines" in seen["plugins"]["streaming_pipeline"], seen["plugins"]
    assert seen["plugin_errors"] == {}
    from_checkout = modules_from_the_checkout(seen["modules"])
    assert from_checkout == [], from_checkout[:5]
