"""The one filesystem layer: every file the project reads or writes outside Spark's own readers and writers.

Checkpoint inspection, preflight and reset, the lease, the control records, the batch log and the
nightly report all reach their files through :func:`location`, so one code path serves a local disk
and an object store. A location is a URL (``s3a://bucket/key``, ``file:///path``) or a local path;
:func:`location` returns a pathlib-style object for it (``universal_pathlib`` over ``fsspec``), and a
local path stays a plain :class:`pathlib.Path`.

``hdfs://namenode:port/path`` maps to ``hdfs-native`` (a native HDFS RPC client, which registers fsspec's
``hdfs`` protocol), reaching the NameNode the URL names, or, for ``hdfs:///path``, the one
``spark.hadoop.fs.defaultFS`` in ``spark.extra_conf`` names; it acts as ``HADOOP_USER_NAME`` (else the OS
user), as Spark's Hadoop client does. See docs/decisions/0009-hdfs-client.md for why not WebHDFS or pyarrow.

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
HDFS          temporary file, closed, then renamed over   temporary file, closed, then renamed to the
              the target (one NameNode operation): a      name without overwrite: the NameNode refuses
              file is visible to others once closed, and  it if the name exists (atomic), and a killed
              readers see the old or the new file         writer leaves only a temporary file. No
                                                          conditional write: the version is the file's
                                                          mtime and length, a takeover renames the old
                                                          lease aside (of two callers only one can) and
                                                          checks its version; :func:`update_json` locks
                                                          with an exclusively created ``<name>.lock``
============  ==========================================  ==========================================
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import getpass
import json
import os
import shutil
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from stream_pipelines.core.procfs import process_exists

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
SERVED_SCHEMES = ("file", "s3a", "s3", "hdfs")
OBJECT_STORE_SCHEMES = ("s3a", "s3")
# Spark's key for the filesystem of scheme-less Hadoop paths; names the NameNode of an ``hdfs:///path``.
DEFAULT_FS = "spark.hadoop.fs.defaultFS"
# An update lock on HDFS older than this is a dead writer's, and broken (a live one holds it for ms).
HDFS_LOCK_STALE_S = 30.0


class StoreError(RuntimeError):
    """A location the file layer cannot serve; the message names it and what to use instead."""


def hadoop_user() -> str:
    """The user Spark's Hadoop client acts as (``HADOOP_USER_NAME``, else the OS user); the file layer too."""
    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def scheme(url: str) -> str:
    """``s3a`` for ``s3a://b/k``, ``file`` for a local path or a ``file://`` URL."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def is_local(url: str) -> bool:
    return scheme(url) == "file"


def s3_options(extra_conf: Mapping[str, str]) -> dict[str, Any]:
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


def uses_object_store(urls: Iterable[str]) -> bool:
    """Whether any of these locations is on S3 (then Spark needs its S3A connector)."""
    return any(scheme(url) in OBJECT_STORE_SCHEMES for url in urls)


def location(extra_conf: Mapping[str, str] | None, url: str | Path) -> Path:
    """A pathlib-style object for ``url``: a :class:`Path` when local, a UPath on an object store.

    ``extra_conf`` is Spark's settings (``spark.extra_conf``), where the S3A endpoint and HDFS's
    ``fs.defaultFS`` are read from; None for none."""
    text = str(url)
    kind = scheme(text)
    if kind == "file":
        return Path(text.removeprefix("file://"))
    if kind in OBJECT_STORE_SCHEMES:
        from upath import UPath  # deferred: local-only runs never import fsspec's s3 stack

        return UPath(text, **s3_options(extra_conf or {}))
    if kind == "hdfs":
        return _hdfs_location(extra_conf or {}, text)
    raise StoreError(
        f"{text}: the project's file layer serves local paths, file://, s3a:// and hdfs:// locations, not "
        f"{kind}://. Spark itself can use it, but the checkpoint preflight, the lease, the control "
        "records and the batch log cannot; put paths.checkpoints, paths.control and paths.batch_log on "
        "s3a://, hdfs:// or on a folder every host mounts"
    )


def _hdfs_location(extra_conf: Mapping[str, str], text: str) -> Path:
    from upath import UPath  # deferred: only hdfs:// locations load the HDFS client

    _register_hdfs_path()
    parsed = urllib.parse.urlsplit(text)
    if not parsed.hostname:
        default = extra_conf.get(DEFAULT_FS, "")
        if scheme(default) != "hdfs" or not urllib.parse.urlsplit(default).hostname:
            raise StoreError(
                f"{text} names no NameNode: write hdfs://<namenode>:<port>/path, or set {DEFAULT_FS} "
                "in spark.extra_conf to hdfs://<namenode>:<port>"
            )
        text = f"{default.rstrip('/')}/{parsed.path.lstrip('/')}"
    return UPath(text)


# NameNode refusals that mean "not now": nothing was done, and the same call succeeds once the state
# passes (safe mode after a restart, until the DataNodes have reported their blocks).
HDFS_PASSING_REFUSALS = ("SafeModeException", "RetriableException")
HDFS_PASSING_WAIT_S = 120.0


# A read right after a NameNode restart, before the DataNodes have reported their blocks: the NameNode
# knows no location for the block yet (an empty list), and a read a moment later succeeds.
HDFS_NO_BLOCK_LOCATIONS = ("All DataNodes failed: []",)


def _hdfs_patiently(call: Callable[[], Any], passing: tuple[str, ...]) -> Any:
    """``call()``, repeated while HDFS fails it with one of the ``passing`` errors, for up to
    ``HDFS_PASSING_WAIT_S``."""
    deadline, pause = time.monotonic() + HDFS_PASSING_WAIT_S, 0.25
    while True:
        try:
            return call()
        except RuntimeError as error:
            if not any(text in str(error) for text in passing) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


class _PatientHdfsClient:
    """hdfs-native's client, each call repeated while the NameNode refuses it for a passing state (see
    ``HDFS_PASSING_REFUSALS``). Without it a driver whose NameNode just restarted fails to write its
    exit record or to release its lease."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def patiently(*args: Any, **kwargs: Any) -> Any:
            return _hdfs_patiently(lambda: attribute(*args, **kwargs), HDFS_PASSING_REFUSALS)

        return patiently


