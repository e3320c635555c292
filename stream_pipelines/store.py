"""The one filesystem layer: every file the project reads or writes outside Spark's own readers and writers.

Checkpoint inspection, preflight and reset, the lease, the control records, the batch log and the
nightly report all reach their files through :func:`location`, so one code path serves a local disk
and an object store. A location is a URL (``s3a://bucket/key``, ``file:///path``) or a local path;
:func:`location` returns a pathlib-style object for it (``universal_pathlib`` over ``fsspec``), and a
local path stays a plain :class:`pathlib.Path`.

Why fsspec (with s3fs): it is what pandas, Dask and pyarrow datasets use for remote paths, its s3
implementation sends conditional PUTs (``If-None-Match: *``), which the lease needs, and
``universal_pathlib`` gives it the pathlib API the checkpoint reader already spoke. pyarrow's
``S3FileSystem`` has no conditional write.

``s3a://`` (Hadoop's name for S3) maps to s3fs. Its endpoint, path-style addressing and region come from
the same ``spark.hadoop.fs.s3a.*`` keys in ``spark.extra_conf`` that Spark's S3A connector reads, so one
set of settings serves both. Credentials come only from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), which both the AWS SDK in the JVM and botocore read.

What each store guarantees for the project's own small files:

============  ==========================================  ==========================================
store         :func:`write_atomically` (records, batch    :func:`create_exclusive` (the lease)
              log)
============  ==========================================  ==========================================
local / NFS   temporary file, then ``rename`` over the    ``link()`` of a complete temporary file:
              target: readers see the old or the new      fails if the name exists
              file, never a part
S3            one PUT: an object appears whole, and S3    PUT with ``If-None-Match: *``: the server
              reads after a write see it (strongly        refuses it if the key exists (AWS since
              consistent since December 2020)             2024, MinIO, moto); takeover and renewal
                                                          are PUTs with ``If-Match: <etag>``
============  ==========================================  ==========================================
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stream_pipelines.config import PipelineConfig

# Hadoop's S3A keys (as set in spark.extra_conf) that say how to reach the store.
S3A_PREFIX = "spark.hadoop.fs.s3a."
# The ``paths`` entries the project's own file layer reads and writes, and the stores it can serve.
STORED_PATHS = (
    "archive",
    "quarantine",
    "checkpoints",
    "outputs",
    "batch_log",
    "control",
    "reports",
    "compliance",
    "gx",
)
SERVED_SCHEMES = ("file", "s3a", "s3")
OBJECT_STORE_SCHEMES = ("s3a", "s3")


class StoreError(RuntimeError):
    """A location the file layer cannot serve; the message names it and what to use instead."""


def scheme(url: str) -> str:
    """``s3a`` for ``s3a://b/k``, ``file`` for a local path or a ``file://`` URL."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def is_local(url: str) -> bool:
    return scheme(url) == "file"


def s3_options(extra_conf: dict[str, str]) -> dict[str, Any]:
    """s3fs options from Spark's ``spark.hadoop.fs.s3a.*`` settings, so both talk to the same endpoint."""
    s3a = {
        key.removeprefix(S3A_PREFIX): value for key, value in extra_conf.items() if key.startswith(S3A_PREFIX)
    }
    options: dict[str, Any] = {}
    endpoint = s3a.get("endpoint")
    if endpoint:
        if "://" not in endpoint:
            secure = s3a.get("connection.ssl.enabled", "true").lower() != "false"
            endpoint = f"{'https' if secure else 'http'}://{endpoint}"
        options["endpoint_url"] = endpoint
    client_kwargs = {}
    region = s3a.get("endpoint.region") or s3a.get("region")
    if region:
        client_kwargs["region_name"] = region
    if client_kwargs:
        options["client_kwargs"] = client_kwargs
    if s3a.get("path.style.access", "false").lower() == "true":
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    # The lease and control records are read to decide; a cached listing would answer from the past.
    options["use_listings_cache"] = False
    for secret in ("access.key", "secret.key", "session.token"):
        if secret in s3a:
            raise StoreError(
                f"spark.extra_conf sets {S3A_PREFIX}{secret}: credentials come only from the environment "
                "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), which Spark's S3A "
                "connector and this project both read; remove the key from the config"
            )
    return options


def uses_object_store(config: PipelineConfig) -> bool:
    """Whether anything the config reads or writes is on S3 (then Spark needs its S3A connector)."""
    locations = [config.data_path(name) for name in STORED_PATHS]
    locations += [
        config.project_path(config.source.files_dir),
        config.project_path(config.sensors.metadata_path),
    ]
    return any(scheme(url) in OBJECT_STORE_SCHEMES for url in locations)


