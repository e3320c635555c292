"""What a driver in a YARN container needs to load the very config its launcher validated, shipped with its
application instead of installed on every node (docs/decisions/0021-driver-bundle.md):

    pipeline/                 the archive, unpacked by YARN in each container of the application
      <conf>/                 a copy of the launcher's conf dir, under its own name (a path that the
                              config gives relative to the conf dir's parent resolves the same there)
      tls/                    the files ``kafka.security`` names: CA, certificate, key (as it is: encrypted
                              stays encrypted)
      environment.json        the variables the config read (its overrides, its ``${VAR}`` references,
                              the variables its secrets come from), and the TLS files' new places

spark-submit uploads the archive (``spark.yarn.dist.archives``) to the application's staging folder on
the cluster's file system, which only its owner can read and which Spark removes when the application
ends; YARN unpacks it into each container's own folder. The driver finds the variables through
``PIPELINE_ENVIRONMENT_FILE``: only that file's name is in the container's launch script, its command
line and Spark's settings, never a value. On the launcher the archive lives in a private temporary
folder until spark-submit has uploaded it: the launcher removes it then, and any later launch removes
one that a launcher which died left behind for longer than ``LEFTOVER_AGE_S``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stream_pipelines.core.config import ENVIRONMENT_FILE_VARIABLE, PipelineConfig, override_variables

# The folder the archive unpacks to in the container's working directory (the ``#`` link name).
CONTAINER_FOLDER = "pipeline"
ENVIRONMENT_FILE = "environment.json"
# The TLS files of kafka.security, by setting, as they are named in the container.
TLS_FILES = {"ca_file": "ca.pem", "certificate_file": "certificate.pem", "key_file": "key.pem"}
# A conf dir is YAML and a few small inputs; more than this is a folder named by mistake.
MAX_CONF_BYTES = 50 * 1024 * 1024
FOLDER_PREFIX = "pipeline-driver-bundle-"
LEFTOVER_AGE_S = 600.0


class DriverBundleError(ValueError):
    """The conf dir cannot be shipped as it is (too large, unreadable)."""


@dataclass(frozen=True)
class DriverBundle:
    """One launch's archive on the launcher; ``spark_conf`` ships it, ``discard`` removes it."""

    archive: Path

    def spark_conf(self, theirs: dict[str, str]) -> dict[str, str]:
        """The settings that ship the archive and name its environment file, beside ``theirs``."""
        archives = [value for value in [theirs.get("spark.yarn.dist.archives")] if value]
        return {
            "spark.yarn.dist.archives": ",".join([*archives, f"{self.archive}#{CONTAINER_FOLDER}"]),
            f"spark.yarn.appMasterEnv.{ENVIRONMENT_FILE_VARIABLE}": f"{CONTAINER_FOLDER}/{ENVIRONMENT_FILE}",
        }

    def discard(self) -> None:
        shutil.rmtree(self.archive.parent, ignore_errors=True)


def container_conf_dir(config: PipelineConfig) -> str:
    """The conf dir as a driver in a container names it (relative to its working directory)."""
    return f"{CONTAINER_FOLDER}/{config.conf_dir.name}"


def write(config: PipelineConfig, overrides: list[str] | tuple[str, ...] = ()) -> DriverBundle:
    """The archive of ``config`` (loaded with ``overrides`` given as ``--set``), in a private folder."""
    remove_leftovers()
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))  # 0700: this user's alone
    archive = folder / "pipeline.tar.gz"
    descriptor = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file, tarfile.open(fileobj=file, mode="w:gz") as tar:
        _add_conf_dir(tar, config.conf_dir, config.conf_dir.name)
        moved = _add_tls_files(tar, config)
        variables = {
            **config.variables_read(),
            **override_variables(overrides),
            **override_variables(f"kafka.security.{key}={place}" for key, place in moved.items()),
        }
        _add_bytes(tar, ENVIRONMENT_FILE, json.dumps(variables, sort_keys=True).encode())
    bundle = DriverBundle(archive)
    # A launcher that exits without discarding (a batch job's) takes its bundle along.
    atexit.register(bundle.discard)
    return bundle


def remove_leftovers(now: float | None = None) -> int:
    """Remove the bundles that launchers which died left behind; returns how many."""
    now = time.time() if now is None else now
    removed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        with contextlib.suppress(OSError):  # another launcher's sweep got there first
            status = folder.stat()
            if status.st_uid == os.getuid() and now - status.st_mtime > LEFTOVER_AGE_S:
                shutil.rmtree(folder)
                removed += 1
    return removed


def _add_conf_dir(tar: tarfile.TarFile, conf_dir: Path, name: str) -> None:
    files = sorted(path for path in conf_dir.rglob("*") if path.is_file() and not _hidden(path, conf_dir))
    size = sum(path.stat().st_size for path in files)
    if size > MAX_CONF_BYTES:
        raise DriverBundleError(
            f"the conf dir {conf_dir} holds {size / 1e6:.0f} MB; a driver in YARN gets a copy of it, "
            f"so it must stay under {MAX_CONF_BYTES / 1e6:.0f} MB: keep data out of it"
        )
    for path in files:
        _add_bytes(tar, f"{name}/{path.relative_to(conf_dir)}", path.read_bytes())


def _add_tls_files(tar: tarfile.TarFile, config: PipelineConfig) -> dict[str, str]:
    """The TLS files, each under its container name; returns setting -> its place in the container."""
    security = config.kafka.security
    moved = {}
    for key, name in TLS_FILES.items():
        location = getattr(security, key)
        if location is not None:
            _add_bytes(tar, f"tls/{name}", Path(location).read_bytes())
            moved[key] = f"{CONTAINER_FOLDER}/tls/{name}"
    return moved


def _add_bytes(tar: tarfile.TarFile, name: str, content: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(content), 0o600, int(time.time())
    tar.addfile(info, io.BytesIO(content))


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)
