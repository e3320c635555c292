"""The Makefile's targets: `make help` lists every one with its description, and each benchmark target
passes BENCH_ARGS to its benchmark, as docs/benchmarks.md#how-the-benchmarks-run says."""

from __future__ import annotations

import re
import subprocess

from stream_pipelines.core.config import PROJECT_ROOT

BENCHMARK_MODULE = re.compile(r"-m stream_pipelines\.devtools\.benchmarks\.(\w+)(.*)$")
TARGET = re.compile(r"^([A-Za-z0-9_.-]+)\s*:(?!=)")


def makefile_targets() -> set[str]:
    """Every target the Makefile defines (special targets such as .PHONY left out)."""
    lines = (PROJECT_ROOT / "Makefile").read_text().splitlines()
    return {
        match.group(1)
        for line in lines
        if (match := TARGET.match(line)) and not match.group(1).startswith(".")
    }


def test_make_help_lists_every_target_with_a_description():
    listed = subprocess.run(
        ["make", "--no-print-directory", "-s", "help"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    names = [line.split()[0] for line in listed if line.strip()]
    assert sorted(names) == sorted(makefile_targets())
    assert [line for line in listed if len(line.split()) < 2] == [], "a target without its description"


def test_the_help_pattern_takes_any_target_name():
    help_recipe = next(
        line for line in (PROJECT_ROOT / "Makefile").read_text().splitlines() if "$(MAKEFILE_LIST)" in line
    )
    pattern = re.search(r"grep -E '([^']+)'", help_recipe).group(1)
    for line in ("bench-s3v2:  ## digits too", "hdfs_status: setup  ## underscores", "up:  ## short"):
        assert re.match(pattern, line), line
    assert not re.match(pattern, "status: setup"), "a target without ## is not listed"


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