def location(config: PipelineConfig | None, url: str | Path) -> Path:
    """A pathlib-style object for ``url``: a :class:`Path` when local, a UPath on an object store."""
    text = str(url)
    kind = scheme(text)
    if kind == "file":
        return Path(text.removeprefix("file://"))
    if kind in OBJECT_STORE_SCHEMES:
        from upath import UPath  # deferred: local-only runs never import fsspec's s3 stack

        return UPath(text, **s3_options(config.spark.extra_conf if config is not None else {}))
    raise StoreError(
        f"{text}: the project's file layer serves local paths, file:// and s3a:// locations, not "
        f"{kind}://. Spark itself can use it, but the checkpoint preflight, the lease, the control "
        "records and the batch log cannot; put paths.checkpoints, paths.control and paths.batch_log on "
        "s3a:// or on a folder every host mounts"
    )


def on_object_store(target: Path) -> bool:
    return getattr(target, "protocol", "file") in OBJECT_STORE_SCHEMES


def write_atomically(target: Path, data: bytes | str) -> None:
    """Write ``target`` so that a reader sees the old content or the new, never a part (see the table)."""
    payload = data.encode() if isinstance(data, str) else data
    if on_object_store(target):
        target.fs.pipe_file(target.path, payload)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        temporary.write_bytes(payload)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def create_exclusive(target: Path, data: bytes | str) -> str | None:
    """Create ``target`` whole if no file has its name and return its version; None (nothing written)
    if one has."""
    payload = data.encode() if isinstance(data, str) else data
    if on_object_store(target):
        try:
            written = target.fs.pipe_file(target.path, payload, mode="create")
        except FileExistsError:
            return None
        return _etag(written)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        temporary.write_bytes(payload)
        # link() fails if the name exists: an atomic create-if-absent of a complete file.
        os.link(temporary, target)
    except FileExistsError:
        return None
    finally:
        temporary.unlink(missing_ok=True)
    return _local_version(target)


def read_versioned(target: Path) -> tuple[bytes, str] | None:
    """The content and a version that :func:`replace_if_unchanged` accepts; None if there is no file.

    The version is taken first: if the file changes before the content is read, a replace on that
    version is refused, so a decision made on the content is never written over a newer file."""
    try:
        version = _etag(target.fs.info(target.path)) if on_object_store(target) else _local_version(target)
        return read_bytes(target), version
    except FileNotFoundError:
        return None


def read_bytes(target: Path) -> bytes:
    """The whole file. On S3 one GET: a record replaced while it is read comes back whole, old or new
    (s3fs's file object reads by ranges pinned to the ETag it saw first, and fails with FileExpired
    when a writer replaces the object in between, which the lease's renewals do every few seconds)."""
    if on_object_store(target):
        return target.fs.cat_file(target.path)
    return target.read_bytes()


def replace_if_unchanged(
    target: Path, version: str, data: bytes | str, *, aside: Path | None = None
) -> str | None:
    """Replace ``target`` only if it is still at ``version``; its new version, or None if it changed.

    On S3 a PUT with ``If-Match: <etag>``, an atomic compare-and-swap. On a filesystem there is none:
    with ``aside``, the file is first renamed there (of two callers only one can) and the new one created
    if absent; without, the version is compared and the file rewritten (a short race, see the README).
    ``aside`` also keeps the replaced content to look at later."""
    payload = data.encode() if isinstance(data, str) else data
    if on_object_store(target):
        if aside is not None:
            with contextlib.suppress(FileNotFoundError):
                target.fs.copy(target.path, aside.path)
        try:
            # ETags travel quoted in HTTP; S3 compares the quoted form.
            written = target.fs.pipe_file(target.path, payload, IfMatch=f'"{version}"')
        except (FileNotFoundError, FileExistsError):
            return None
        except OSError as error:
            if _precondition_failed(error):
                return None
            raise
        return _etag(written)
    if aside is not None:
        try:
            os.rename(target, aside)
        except FileNotFoundError:
            return None
        return create_exclusive(target, payload)
    try:
        if _local_version(target) != version:
            return None
    except FileNotFoundError:
        return None
    write_atomically(target, payload)
    return _local_version(target)


def _local_version(target: Path) -> str:
    status = os.stat(target)
    return f"{status.st_ino}-{status.st_mtime_ns}-{status.st_size}"


def _etag(response: Any) -> str:
    if isinstance(response, list):  # fsspec's pipe of one file answers with a list of one
        response = response[0]
    return str(response.get("ETag") or response.get("etag") or "").strip('"')


def _precondition_failed(error: OSError) -> bool:
    cause = getattr(error.__cause__, "response", None) or {}
    return cause.get("Error", {}).get("Code") == "PreconditionFailed" or error.errno == 22


