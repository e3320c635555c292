"""The one reader of Spark 4.1's checkpoint files; everything else that looks inside a checkpoint uses it.

What Spark keeps in a query's checkpoint folder (``config.checkpoint_dir(app, query)``):

  metadata        ``{"id": "<query id>"}``, written at the first start.
  offsets/N       ``v1``, then the batch's metadata (watermark, timestamp and the SQL conf the query is
                  pinned to, shuffle partitions and state store provider included), then one line per
                  source in source order: Kafka ``{"topic": {"partition": next offset}}``, files
                  ``{"logOffset": n}``, ``-`` for none yet. Written *before* batch N runs; it holds N's
                  end offsets.
  commits/N       ``v1``, then ``{"nextBatchWatermarkMs": ...}``. Written once N's output is committed.
  sources/<i>/    Kafka: ``0`` holds the offsets the query first started from; files: the seen-files log
                  (``N`` and ``N.compact`` entries: ``v1``, then one JSON line per file with its batchId).
  state/<op>/     ``_metadata/metadata`` names the operator and its stores; ``<partition>[/<store>]/``
                  holds the store, where version V is the state after batch V-1.

A file sink keeps the same kind of log as a files source in ``<output>/_spark_metadata``.

Spark writes each file whole through a rename and, on local filesystems, a Hadoop ``.<name>.crc`` beside
it; its reader refuses a file that no longer matches. The strict readers refuse what Spark would refuse
(``UnreadableFile``, whose message completes ``offsets/7 ...``). ``lenient=True`` is for the batch log's
copies (checksums not copied, so not checked): missing parts read as absent instead of failing.

Every function takes a pathlib-style location from ``store.location``: a local folder or one on S3.
S3A writes no ``.crc`` files, so checksums are checked where Spark wrote them, on a filesystem.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from stream_pipelines.core import store

# Keys of the SQL conf pinned in offsets/N that the preflight and the reset care about.
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
STATE_CODEC = "spark.sql.streaming.stateStore.compression.codec"
# Where a file sink keeps its log, in its output folder.
SINK_LOG = "_spark_metadata"
# The classes spark_conf sets for config.spark.state_store (a launcher builds them without pyspark).
STATE_STORE_PROVIDERS = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
PROVIDER_NAMES = {value: key for key, value in STATE_STORE_PROVIDERS.items()}

# Entries of a metadata log (offsets, commits, a files source's or a file sink's log).
LOG_ENTRY = re.compile(r"(\d+)(?:\.compact)?")


class UnreadableFile(ValueError):
    """A checkpoint file Spark could not use; the message completes 'offsets/7 ...'.

    A ValueError, as the JSON errors the batch log's readers raised before they used this module.
    """


@dataclass
class OffsetsEntry:
    batch: int
    watermark_ms: int
    timestamp_ms: int | None
    conf: dict[str, str]
    # One per Spark source: the parsed JSON line, or None where Spark wrote "-" (no offset yet).
    sources: list[dict[str, Any] | None]


# --------------------------------------------------------------------------- files and listings


def batch_files(folder: Path) -> dict[int, Path]:
    """offsets/ or commits/: batch id -> its file (checksums and temporary files left out)."""
    if not folder.is_dir():
        return {}
    return {int(entry.name): entry for entry in folder.iterdir() if entry.name.isdigit()}


def batch_ids(folder: Path) -> list[int]:
    return sorted(batch_files(folder))


def is_log_entry(name: str) -> bool:
    return LOG_ENTRY.fullmatch(name) is not None


def log_entries(folder: Path) -> list[tuple[int, Path]]:
    """A files source's or file sink's log: (batch id, entry) for each ``N`` and compacted ``N.compact``."""
    if not folder.is_dir():
        return []
    return sorted((int(m.group(1)), e) for e in folder.iterdir() if (m := LOG_ENTRY.fullmatch(e.name)))


def sink_log_latest_batch(output: Path) -> int | None:
    """The newest batch a file sink committed, from its ``_spark_metadata`` log; None without a log."""
    return max((batch for batch, _ in log_entries(output / SINK_LOG)), default=None)


def read_bytes(path: Path, *, lenient: bool = False) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UnreadableFile(f"cannot be read: {error.strerror or error}") from None
    if not lenient and not store.on_object_store(path):
        _verify_checksum(path, data)
    return data


def _verify_checksum(path: Path, data: bytes) -> None:
    """Hadoop's .<name>.crc (CRC32 per chunk): Spark's reader fails on a file that no longer matches it."""
    crc_file = path.with_name(f".{path.name}.crc")
    if not crc_file.is_file():
        return
    raw = crc_file.read_bytes()
    if len(raw) < 8 or raw[:4] != b"crc\x00":
        raise UnreadableFile(f"has a damaged checksum file {crc_file.name}")
    chunk = struct.unpack(">i", raw[4:8])[0]
    if chunk <= 0:
        raise UnreadableFile(f"has a damaged checksum file {crc_file.name}")
    actual = b"".join(
        struct.pack(">I", zlib.crc32(data[start : start + chunk])) for start in range(0, len(data), chunk)
    )
    if actual != raw[8:]:
        raise UnreadableFile(
            f"does not match its checksum file {crc_file.name}: it was changed or cut short after Spark "
            "wrote it, and Spark refuses to read it"
        )


def _read_text(path: Path, *, lenient: bool = False) -> str:
    data = read_bytes(path, lenient=lenient)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableFile("is not UTF-8 text (garbage)") from None


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UnreadableFile(
            f"has {what} that is not valid JSON ({error.msg} at column {error.colno})"
        ) from None
    if not isinstance(value, dict):
        raise UnreadableFile(f"has {what} that is not a JSON object")
    return value


def _version_lines(path: Path, minimum_lines: int) -> list[str]:
    text = _read_text(path)
    if not text.strip():
        raise UnreadableFile("is empty (written only partly)")
    lines = text.split("\n")
    if not re.fullmatch(r"v\d+", lines[0]):
        raise UnreadableFile(f"does not start with a log version line such as 'v1' (found {lines[0][:20]!r})")
    if lines[0] != "v1":
        raise UnreadableFile(f"has log version {lines[0]}, newer than this Spark's v1")
    if len(lines) < minimum_lines:
        raise UnreadableFile("ends after its version line (written only partly)")
    return lines


# --------------------------------------------------------------------------- offsets, commits, metadata


def read_offsets(path: Path, expected_sources: int | None = None, *, lenient: bool = False) -> OffsetsEntry:
    """offsets/N. Strict: as Spark reads it, with one line per source when ``expected_sources`` is given.

    Lenient (the batch log's copies): no checksum or version line check, a missing metadata line or
    watermark reads as 0, blank lines are skipped and Kafka offsets are taken as they are.
    """
    if lenient:
        lines = _read_text(path, lenient=True).splitlines()
        metadata = _json_object(lines[1], "a batch metadata line") if len(lines) > 1 else {}
        watermark = int(metadata.get("batchWatermarkMs", 0))
        source_lines = [line.strip() for line in lines[2:] if line.strip()]
    else:
        lines = _version_lines(path, 2)
        metadata = _json_object(lines[1], "a batch metadata line")
        if not isinstance(metadata.get("batchWatermarkMs"), int):
            raise UnreadableFile("has a batch metadata line without batchWatermarkMs")
        watermark = int(metadata["batchWatermarkMs"])
        source_lines = lines[2:]
        if expected_sources is not None and len(source_lines) != expected_sources:
            raise UnreadableFile(
                f"has {len(source_lines)} source line(s) where the query has {expected_sources} source(s) "
                "(cut short, or written by a query with other sources)"
            )
    sources: list[dict[str, Any] | None] = []
    for index, line in enumerate(source_lines):
        if line == "-":
            sources.append(None)
            continue
        offsets = _json_object(line, f"a line for source {index}")
        if "logOffset" not in offsets and not lenient:
            _check_kafka_offsets(offsets, f"source {index}")
        sources.append(offsets)
    conf = metadata.get("conf") or {}
    if not isinstance(conf, dict):
        if not lenient:
            raise UnreadableFile("has a batch metadata line whose conf is not a JSON object")
        conf = {}
    timestamp = metadata.get("batchTimestampMs")
    return OffsetsEntry(
        batch=int(path.name),
        watermark_ms=watermark,
        timestamp_ms=timestamp if isinstance(timestamp, int) else None,
        conf={str(key): str(value) for key, value in conf.items()},
        sources=sources,
    )


def _check_kafka_offsets(offsets: Mapping[str, Any], what: str) -> None:
    for topic, partitions in offsets.items():
        if not isinstance(partitions, dict) or not all(
            str(partition).isdigit() and isinstance(offset, int) for partition, offset in partitions.items()
        ):
            raise UnreadableFile(f"has offsets for {what}, topic {topic!r}, that are not partition -> offset")


def kafka_offsets(sources: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[int, int]]:
    """Topic -> partition -> offset over the Kafka sources of an offsets entry (files sources left out)."""
    merged: dict[str, dict[int, int]] = {}
    for source in sources:
        if source is None or "logOffset" in source:
            continue
        for topic, partitions in source.items():
            if isinstance(partitions, dict):
                merged.setdefault(topic, {}).update({int(p): int(o) for p, o in partitions.items()})
    return merged


def read_commit(path: Path) -> int:
    """commits/N: the watermark the next batch runs with (nextBatchWatermarkMs)."""
    lines = _version_lines(path, 2)
    metadata = _json_object(lines[1], "a commit line")
    if not isinstance(metadata.get("nextBatchWatermarkMs"), int):
        raise UnreadableFile("has a commit line without nextBatchWatermarkMs")
    return int(metadata["nextBatchWatermarkMs"])


def read_query_id(path: Path) -> str:
    """The checkpoint's ``metadata`` file: the query id."""
    text = _read_text(path).strip()
    if not text:
        raise UnreadableFile("is empty (written only partly)")
    value = _json_object(text.split("\n")[0], "content")
    if not isinstance(value.get("id"), str):
        raise UnreadableFile("has no query id")
    return value["id"]


# --------------------------------------------------------------------------- sources


def read_initial_offsets(path: Path, *, lenient: bool = False) -> dict[str, Any] | None:
    """sources/<i>/0 of a Kafka source: a zero byte (kept for Spark 2.1 compatibility), 'v1', JSON.

    Lenient (the batch log's copies): no checksum check, damaged bytes replaced, and None when the entry
    is a files source's log rather than Kafka offsets.
    """
    data = read_bytes(path, lenient=lenient)
    if lenient:
        for line in data.decode("utf-8", errors="replace").replace("\x00", "").splitlines():
            if line.startswith("{"):
                offsets = json.loads(line)
                return None if "path" in offsets else offsets
        return None
    text = data[1:] if data[:1] == b"\x00" else data
    try:
        lines = text.decode("utf-8").split("\n", 1)
    except UnicodeDecodeError:
        raise UnreadableFile("is not UTF-8 text (garbage)") from None
    if len(lines) != 2 or lines[0] != "v1":
        raise UnreadableFile("is not 'v1' followed by the starting offsets (written only partly?)")
    offsets = _json_object(lines[1], "starting offsets")
    _check_kafka_offsets(offsets, "the source")
    return offsets


def read_file_log(path: Path) -> list[dict[str, Any]]:
    """One entry of a files source's (or file sink's) log: its JSON lines (path, batchId, ...).

    Read leniently, as the batch log always did: no checksum check, damaged bytes replaced, non-JSON
    lines skipped.
    """
    return [
        json.loads(line)
        for line in read_bytes(path, lenient=True).decode("utf-8", errors="replace").splitlines()
        if line.startswith("{")
    ]


def sink_files(output: Path) -> list[str]:
    """The data files a file sink has committed, as its ``_spark_metadata`` log lists them: the latest
    compacted entry (all files up to it) and every entry after it. Files in the folder that the log does
    not list are debris of interrupted batches; Spark's readers skip them and so must any other."""
    entries = log_entries(output / SINK_LOG)
    compacted = [index for index, (_, entry) in enumerate(entries) if entry.name.endswith(".compact")]
    files: dict[str, bool] = {}
    for _, entry in entries[compacted[-1] if compacted else 0 :]:
        for item in read_file_log(entry):
            if "path" in item:
                files[item["path"]] = item.get("action", "add") != "delete"
    return sorted(path for path, kept in files.items() if kept)


def normalise_path(path: str) -> str:
    """One spelling for a local file path, whether Spark wrote it as file:/x, file:///x or /x."""
    if path.startswith("file:"):
        path = path[len("file:") :]
        path = "/" + path.lstrip("/")
    return path


def committed_names(urls: list[str], folder_url: str) -> set[str]:
    """The log's file URLs as names relative to the output folder (the log holds absolute URLs, as
    Spark wrote them: ``file:/x``, ``s3a://bucket/key``, percent-encoded)."""
    base = _file_key(folder_url).rstrip("/") + "/"
    names = set()
    for url in urls:
        key = _file_key(unquote(url))
        if key.startswith(base):
            names.add(key[len(base) :])
    return names


def _file_key(url: str) -> str:
    if store.scheme(url) in store.OBJECT_STORE_SCHEMES:
        return url.split("://", 1)[1]
    if store.scheme(url) == "hdfs":
        # The path alone: a config's hdfs:///x (fs.defaultFS) and the log's hdfs://host:port/x are one
        # file, and one config reaches one HDFS.
        return "/" + url.split("://", 1)[1].partition("/")[2]
    return os.path.abspath(normalise_path(url))


# --------------------------------------------------------------------------- state


def state_operators(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """Operator id -> name, store names and partitions, from Spark's state metadata (or the folders)."""
    state = checkpoint / "state"
    operators: dict[int, dict[str, Any]] = {}
    if not state.is_dir():
        return operators
    for folder in sorted((e for e in state.iterdir() if e.name.isdigit()), key=lambda e: int(e.name)):
        partitions = [e for e in folder.iterdir() if e.name.isdigit()]
        described: dict[str, Any] = {"name": None, "stores": [], "partitions": len(partitions)}
        try:
            lines = _version_lines(folder / "_metadata" / "metadata", 2)
            metadata = _json_object(lines[1], "operator metadata")
            described["name"] = metadata.get("operatorInfo", {}).get("operatorName")
            stores = metadata.get("stateStoreInfo", [])
            described["stores"] = [info["storeName"] for info in stores]
            described["partitions"] = max((info.get("numPartitions", 0) for info in stores), default=0)
        except (UnreadableFile, KeyError, TypeError):
            # Spark writes the operator metadata after the first batch; before that, the folders tell.
            sample = partitions[0] if partitions else None
            if sample is not None:
                named = [e.name for e in sample.iterdir() if e.is_dir() and not e.name.startswith("_")]
                described["stores"] = sorted(named) or ["default"]
        operators[int(folder.name)] = described
    return operators
