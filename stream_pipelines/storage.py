"""Small files the project writes outside Spark: each write lands whole or not at all."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def write_atomically(target: Path, data: bytes | str) -> None:
    """Write to a unique temporary name beside ``target``, then rename over it (atomic on POSIX)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        if isinstance(data, str):
            temporary.write_text(data)
        else:
            temporary.write_bytes(data)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def write_json(target: Path, document: Any) -> None:
    write_atomically(target, json.dumps(document, indent=2, sort_keys=True))


def read_json(target: Path) -> Any | None:
    """The parsed document, None when the file does not exist; an unreadable one is an error."""
    try:
        return json.loads(target.read_text())
    except FileNotFoundError:
        return None
