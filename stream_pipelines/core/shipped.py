"""The files the package carries beside its code, what it writes from them for a deployment, and where its
caches go.

The checkout holds one copy of each file: conf/ (a deployment's starter conf dir) and monitoring/ (the
alert rules, the Prometheus and Alertmanager configs, the dashboard). stream_pipelines/shipped/ links to
them: a checkout or an editable install reads them through those links, and a wheel carries the files
themselves (pyproject.toml's package-data). Code reads them under ``SHIPPED`` either way, never from a
source tree.

The Airflow DAG files are written here too: one import each, of a module of ``DAG_PACKAGE``. The
checkout's dags/ holds exactly what ``write_dag_files`` writes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from stream_pipelines.core.config import BASE_KEY, PROJECT_ROOT

DISTRIBUTION = "stream-pipelines"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SHIPPED = PACKAGE_ROOT / "shipped"
STARTER_CONF = SHIPPED / "conf"
MONITORING = SHIPPED / "monitoring"
SENSOR_METADATA = "sensor_metadata.csv"

DAG_PACKAGE = "stream_pipelines.airflow.dags"
DAG_MODULES = PACKAGE_ROOT / "airflow" / "dags"
# The first line of every DAG file written here: how a rewrite knows a file is its own to replace. It
# also carries the words Airflow's safe mode looks for ("airflow" and "dag") before it imports a file.
DAG_FILE_MARKER = '"""Airflow DAG file written by `pipelinectl airflow-dags`'

# The config entries that name a location, which a relative value places under the conf dir's parent
# (PipelineConfig.base_dir); the sensor metadata must exist when the config loads.
RELATIVE_LOCATIONS = (
    ("paths", "data_root"),
    ("paths", "local_root"),
    ("source", "files_dir"),
    ("sensors", "metadata_path"),
)
REQUIRED_LOCATIONS = (("sensors", "metadata_path"),)


class ShippedFileError(RuntimeError):
    """A file was not written (it exists, or was not asked for right); the message names it."""


def source_checkout() -> Path | None:
    """The source checkout the package runs from (an editable install, or the checkout on the path), or
    None for an installed package, whose parent folder is a site's lib/ and holds no pyproject.toml."""
    return PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").is_file() else None


def cache_dir(variable: str, kind: str) -> Path:
    """A cache folder: the ``variable``'s value when set; else .cache/<kind> in a checkout (beside the
    venv `make setup` builds), else the user's cache folder ($XDG_CACHE_HOME or ~/.cache) under
    stream-pipelines/<kind>, as an install has no folder of its own to write in."""
    named = os.environ.get(variable)
    if named:
        return Path(named)
    checkout = source_checkout()
    if checkout is not None:
        return checkout / ".cache" / kind
    return user_cache_dir(kind)


def user_cache_dir(kind: str) -> Path:
    """<kind> under stream-pipelines/ in the user's cache folder ($XDG_CACHE_HOME, else ~/.cache)."""
    user_cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(user_cache) / DISTRIBUTION / kind


# --------------------------------------------------------------------------- the starter conf dir


def starter_envs() -> list[str]:
    """The environments the starter conf dir has a <env>.yaml for."""
    return sorted(path.stem for path in STARTER_CONF.glob("*.yaml"))


def starter_conf_files(envs: Iterable[str] = ()) -> list[Path]:
    """The shipped files a conf dir for ``envs`` starts from (every env when none is named): each env's
    YAML, the ones it extends (``base:``), and the sensor metadata."""
    available = starter_envs()
    wanted: set[str] = set()
    for env in envs or available:
        while env and env not in wanted:
            if env not in available:
                raise ShippedFileError(f"no starter config for env {env!r} (available: {available})")
            wanted.add(env)
            env = (yaml.safe_load((STARTER_CONF / f"{env}.yaml").read_text()) or {}).get(BASE_KEY)
    return [*(STARTER_CONF / f"{env}.yaml" for env in sorted(wanted)), STARTER_CONF / SENSOR_METADATA]


