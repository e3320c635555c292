"""The driver JVM's class-data archive (AppCDS): the classes a Spark driver loads as it starts, stored
once in their parsed and verified form and mapped into every later driver's JVM.

A driver loads thousands of classes from pyspark's 286 jars before its first batch is committed.
With the archive, the JVM maps them from one file instead of reading, parsing and verifying them at
every start, which shortens every start and restart (docs/benchmarks.md#make-bench-startup).

``make setup`` builds the archive once (``class_archive_training``). A stamp of the Java build and of
Spark's jars says when the archive must be built again. The archive only ever speeds a start up: the
JVM checks it against its own class path and ignores a missing or stale one (a stale one with a
warning in the driver's log), so a driver never fails for it. ``spark.class_archive: false`` turns it
off, build and use alike.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.launching import jvm

ARCHIVE_NAME = "spark-driver.jsa"


def archive_path() -> Path:
    return jvm.cache_root() / "cds" / ARCHIVE_NAME


def stamp_path() -> Path:
    return archive_path().with_suffix(".stamp")


def archive_digest() -> str:
    """What the archive is valid for: the Java build and every jar on Spark's class path (name, size
    and modification time, which the JVM itself checks before it maps an archive)."""
    digest = hashlib.sha256(java_build().encode())
    for jar in sorted((jvm.spark_home() / "jars").glob("*.jar")):
        status = jar.stat()
        digest.update(f"{jar.name}:{status.st_size}:{int(status.st_mtime)}\n".encode())
    return digest.hexdigest()


def java_build() -> str:
    """What ``java -version`` says: the archive is only valid for the JVM build that wrote it."""
    return jvm.java_version_text()


def is_current() -> bool:
    stamp = stamp_path()
    return archive_path().is_file() and stamp.is_file() and stamp.read_text().strip() == archive_digest()


def driver_java_option(config: PipelineConfig) -> str | None:
    """The JVM option that maps the archive into a driver started on this machine, or None when the
    archive is off or the driver runs elsewhere (cluster deploy mode)."""
    if not config.spark.class_archive or config.spark.deploy_mode != "client":
        return None
    return jvm.java_option(f"-XX:SharedArchiveFile={archive_path()}")
