"""The suite's collection hook (tests/conftest.py) groups tests for pytest-xdist's workers: a module
runs whole on one worker, so its module fixtures start once. A run without the plugin (`-p no:xdist`,
or an environment without it) must still collect and run."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

from stream_pipelines.core.config import PROJECT_ROOT

MODULES = ("tests/unit/test_registry.py", "tests/unit/test_report.py")


def run_pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_suite_runs_without_the_xdist_plugin():
    ran = run_pytest("-q", "-p", "no:xdist", MODULES[0])
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]


def test_on_two_workers_each_module_runs_whole_on_one_worker():
    # As `TEST_WORKERS=2 make test` runs: without the group, xdist's loadgroup sends each test on its
    # own, and a module's fixtures start on both workers (the chaos stack did, and timed out there).
    ran = run_pytest("-v", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", *MODULES)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-3000:]
    workers_by_module: dict[str, set[str]] = defaultdict(set)
    for worker, nodeid in re.findall(r"\[(gw\d+)\] \[[ \d]+%\] PASSED (\S+)", output):
        module, _, rest = nodeid.partition("::")
        assert rest.endswith(f"@{module}"), f"{nodeid} carries no group of its module"
        workers_by_module[module].add(worker)
    assert sorted(workers_by_module) == sorted(MODULES), output[-3000:]
    for module, workers in workers_by_module.items():
        assert len(workers) == 1, f"{module} ran on {sorted(workers)}"