def write_starter_conf(folder: Path, envs: Iterable[str] = (), *, force: bool = False) -> list[Path]:
    """Copy the starter files for ``envs`` into ``folder`` (made if missing); the paths written. Nothing is
    written when a file is there already, unless ``force``: the error names each one."""
    sources = starter_conf_files(envs)
    targets = [folder / source.name for source in sources]
    existing = [str(target) for target in targets if target.exists()]
    if existing and not force:
        raise ShippedFileError(
            f"not overwriting what exists already: {', '.join(existing)} (--force replaces each with "
            "the starter's copy)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for source, target in zip(sources, targets, strict=True):
        target.write_bytes(source.read_bytes())
    return targets


@dataclass(frozen=True)
class RelativeLocation:
    """A location a written config file gives relative to the conf dir's parent, and where it lands."""

    file: str
    key: str
    value: str
    resolved: Path
    required: bool

    @property
    def missing(self) -> bool:
        return self.required and not self.resolved.exists()


def relative_locations(conf_dir: Path, files: Iterable[Path]) -> list[RelativeLocation]:
    """The relative locations (``RELATIVE_LOCATIONS``) each YAML file in ``files`` sets itself, resolved
    as the config resolves them: under ``conf_dir``'s parent."""
    found = []
    for path in files:
        if path.suffix != ".yaml":
            continue
        document = yaml.safe_load(path.read_text()) or {}
        for section, key in RELATIVE_LOCATIONS:
            value = (document.get(section) or {}).get(key)
            if isinstance(value, str) and value and "://" not in value and not value.startswith("/"):
                found.append(
                    RelativeLocation(
                        path.name,
                        f"{section}.{key}",
                        value,
                        conf_dir.parent.resolve() / value,
                        (section, key) in REQUIRED_LOCATIONS,
                    )
                )
    return found


# --------------------------------------------------------------------------- the Airflow DAG files


def dag_modules() -> list[str]:
    """The modules of ``DAG_PACKAGE``, one per DAG file."""
    return sorted(path.stem for path in DAG_MODULES.glob("*.py") if path.stem != "__init__")


def dag_file_text(module: str) -> str:
    """The DAG file for one module: its DAGs, imported from the installed package (``import *``, so a
    DAG the module gains in a new version comes with it)."""
    return (
        f"{DAG_FILE_MARKER}; do not edit (that command rewrites it).\n"
        "\n"
        f"Its DAGs are defined in {DAG_PACKAGE}.{module} (the stream-pipelines package).\n"
        '"""\n'
        "\n"
        f"from {DAG_PACKAGE}.{module} import *  # noqa: F403\n"
    )


@dataclass(frozen=True)
class DagFilesWritten:
    written: list[Path]
    unchanged: list[Path]
    removed: list[Path]


def write_dag_files(folder: Path, *, force: bool = False) -> DagFilesWritten:
    """Write one DAG file per module of ``DAG_PACKAGE`` into ``folder`` (made if missing). A file this
    function wrote before is rewritten, and removed when its module is gone; any other file of the same
    name is left alone, and nothing written, unless ``force``: the error names each one."""
    wanted = {folder / f"{module}.py": dag_file_text(module) for module in dag_modules()}
    foreign = [
        str(path) for path in wanted if path.exists() and not path.read_text().startswith(DAG_FILE_MARKER)
    ]
    if foreign and not force:
        raise ShippedFileError(
            f"not overwriting what `pipelinectl airflow-dags` did not write: {', '.join(foreign)} "
            "(--force replaces each)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    written, unchanged = [], []
    for path, text in wanted.items():
        if path.exists() and path.read_text() == text:
            unchanged.append(path)
        else:
            path.write_text(text)
            written.append(path)
    removed = [
        path
        for path in sorted(folder.glob("*.py"))
        if path not in wanted and path.read_text().startswith(DAG_FILE_MARKER)
    ]
    for path in removed:
        path.unlink()
    return DagFilesWritten(written, unchanged, removed)
