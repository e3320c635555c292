"""What the package ships beside its code and writes from it: the starter conf dir (`pipelinectl init-conf`),
the monitoring files, the Airflow DAG files (`pipelinectl airflow-dags`) and the caches' folders.

The installed wheel's side of it (the files inside the wheel, Airflow parsing the written DAG files) is
tests/test_installed_package.py."""

from __future__ import annotations

import fnmatch
import os
import tomllib
from pathlib import Path

import pytest

from stream_pipelines import cli
from stream_pipelines.core import shipped
from stream_pipelines.core.config import PROJECT_ROOT, load_config
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.launching import jvm
from stream_pipelines.observability import runbooks
from stream_pipelines.quality import data_docs_assets


def test_the_checkouts_dags_folder_holds_exactly_what_pipelinectl_airflow_dags_writes(tmp_path):
    assert cli.main(["airflow-dags", str(tmp_path / "dags")]) == 0
    written = {path.name: path.read_text() for path in (tmp_path / "dags").iterdir()}
    committed = {path.name: path.read_text() for path in (PROJECT_ROOT / "dags").glob("*.py")}
    assert committed == written, "dags/ is stale: rewrite it with `pipelinectl airflow-dags dags`"
    assert sorted(written) == [f"{module}.py" for module in shipped.dag_modules()]


def test_each_dag_file_imports_one_dag_module_and_passes_airflows_safe_mode_filter(tmp_path):
    shipped.write_dag_files(tmp_path)
    for module in shipped.dag_modules():
        text = (tmp_path / f"{module}.py").read_text()
        code = [line for line in text.splitlines() if line and not line.startswith(("#", '"""'))]
        assert f"from stream_pipelines.airflow.dags.{module} import *  # noqa: F403" in code
        # Airflow's default safe-mode heuristic imports only files whose text holds both words.
        assert b"airflow" in text.encode().lower() and b"dag" in text.encode().lower()
        assert (shipped.DAG_MODULES / f"{module}.py").is_file()


def test_airflow_dags_rewrites_its_own_files_removes_stale_ones_and_refuses_anyone_elses(tmp_path, capsys):
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "pipeline_control.py").write_text("# the platform team's own DAG\n")
    (folder / "retired_dag.py").write_text(shipped.dag_file_text("retired_dag"))
    (folder / "unrelated.py").write_text("# another team's DAG\n")

    assert cli.main(["airflow-dags", str(folder)]) == ExitCode.BAD_CONFIG
    error = capsys.readouterr().err
    assert str(folder / "pipeline_control.py") in error and "--force" in error, error
    assert (folder / "pipeline_control.py").read_text() == "# the platform team's own DAG\n"
    assert not (folder / "checkpoint_reset.py").exists(), "nothing is written when one file is refused"

    assert cli.main(["airflow-dags", str(folder), "--force"]) == 0
    printed = capsys.readouterr().out
    assert f"removed {folder / 'retired_dag.py'}" in printed
    assert sorted(path.name for path in folder.iterdir()) == sorted(
        [*(f"{module}.py" for module in shipped.dag_modules()), "unrelated.py"]
    )
    assert (folder / "pipeline_control.py").read_text() == shipped.dag_file_text("pipeline_control")

    assert cli.main(["airflow-dags", str(folder)]) == 0
    assert f"unchanged {len(shipped.dag_modules())} DAG files" in capsys.readouterr().out


def test_init_conf_writes_the_starter_files_which_load_as_a_conf_dir(tmp_path, capsys):
    conf_dir = tmp_path / "site" / "conf"
    assert cli.main(["init-conf", str(conf_dir)]) == 0
    printed = capsys.readouterr().out
    starter = sorted(path.name for path in (PROJECT_ROOT / "conf").iterdir())
    assert sorted(path.name for path in conf_dir.iterdir()) == starter
    for name in starter:
        assert (conf_dir / name).read_bytes() == (PROJECT_ROOT / "conf" / name).read_bytes(), name
    # It says what to edit, where relative paths land, and how to name the folder.
    assert "edit them" in printed and f"PIPELINE_CONF_DIR={conf_dir}" in printed and "--conf-dir" in printed
    assert f"local.yaml paths.data_root: data -> {tmp_path / 'site' / 'data'}" in printed
    assert "no such file" not in printed

    config = load_config("local", conf_dir=conf_dir, environ={})
    assert config.conf_dir == conf_dir and config.data_path("archive") == str(tmp_path / "site/data/archive")


def test_init_conf_refuses_to_overwrite_unless_forced_and_names_the_file(tmp_path, capsys):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "local.yaml").write_text("# edited by the deployment\n")

    assert cli.main(["init-conf", str(conf_dir), "--env", "local"]) == ExitCode.BAD_CONFIG
    error = capsys.readouterr().err
    assert str(conf_dir / "local.yaml") in error and "--force" in error, error
    assert (conf_dir / "local.yaml").read_text() == "# edited by the deployment\n"
    assert not (conf_dir / "sensor_metadata.csv").exists(), "nothing is written when one file is refused"

    assert cli.main(["init-conf", str(conf_dir), "--env", "local", "--force"]) == 0
    assert (conf_dir / "local.yaml").read_bytes() == (PROJECT_ROOT / "conf" / "local.yaml").read_bytes()


