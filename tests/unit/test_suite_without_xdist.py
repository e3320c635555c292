"""The suite's collection hook (tests/conftest.py) groups tests for pytest-xdist's workers; a run
without the plugin (`-p no:xdist`, or an environment without it) must still collect and run."""

from __future__ import annotations

import subprocess
import sys

from stream_pipelines.core.config import PROJECT_ROOT


def test_the_suite_runs_without_the_xdist_plugin():
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "tests/unit/test_registry.py",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
