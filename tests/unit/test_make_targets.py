"""The Makefile's benchmark targets: each passes BENCH_ARGS to its benchmark, as
docs/benchmarks.md#how-the-benchmarks-run says."""

from __future__ import annotations

import re

from stream_pipelines.core.config import PROJECT_ROOT

BENCHMARK_MODULE = re.compile(r"-m stream_pipelines\.devtools\.benchmarks\.(\w+)(.*)$")


def benchmark_recipes() -> dict[str, str]:
    """Each bench-* target's line that runs its benchmark module."""
    recipes, target = {}, None
    for line in (PROJECT_ROOT / "Makefile").read_text().splitlines():
        if header := re.match(r"^([\w-]+):", line):
            target = header.group(1)
        elif target and target.startswith("bench-") and BENCHMARK_MODULE.search(line):
            recipes[target] = line
    return recipes


def test_every_benchmark_target_passes_bench_args_to_its_benchmark():
    recipes = benchmark_recipes()
    folder = PROJECT_ROOT / "stream_pipelines/devtools/benchmarks"
    # A benchmark is a module, or a package run by its __main__.
    modules = {path.stem for path in folder.glob("*.py")} | {
        path.parent.name for path in folder.glob("*/__main__.py")
    }
    # Every benchmark with an entry point has a target (common.py is the shared part; bare_driver.py is
    # what the overhead benchmark spark-submits).
    assert {BENCHMARK_MODULE.search(line).group(1) for line in recipes.values()} == modules - {
        "__init__",
        "common",
        "bare_driver",
    }
    without = [target for target, line in recipes.items() if not line.rstrip().endswith("$(BENCH_ARGS)")]
    assert without == []