def test_init_conf_for_one_env_brings_the_files_it_extends_and_flags_a_metadata_path_that_misses(
    tmp_path, capsys
):
    folder = tmp_path / "etc-stream-pipelines"
    assert cli.main(["init-conf", str(folder), "--env", "yarn"]) == 0
    printed = capsys.readouterr().out
    # yarn.yaml extends hdfs.yaml, which extends local.yaml.
    assert sorted(path.name for path in folder.iterdir()) == [
        "hdfs.yaml",
        "local.yaml",
        "sensor_metadata.csv",
        "yarn.yaml",
    ]
    # local.yaml's conf/sensor_metadata.csv resolves beside a folder named conf, which this one is not.
    missed = tmp_path / "conf" / "sensor_metadata.csv"
    assert f"sensors.metadata_path: conf/sensor_metadata.csv -> {missed}" in printed
    assert f"no such file: set sensors.metadata_path to {folder / 'sensor_metadata.csv'}" in printed
    assert "--env yarn" in printed

    with pytest.raises(SystemExit) as refused:
        cli.main(["init-conf", str(tmp_path / "other"), "--env", "production"])
    assert refused.value.code == 2 and not (tmp_path / "other").exists()
    assert "invalid choice: 'production'" in capsys.readouterr().err


def test_the_shipped_files_are_the_checkouts_and_the_wheel_carries_each_one():
    """stream_pipelines/shipped/ links to conf/, monitoring/ and the runbooks (one copy in git), and
    pyproject.toml's package-data takes every file the code reads there into the wheel."""
    assert shipped.STARTER_CONF.resolve() == (PROJECT_ROOT / "conf").resolve()
    for name in ("rules", "grafana", "prometheus.yml", "alertmanager.yml"):
        assert (shipped.MONITORING / name).resolve() == (PROJECT_ROOT / "monitoring" / name).resolve()
    assert runbooks.RUNBOOKS.resolve() == (PROJECT_ROOT / "docs" / "runbooks.md").resolve()
    patterns = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["stream_pipelines"]
    carried = [  # through the links: pathlib's rglob does not follow them (Python 3.11)
        Path(folder, name)
        for folder, _, names in os.walk(shipped.SHIPPED, followlinks=True)
        for name in names
        if not name.startswith(".")
    ]
    # conf/'s files, the rules, the Prometheus and Alertmanager configs, the dashboard and the runbooks.
    assert len(carried) == len(list((PROJECT_ROOT / "conf").iterdir())) + 5, carried
    for path in carried:
        relative = str(path.relative_to(shipped.PACKAGE_ROOT))
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), f"{relative} not shipped"


def test_a_cache_variable_wins_and_a_checkout_keeps_its_caches_in_dot_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(jvm.CACHE_VARIABLE, str(tmp_path / "jvm"))
    monkeypatch.delenv(data_docs_assets.CACHE_VARIABLE, raising=False)
    assert jvm.cache_root() == tmp_path / "jvm"
    assert shipped.source_checkout() == PROJECT_ROOT
    assert data_docs_assets.cache_root() == PROJECT_ROOT / ".cache" / "web"


def test_jvm_downloads_are_shared_by_every_checkout_and_install_of_the_user(monkeypatch, tmp_path):
    """Ivy's downloads go to the user's cache folder even from a checkout (whose resolved bundles stay in
    .cache/jvm): a second clone resolves without the network. PIPELINE_IVY_CACHE names another folder."""
    monkeypatch.delenv(jvm.DOWNLOAD_CACHE_VARIABLE, raising=False)
    monkeypatch.delenv(jvm.CACHE_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shipped.source_checkout() == PROJECT_ROOT
    assert jvm.cache_root() == PROJECT_ROOT / ".cache" / "jvm"
    assert jvm.download_cache_root() == tmp_path / "xdg" / "stream-pipelines" / "ivy"
    monkeypatch.setenv(jvm.DOWNLOAD_CACHE_VARIABLE, str(tmp_path / "shared-ivy"))
    assert jvm.download_cache_root() == tmp_path / "shared-ivy"


def test_an_install_caches_in_the_users_cache_folder(monkeypatch, tmp_path):
    """An installed package's PROJECT_ROOT is its site's lib/pythonX.Y, which holds no pyproject.toml."""
    site_lib = tmp_path / "lib" / "python3.11"
    site_lib.mkdir(parents=True)
    monkeypatch.setattr(shipped, "PROJECT_ROOT", site_lib)
    monkeypatch.delenv(jvm.CACHE_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shipped.source_checkout() is None
    assert jvm.cache_root() == tmp_path / "xdg" / "stream-pipelines" / "jvm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_docs_assets.cache_root() == tmp_path / "home" / ".cache" / "stream-pipelines" / "web"
