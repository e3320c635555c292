#!/usr/bin/env bash
# Idempotent setup: .venv from requirements.lock, this package (editable), the pinned JVM artifacts,
# and the pinned scripts and styles Great Expectations' Data Docs load (so they open offline).
# Needs only Python 3.11 and Java 17+; each step is skipped when its inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
  echo "setup: Python 3.11 is required (found: $("$PYTHON" --version 2>&1)). Install python3.11 or set PYTHON=/path/to/python3.11." >&2
  exit 1
fi

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1; then
  echo "setup: Java 17+ is required and 'java' is not on PATH." >&2
  echo "       Debian/Ubuntu: sudo apt-get install openjdk-17-jdk-headless   macOS: brew install openjdk@17" >&2
  exit 1
fi
if [ "$(java_major)" -lt 17 ]; then
  echo "setup: Java $(java_major) found, but Spark 4 and Kafka 4 need Java 17+. Install openjdk-17 and set JAVA_HOME." >&2
  exit 1
fi

UV_VERSION=0.13.9
stamp=.venv/.requirements.sha256
wanted="$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "setup: building .venv from requirements.lock ..."
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  # Compiled once here: with PYTHONDONTWRITEBYTECODE set (as on CI and in the image), every process
  # would otherwise compile each module it imports from source, every time.
  .venv/bin/uv pip sync --quiet --compile-bytecode --python .venv/bin/python requirements.lock
  .venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -e .
  echo "$wanted" > "$stamp"
  touch .venv/.bytecode
fi
if [ ! -f .venv/.bytecode ]; then
  # A venv built before setup compiled its packages: compile them once.
  .venv/bin/python -m compileall -q -j 0 .venv/lib/python3.11/site-packages >/dev/null || true
  touch .venv/.bytecode
fi

.venv/bin/pipelinectl setup-jvm >/dev/null
.venv/bin/pipelinectl setup-web-assets >/dev/null
echo "setup: ready (.venv, JVM artifacts and the drivers' class archive in .cache/jvm, Data Docs assets in .cache/web)"