# The HDFS clients alive at the last fork, kept so that a forked child never drops one (see below).
_HDFS_CLIENTS_AT_FORK: list[Any] = []


def _keep_hdfs_clients_through_fork() -> None:
    """fsspec clears its instance cache in every forked child. Were the cache the last holder of an HDFS
    client, the child would drop it, and the drop waits on the client's runtime threads, which a child
    does not have: a child that runs Python before its exec (pyspark starts its JVM with a preexec_fn)
    would hang for ever. Holding the clients here keeps them alive in the child until its exec."""
    import fsspec

    # Added to, never emptied: a forked child that forks again must not drop what it inherited either.
    # One client per NameNode and process, so this stays as small as the cache.
    kept = {id(client) for client in _HDFS_CLIENTS_AT_FORK}
    _HDFS_CLIENTS_AT_FORK.extend(
        client for client in fsspec.get_filesystem_class("hdfs")._cache.values() if id(client) not in kept
    )


@functools.cache
def _register_hdfs_path() -> None:
    """universal_pathlib's HDFS path prints as ``hdfs:///path``, without the NameNode; this one keeps it,
    so a location turned into text and back (a URL in a record, a log line) still names its cluster.
    Also makes forking safe once an HDFS client exists (:func:`_keep_hdfs_clients_through_fork`)."""
    import fsspec
    from hdfs_native.fsspec import HdfsFileSystem
    from upath.implementations.hdfs import HDFSPath
    from upath.registry import register_implementation

    class PatientHdfsFileSystem(HdfsFileSystem):
        """hdfs-native's filesystem with a client that waits out a NameNode's safe mode."""

        def __init__(self, *args: Any, **options: Any) -> None:
            super().__init__(*args, **options)
            self.client = _PatientHdfsClient(self.client)

    fsspec.register_implementation("hdfs", PatientHdfsFileSystem, clobber=True)
    os.register_at_fork(before=_keep_hdfs_clients_through_fork)

    class NamedHdfsPath(HDFSPath):
        __slots__ = ()

        def __str__(self) -> str:
            options = self.storage_options
            port = f":{options['port']}" if options.get("port") else ""
            return f"hdfs://{options.get('host') or ''}{port}{self.path}"

    register_implementation("hdfs", NamedHdfsPath, clobber=True)


