"""The suite's collection hook (tests/conftest.py) groups tests for pytest-xdist's workers: a module
runs whole on one worker, so its module fixtures start once. A run without the plugin (`-p no:xdist`,
or an environment without it) must still collect and run."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

from stream_pipelines.core.config import PROJECT_ROOT

# Two quick modules: each worker starts a Python that imports the suite, which is the cost here.
MODULES = ("tests/unit/test_registry.py", "tests/unit/test_registry_datasets.py")


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


class Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid, self.markers = nodeid, []

    def add_marker(self, marker) -> None:
        self.markers.append(marker)


class Config:
    def __init__(self, servers_on_one_worker: bool) -> None:
        self.option = servers_on_one_worker
        self.pluginmanager = self

    def getoption(self, name: str) -> bool:
        assert name == "--servers-on-one-worker"
        return self.option

    def hasplugin(self, name: str) -> bool:
        return name == "xdist"


def test_with_servers_on_one_worker_the_unit_tier_runs_beside_the_rest_which_keeps_its_order():
    """`TEST_WORKERS=2 make test`: every test that starts a server in one group (one worker, longest first,
    as one process runs them), each unit module in its own group (the other worker)."""
    from tests.conftest import LONGEST_FIRST, SERVERS_GROUP, pytest_collection_modifyitems

    nodeids = [
        "tests/test_broker.py::test_a",
        f"{LONGEST_FIRST[1]}::test_b",
        "tests/unit/test_registry.py::test_c",
        f"{LONGEST_FIRST[0]}::test_d",
        "tests/unit/test_report.py::test_e",
        "tests/test_launch.py::test_f",
    ]
    items = [Item(nodeid) for nodeid in nodeids]
    pytest_collection_modifyitems(Config(servers_on_one_worker=True), items)
    assert [item.nodeid for item in items] == [
        f"{LONGEST_FIRST[0]}::test_d",
        f"{LONGEST_FIRST[1]}::test_b",
        "tests/test_broker.py::test_a",
        "tests/test_launch.py::test_f",
        "tests/unit/test_registry.py::test_c",
        "tests/unit/test_report.py::test_e",
    ]
    groups = {item.nodeid: item.markers[0].args[0] for item in items}
    assert {groups[n] for n in nodeids if not n.startswith("tests/unit/")} == {SERVERS_GROUP}
    assert groups["tests/unit/test_registry.py::test_c"] == "tests/unit/test_registry.py"
    assert groups["tests/unit/test_report.py::test_e"] == "tests/unit/test_report.py"

    # Without the option, each module is its own group (or its SAME_WORKER_AS group).
    items = [Item(nodeid) for nodeid in nodeids]
    pytest_collection_modifyitems(Config(servers_on_one_worker=False), items)
    assert {item.markers[0].args[0] for item in items} == {n.split("::")[0] for n in nodeids} - {
        LONGEST_FIRST[1]
    } | {"installed-site"}