def copy_tree(source: Path, target: Path) -> None:
    """Copy a file, or a folder and everything under it, to ``target`` (created or added to): within a
    store, or from a local disk to an object store."""
    if on_object_store(source):
        filesystem = source.fs
        if filesystem.isfile(source.path):
            filesystem.copy(source.path, target.path)
            return
        # Key by key: fsspec's recursive copy also tries to copy the folder's own (absent) key.
        prefix = source.path.rstrip("/") + "/"
        for key in filesystem.find(prefix):
            filesystem.copy(key, f"{target.path.rstrip('/')}/{key[len(prefix) :]}")
        return
    if on_object_store(target):
        # From a local disk to the store (the Data Docs site, built locally by Great Expectations).
        files = [source] if source.is_file() else [p for p in sorted(source.rglob("*")) if p.is_file()]
        for path in files:
            relative = path.relative_to(source).as_posix()
            key = target.path if relative == "." else f"{target.path.rstrip('/')}/{relative}"
            target.fs.put_file(str(path), key)
        return
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def move(source: Path, target: Path) -> None:
    """Rename a file or folder. On a filesystem one atomic rename; on an object store, which has no
    rename, a copy of every object and then the delete of the source (callers hold the app's lease or
    know it stopped, so nobody reads the folder half moved)."""
    if on_object_store(source):
        copy_tree(source, target)
        remove_tree(source)
        return
    os.replace(source, target)


def remove_tree(target: Path) -> None:
    """Delete a folder and everything under it; nothing happens if it does not exist."""
    if on_object_store(target):
        with contextlib.suppress(FileNotFoundError):
            target.fs.rm(target.path, recursive=True)
        return
    shutil.rmtree(target, ignore_errors=True)


def entries(folder: Path) -> dict[str, tuple[int, float]]:
    """Name -> (size, modification time) of each file in a folder, in one listing (one request on S3);
    empty when the folder does not exist."""
    if on_object_store(folder):
        try:
            listed = folder.fs.ls(folder.path, detail=True)
        except FileNotFoundError:
            return {}
        return {
            item["name"].rstrip("/").rsplit("/", 1)[-1]: (int(item.get("size") or 0), _modified(item))
            for item in listed
            if item.get("type") == "file"
        }
    try:
        with os.scandir(folder) as found:
            return {
                entry.name: (entry.stat().st_size, entry.stat().st_mtime)
                for entry in found
                if entry.is_file()
            }
    except (FileNotFoundError, NotADirectoryError):
        return {}


def files_under(folder: Path) -> list[str]:
    """The relative names of every file under a folder, at any depth, sorted."""
    return sorted(tree_entries(folder))


def tree_entries(folder: Path) -> dict[str, tuple[int, float]]:
    """Relative name -> (size, modification time) of every file under a folder, at any depth, from one
    recursive listing (paged requests on S3, not one per file); empty when the folder does not exist."""
    if on_object_store(folder):
        prefix = folder.path.rstrip("/") + "/"
        try:
            found = folder.fs.find(prefix, detail=True)
        except FileNotFoundError:
            return {}
        return {
            key[len(prefix) :]: (int(item.get("size") or 0), _modified(item))
            for key, item in found.items()
            if item.get("type", "file") == "file"
        }
    listed = {}
    for path in folder.rglob("*"):
        if path.is_file():
            stat = path.stat()
            listed[path.relative_to(folder).as_posix()] = (stat.st_size, stat.st_mtime)
    return listed


def _modified(item: dict[str, Any]) -> float:
    modified = item.get("LastModified") or item.get("mtime")
    return modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0.0)


def update_json(target: Path, change: Callable[[Any | None], Any], attempts: int = 20) -> Any:
    """Read-modify-write of a JSON record that concurrent writers never lose an update of; returns what
    was written. ``change`` gets the current document (None if absent) and returns the new one.

    On a filesystem: under an exclusive ``flock`` of ``<name>.lock`` beside it. On S3, which has no
    locks: a conditional PUT on the version read (create-if-absent for a new record), retried from the
    read when another writer came first."""
    if not on_object_store(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.with_name(f"{target.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            document = change(read_json(target))
            write_json(target, document)
            return document
    for _attempt in range(attempts):
        found = read_versioned(target)
        document = change(json.loads(found[0]) if found else None)
        encoded = json.dumps(document, indent=2, sort_keys=True)
        if found is None:
            written = create_exclusive(target, encoded)
        else:
            written = replace_if_unchanged(target, found[1], encoded)
        if written is not None:
            return document
    raise StoreError(f"{target}: {attempts} concurrent updates in a row came first; giving up")


def write_json(target: Path, document: Any) -> None:
    write_atomically(target, json.dumps(document, indent=2, sort_keys=True))


def read_json(target: Path) -> Any | None:
    """The parsed document, None when the file does not exist; an unreadable one is an error."""
    try:
        return json.loads(read_bytes(target))
    except FileNotFoundError:
        return None
