"""The packed environment of this very venv (``pipelinectl pack-env``): unpacked into another folder and
started with an empty environment, its python imports every driver's modules from that folder alone;
where this test may make a mount namespace (root), with the build interpreter, the venv and the checkout
hidden under empty folders, as on a node that has none of them. The pack is the session's (``pipelinectl
pack-env`` to the session's HDFS, ``packed_on_store``), which the YARN test ships with its drivers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.launching import packed_env

pytestmark = pytest.mark.slow

# Imports what a driver imports, then says where every loaded module came from and what did not import.
DRIVER_IMPORTS = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
absent = []
for name in ("airflow", "playwright", "stream_pipelines.devtools"):
    try:
        importlib.import_module(name)
    except ImportError:
        absent.append(name)
files = {name: module.__file__ for name, module in sys.modules.items() if getattr(module, "__file__", None)}
print(json.dumps({"files": files, "absent": absent}))
"""


def test_the_driver_closure_imports_from_the_unpacked_pack_of_this_environment(
    tmp_path: Path, packed_on_store
):
    [archive] = [
        path
        for path in packed_on_store.local_folder.glob("*.tar.gz")
        if packed_on_store.python_environment.endswith(path.name)
    ]
    unpacked = tmp_path / "container" / packed_env.ENVIRONMENT_LINK
    unpacked.mkdir(parents=True)
    subprocess.run(["tar", "xzf", str(archive), "-C", str(unpacked)], check=True)

    command = [
        "env",
        "-i",
        "PYTHONNOUSERSITE=1",
        "./bin/python",
        "-c",
        DRIVER_IMPORTS,
        *packed_env.DRIVER_MODULES,
    ]
    answer = subprocess.run(
        [*hiding_this_machines_python(), *command],
        cwd=unpacked,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    report = json.loads(answer.stdout)
    root = unpacked.resolve()
    outside = {
        name: file for name, file in report["files"].items() if not Path(file).resolve().is_relative_to(root)
    }
    assert outside == {}
    assert "stream_pipelines.reconciliation.job" in report["files"]
    assert report["absent"] == ["airflow", "playwright", "stream_pipelines.devtools"]


def hiding_this_machines_python() -> list[str]:
    """A prefix that runs a command with the build interpreter, this venv and the checkout covered by
    empty folders, where a private mount namespace can be made; else none (the test then relies on
    where every module was loaded from)."""
    hidden = [Path(sys.base_prefix), Path(sys.prefix), PROJECT_ROOT]
    mounts = " && ".join(f"mount -t tmpfs none {folder}" for folder in hidden)
    prefix = ["unshare", "--mount", "sh", "-c", f'{mounts} && exec "$@"', "hide"]
    if shutil.which("unshare") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode:
        return []
    return prefix
