"""The production package's folders only point down, no module of a package imports another around a
circle, and the tooling stays a layer apart: the contracts in pyproject.toml ([tool.importlinter]),
checked by import-linter over every import, function-local and TYPE_CHECKING ones included; the package
that ships leaves stream_pipelines.devtools out, and pipelinectl works without it."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from importlinter.cli import lint_imports
from setuptools import find_packages

from stream_pipelines.core.config import PROJECT_ROOT


def test_the_layer_contract_is_kept(capsys):
    assert lint_imports(config_filename=str(PROJECT_ROOT / "pyproject.toml")) == 0, capsys.readouterr().out


def test_the_package_that_ships_leaves_the_tooling_out():
    found = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    shipped = find_packages(where=str(PROJECT_ROOT), **found["find"])
    assert "stream_pipelines" in shipped and "stream_pipelines.airflow" in shipped
    assert not [name for name in shipped if name.startswith("stream_pipelines.devtools")], shipped
    folders = {
        f"stream_pipelines.{folder.name}"
        for folder in (PROJECT_ROOT / "stream_pipelines").iterdir()
        if (folder / "__init__.py").is_file() and folder.name != "devtools"
    }
    assert folders <= set(shipped), "every role folder ships"


WITHOUT_TOOLING = """
import importlib.abc, sys

class NoTooling(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "stream_pipelines.devtools" or name.startswith("stream_pipelines.devtools."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTooling())
from stream_pipelines.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_without_tooling(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TOOLING, *arguments], capture_output=True, text=True, timeout=60
    )


def test_pipelinectl_runs_without_the_tooling_and_offers_only_what_ships():
    shown = run_without_tooling("--help")
    assert shown.returncode == 0, shown.stderr
    commands = shown.stdout.split("commands:")[-1]
    for shipped in ("topics", "run", "stop", "checkpoint", "control", "reconcile", "outputs", "setup-jvm"):
        assert shipped in commands
    for developer in ("broker", "produce", "demo", "up", "down"):
        assert f",{developer}," not in commands and f",{developer}}}" not in commands
    with_tooling = subprocess.run(
        [sys.executable, "-m", "stream_pipelines.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert ",produce," in with_tooling.stdout, "a development checkout has the developer commands"