def on_object_store(target: Path) -> bool:
    return getattr(target, "protocol", "file") in OBJECT_STORE_SCHEMES


def on_hdfs(target: Path) -> bool:
    return getattr(target, "protocol", "file") == "hdfs"


def _remote(target: Path) -> bool:
    """Reached through fsspec (an object store or HDFS), not the local filesystem."""
    return on_object_store(target) or on_hdfs(target)


def _temporary(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def _hdfs_write_new(target: Path, payload: bytes) -> None:
    """Create ``target`` (never over an existing file) with ``payload``, closed before returning."""
    from hdfs_native import WriteOptions

    with target.fs.client.create(target.path, WriteOptions(overwrite=False, create_parent=True)) as out:
        out.write(payload)


def _hdfs_rename(source: Path, target: Path, *, overwrite: bool) -> None:
    """One NameNode rename; FileExistsError if ``target`` exists and not ``overwrite``."""
    source.fs.client.rename(source.path, target.path, overwrite)


def _hdfs_version(item: dict[str, Any]) -> str:
    # No file id in hdfs-native's status: modification time (ms) and length.
    return f"{item.get('modification_time')}-{item.get('size')}"


def write_atomically(target: Path, data: bytes | str) -> None:
    """Write ``target`` so that a reader sees the old content or the new, never a part (see the table)."""
    payload = data.encode() if isinstance(data, str) else data
    if on_object_store(target):
        target.fs.pipe_file(target.path, payload)
        return
    if on_hdfs(target):
        temporary = _temporary(target)
        try:
            _hdfs_write_new(temporary, payload)
            _hdfs_rename(temporary, target, overwrite=True)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.fs.client.delete(temporary.path, False)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary(target)
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
    if on_hdfs(target):
        # Never created at the final name: a writer killed mid-write leaves a temporary file, not a
        # partial lease. The rename without overwrite is the create-if-absent.
        temporary = _temporary(target)
        try:
            _hdfs_write_new(temporary, payload)
            _hdfs_rename(temporary, target, overwrite=False)
        except FileExistsError:
            return None
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.fs.client.delete(temporary.path, False)
        return _hdfs_version(target.fs.info(target.path))
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary(target)
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
        if on_object_store(target):
            version = _etag(target.fs.info(target.path))
        elif on_hdfs(target):
            version = _hdfs_version(target.fs.info(target.path))
        else:
            version = _local_version(target)
        return read_bytes(target), version
    except FileNotFoundError:
        return None


def read_bytes(target: Path) -> bytes:
    """The whole file. On S3 one GET: a record replaced while it is read comes back whole, old or new
    (s3fs's file object reads by ranges pinned to the ETag it saw first, and fails with FileExpired
    when a writer replaces the object in between, which the lease's renewals do every few seconds)."""
    if on_hdfs(target):
        return _hdfs_patiently(lambda: target.fs.cat_file(target.path), HDFS_NO_BLOCK_LOCATIONS)
    if _remote(target):
        return target.fs.cat_file(target.path)
    return target.read_bytes()


def replace_if_unchanged(
    target: Path, version: str, data: bytes | str, *, aside: Path | None = None
) -> str | None:
    """Replace ``target`` only if it is still at ``version``; its new version, or None if it changed.

    On S3 a PUT with ``If-Match: <etag>``, an atomic compare-and-swap. On a filesystem there is none:
    with ``aside``, the file is first renamed there (of two callers only one can) and the new one created
    if absent; without, the version is compared and the file rewritten (a short race:
    docs/clusters.md#what-each-store-guarantees).
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
    if on_hdfs(target):
        return _hdfs_replace_if_unchanged(target, version, payload, aside)
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


def _hdfs_replace_if_unchanged(target: Path, version: str, payload: bytes, aside: Path | None) -> str | None:
    """HDFS has no conditional write. With ``aside``: the file is renamed there (of two callers only one
    can), its version checked (a file replaced since is put back and the caller refused), and the new
    one created if absent: a compare-and-swap. Without: compared, then replaced whole (the short race
    the local filesystem has too)."""
    if aside is None:
        try:
            if _hdfs_version(target.fs.info(target.path)) != version:
                return None
        except FileNotFoundError:
            return None
        write_atomically(target, payload)
        return _hdfs_version(target.fs.info(target.path))
    if not _hdfs_take_aside(target, version, aside):
        return None
    return create_exclusive(target, payload)


def _hdfs_take_aside(target: Path, version: str, aside: Path) -> bool:
    """Rename ``target`` to ``aside`` if it is still at ``version``; False (nothing moved) otherwise."""
    try:
        _hdfs_rename(target, aside, overwrite=False)
    except FileNotFoundError:
        return False
    if _hdfs_version(aside.fs.info(aside.path)) == version:
        return True
    # Replaced between the caller's read and the rename: put the newer file back, unless a create won
    # the name in between (then that one stands, and this caller is refused either way).
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        _hdfs_rename(aside, target, overwrite=False)
    return False


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


# Copies to and within a remote store run this many files at once: each file's round trips are latency
# (closing a file on HDFS alone takes about 0.5 s), not work, so a folder of small files copies in
# about the time of its slowest few instead of the sum of all.
REMOTE_COPY_CONCURRENCY = 8


def _each_at_once(copy_one: Callable[[Any], None], items: list) -> None:
    """``copy_one`` over ``items``, several at a time; the first failure is raised once all have ended."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(REMOTE_COPY_CONCURRENCY, len(items)))) as pool:
        list(pool.map(copy_one, items))


def copy_tree(source: Path, target: Path) -> None:
    """Copy a file, or a folder and everything under it, to ``target`` (created or added to): within a
    store, or from a local disk to an object store or HDFS."""
    if on_hdfs(source):
        if source.fs.isfile(source.path):
            _hdfs_copy_file(source, target)
            return
        prefix = source.path.rstrip("/") + "/"
        relatives = [key[len(prefix) :] for key in source.fs.find(prefix)]
        _each_at_once(lambda relative: _hdfs_copy_file(source / relative, target / relative), relatives)
        return
    if on_object_store(source):
        filesystem = source.fs
        if filesystem.isfile(source.path):
            filesystem.copy(source.path, target.path)
            return
        # Key by key: fsspec's recursive copy also tries to copy the folder's own (absent) key.
        prefix = source.path.rstrip("/") + "/"
        _each_at_once(
            lambda key: filesystem.copy(key, f"{target.path.rstrip('/')}/{key[len(prefix) :]}"),
            filesystem.find(prefix),
        )
        return
    if _remote(target):
        # From a local disk to the store (the Data Docs site, built locally by Great Expectations).
        files = [source] if source.is_file() else [p for p in sorted(source.rglob("*")) if p.is_file()]

        def upload(path: Path) -> None:
            relative = path.relative_to(source).as_posix()
            key = target.path if relative == "." else f"{target.path.rstrip('/')}/{relative}"
            target.fs.put_file(str(path), key)

        _each_at_once(upload, files)
        return
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def _hdfs_copy_file(source: Path, target: Path) -> None:
    """One file within HDFS. hdfs-native's own copy names its temporary file relative to the user's home
    folder."""
    with source.fs.client.read(source.path) as reader:
        _hdfs_write_whole(reader, target)


def _hdfs_write_whole(reader: Any, target: Path) -> None:
    """``reader``'s bytes streamed to a temporary file beside ``target`` and renamed over it: never half
    there under its name."""
    from hdfs_native import WriteOptions

    temporary = _temporary(target)
    try:
        options = WriteOptions(overwrite=False, create_parent=True)
        with target.fs.client.create(temporary.path, options) as out:
            shutil.copyfileobj(reader, out, 8 * 2**20)
        _hdfs_rename(temporary, target, overwrite=True)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.fs.client.delete(temporary.path, False)


def upload_file(source: Path, target: Path) -> None:
    """A local file to ``target`` on any store, whole or not at all: on HDFS and a local disk through a
    temporary file renamed over it, on an object store by one (multipart) upload that only its end makes
    visible. A reader never finds half an archive under its final name."""
    if on_object_store(target):
        target.fs.put_file(str(source), target.path)
    elif on_hdfs(target):
        with source.open("rb") as reader:
            _hdfs_write_whole(reader, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = _temporary(target)
        try:
            shutil.copyfile(source, temporary)
            os.replace(temporary, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def move(source: Path, target: Path) -> None:
    """Rename a file or folder. On a filesystem one atomic rename; on an object store, which has no
    rename, a copy of every object and then the delete of the source (callers hold the app's lease or
    know it stopped, so nobody reads the folder half moved). On HDFS one NameNode rename, like a
    filesystem's (a file target is replaced, a folder that is not empty is refused)."""
    if on_hdfs(source):
        source.fs.client.mkdirs(target.parent.path, 0o755, True)
        _hdfs_rename(source, target, overwrite=True)
        return
    if on_object_store(source):
        copy_tree(source, target)
        remove_tree(source)
        return
    os.replace(source, target)


def remove_tree(target: Path) -> None:
    """Delete a folder and everything under it; nothing happens if it does not exist."""
    if on_hdfs(target):
        target.fs.client.delete(target.path, True)  # False, not an error, when absent
        return
    if on_object_store(target):
        with contextlib.suppress(FileNotFoundError):
            target.fs.rm(target.path, recursive=True)
        return
    shutil.rmtree(target, ignore_errors=True)


def remove_file(target: Path) -> None:
    """Delete one file (and the ``.crc`` checksum Hadoop's local filesystem writes beside it, where there
    is one); nothing happens if it does not exist."""
    if on_object_store(target):
        with contextlib.suppress(FileNotFoundError):
            target.fs.rm_file(target.path)
        return
    target.unlink(missing_ok=True)
    target.with_name(f".{target.name}.crc").unlink(missing_ok=True)


def remove_empty_folder(target: Path) -> None:
    """Delete a folder only if it is empty (a file written into it meanwhile keeps it); nothing happens
    if it is gone or not empty. Object stores have no folders."""
    if on_object_store(target):
        return
    if on_hdfs(target):
        with contextlib.suppress(OSError):
            target.fs.client.delete(target.path, False)  # non-recursive: refused while it holds a file
        return
    with contextlib.suppress(OSError):
        target.rmdir()


def entries(folder: Path) -> dict[str, tuple[int, float]]:
    """Name -> (size, modification time) of each file in a folder, in one listing (one request on S3);
    empty when the folder does not exist."""
    if _remote(folder):
        try:
            listed = folder.fs.ls(folder.path, detail=True)
        except FileNotFoundError:
            return {}
        return {
            item["name"].rstrip("/").rsplit("/", 1)[-1]: (int(item.get("size") or 0), _modified(item))
            for item in listed
            if item.get("type") == "file"
        }
    listed = {}
    try:
        with os.scandir(folder) as found:
            for entry in found:
                # A file removed between the listing and its stat (Spark trims its logs) is not listed.
                with contextlib.suppress(FileNotFoundError):
                    if entry.is_file():
                        stat = entry.stat()
                        listed[entry.name] = (stat.st_size, stat.st_mtime)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return listed


class StoreNoAnswer(OSError):
    """The store did not answer within the time it was given; the message names the folder."""


# The probe of each folder still running or last run: a store that hangs holds one thread per folder,
# however often it is probed.
_PROBES: dict[str, Future] = {}
_PROBES_LOCK = threading.Lock()


def start_probe(folder: Path) -> Future:
    """A listing of ``folder`` in a daemon thread, fresh (past s3fs's listing cache), its outcome the
    Future's: None when the store answered (a missing folder is an answer too), else the store's
    error. While an earlier probe of the folder still runs, that one is returned instead of a new one."""
    key = str(folder)
    with _PROBES_LOCK:
        running = _PROBES.get(key)
        if running is not None and not running.done():
            return running
        future: Future = Future()
        _PROBES[key] = future
    threading.Thread(
        target=_probe_into, args=(folder, future), name=f"store-probe {key}", daemon=True
    ).start()
    return future


def _probe_into(folder: Path, future: Future) -> None:
    try:
        if _remote(folder):
            with contextlib.suppress(FileNotFoundError):
                folder.fs.ls(
                    folder.path, detail=False, **({"refresh": True} if on_object_store(folder) else {})
                )
        else:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(folder):
                pass
    except BaseException as error:  # the store's error, whatever its client raises, is the outcome
        if _no_connection(error):
            error = StoreNoAnswer(f"{folder}: no connection ({type(error).__name__}: {error})")
        future.set_exception(error)
    else:
        future.set_result(None)


def _no_connection(error: BaseException | None) -> bool:
    """Whether ``error``, or one it was raised from, says that no connection was made: nothing answered
    (the builtin ConnectionError, botocore's and aiohttp's connection errors), not a refusal."""
    while error is not None:
        if isinstance(error, ConnectionError) or "Connect" in type(error).__name__:
            return True
        error = error.__cause__ or error.__context__
    return False


def probe_outcome(folder: Path, probe: Future, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for ``probe`` of ``folder``: return when the store answered; raise
    :class:`StoreNoAnswer` when it has not yet or no connection was made, else the store's own error."""
    try:
        probe.result(timeout=timeout_s)
    except FutureTimeout:
        raise StoreNoAnswer(f"{folder}: no answer within {timeout_s:g} s") from None


def files_under(folder: Path) -> list[str]:
    """The relative names of every file under a folder, at any depth, sorted."""
    return sorted(tree_entries(folder))


def tree_entries(folder: Path) -> dict[str, tuple[int, float]]:
    """Relative name -> (size, modification time) of every file under a folder, at any depth, from one
    recursive listing (paged requests on S3, not one per file); empty when the folder does not exist."""
    if _remote(folder):
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
    if "modification_time" in item:  # hdfs-native: milliseconds since the epoch
        return float(item["modification_time"] or 0) / 1000.0
    modified = item.get("LastModified") or item.get("mtime")
    return modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0.0)


def update_json(target: Path, change: Callable[[Any | None], Any], attempts: int = 20) -> Any:
    """Read-modify-write of a JSON record that concurrent writers never lose an update of; returns what
    was written. ``change`` gets the current document (None if absent) and returns the new one.

    On a filesystem: under an exclusive ``flock`` of ``<name>.lock`` beside it. On S3, which has no
    locks: a conditional PUT on the version read (create-if-absent for a new record), retried from the
    read when another writer came first. On HDFS, which has neither: under ``<name>.lock`` beside it,
    created exclusively (see :func:`_hdfs_lock`)."""
    if on_hdfs(target):
        with _hdfs_lock(target.with_name(f"{target.name}.lock")):
            document = change(read_json(target))
            write_json(target, document)
            return document
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


@contextlib.contextmanager
def _hdfs_lock(lock: Path, timeout_s: float = 60.0) -> Any:
    """Hold ``lock``: a file created exclusively (atomic at the NameNode) naming its holder, deleted on
    exit. A lock whose holder died (a dead pid on this host, or older than ``HDFS_LOCK_STALE_S``) is
    broken by renaming it aside on its version, so of two waiters only one breaks it."""
    mine = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex})
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while create_exclusive(lock, mine) is None:
        _break_if_stale(lock)
        if time.monotonic() > deadline:
            raise StoreError(f"{lock}: held by another writer for over {timeout_s:.0f}s; giving up")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if read_bytes(lock) == mine.encode():
                lock.fs.client.delete(lock.path, False)


def _break_if_stale(lock: Path) -> None:
    found = read_versioned(lock)
    if found is None:
        return
    content, version = found
    try:
        holder = json.loads(content)
        dead = holder["host"] == socket.gethostname() and not process_exists(int(holder["pid"]))
    except (ValueError, KeyError, TypeError):
        dead = False
    age = time.time() - float(version.split("-", 1)[0]) / 1000.0
    if dead or age > HDFS_LOCK_STALE_S:
        aside = lock.with_name(f"{lock.name}.broken-{uuid.uuid4().hex[:8]}")
        if _hdfs_take_aside(lock, version, aside):
            with contextlib.suppress(FileNotFoundError):
                aside.fs.client.delete(aside.path, False)


def write_json(target: Path, document: Any) -> None:
    write_atomically(target, json.dumps(document, indent=2, sort_keys=True))


def read_json(target: Path) -> Any | None:
    """The parsed document, None when the file does not exist; an unreadable one is an error."""
    try:
        return json.loads(read_bytes(target))
    except FileNotFoundError:
        return None
