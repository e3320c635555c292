"""Recovery benchmark: how long each kind of failure keeps an app from committing, with in-driver
recovery and the frozen-JVM check, against the design before them, in one run on one machine.

Two `make chaos` runs on private stacks (a real broker, Airflow's scheduler with the LocalExecutor,
spark-submit drivers under their supervisor DAGs, the live generator), one after the other, with the
same seed, apps and faults, each class ``--rounds`` times in turn:

  before   ``supervision.in_driver_restarts=0`` (a failed query ends its driver, and the supervisor
           starts a new one) and ``supervision.jvm_answer_timeout=1 hour`` (a frozen JVM is found only
           by the progress rule: no progress for the watchdog's window while offsets wait)
  after    the shipped settings

The faults (``devtools.chaos``):

  query-failure   one query's next checkpoint write refused until the query fails (a store refusing
                  a write in an outage); timed from the query's failure to the app's next committed
                  batch
  driver-freeze   SIGSTOP of the driver's JVM; timed from the freeze to the next committed batch
  driver-kill     kill -9 of the driver's process group; timed from the kill to the next committed
                  batch, split at the start of the replacement's spark-submit (its /proc start time):
                  before it, supervision's share (detection, retry delay, task start, start checks),
                  which is the kill less the new driver's own cold start; after it, that cold start.
                  The app's first start on the stack (its first spark-submit to the first batch of all
                  its queries) is printed beside them; it shares the machine with the stack's own
                  start, so a restart's cold start is read against the replacement's, not it

Both runs use the chaos stack's supervision timings (2 s heartbeat, 2 s retry delay, 3 s trigger),
shorter than the shipped ones, so the figures are the mechanism's, on this machine; the goals beside
them are the restart issue's. The faults are 35-40 s apart and the crash-loop window is 30 s, so each
restart is the first within its window, as faults hours apart are in production (a burst of faults
backs off further, by design). A kill -9 takes the same path in both runs (the first restart of a
killed driver is at once in both): its columns are two samples of one design.

With ``--versus cluster`` the two runs are the drivers' two homes instead, with the shipped settings and
one fault, the kill of a driver, each ``--rounds`` times:

  local    kill -9 of the driver's process group (its spark-submit JVM and Python, on the Airflow worker)
  yarn     kill -9 of the driver's YARN container (``--cluster yarn``: a ResourceManager and NodeManager
           on loopback over their HDFS, which holds the data root); the new launch is timed at the
           ResourceManager's start of the new application

Results: a table on stdout and JSON in data/bench/recovery.json, with both chaos reports.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    add_results_argument,
    benchmark_parser,
    log,
    machine_info,
    positive_int,
    run_and_report,
)

DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "recovery.json"
CLASSES = ("query-failure", "driver-freeze", "driver-kill")
BEFORE = ("supervision.in_driver_restarts=0", "supervision.jvm_answer_timeout=1 hour")
# Per comparison, its two runs in order: name -> chaos arguments of its own.
VERSUS = {
    "design": {
        "before": ("--classes", ",".join(CLASSES), *(a for s in BEFORE for a in ("--set", s))),
        "after": ("--classes", ",".join(CLASSES)),
    },
    "cluster": {
        "local": ("--classes", "driver-kill"),
        "yarn": ("--cluster", "yarn", "--classes", "container-kill"),
    },
}
# A YARN container's kill is a driver's kill: the same figures.
KILLS = ("driver-kill", "container-kill")
# Faults in production are hours apart, so each restart is the first within its crash-loop window. A
# window shorter than the gap between faults keeps them apart here too, rather than measuring how the
# backoff grows over a burst of faults.
BOTH = ("supervision.crash_loop_window=30 seconds",)
GAP_S = ("35", "40")
# The restart issue's goals, in seconds.
GOALS = {"query-failure": 10.0, "driver-freeze": 60.0, "driver-kill-supervision": 5.0}


def chaos_run(folder: Path, args: Any, arguments: Sequence[str]) -> dict[str, Any]:
    """One chaos run in a process of its own (its stack, signals and verification session with it), its
    progress on this one's stderr; its report."""
    report = folder / "chaos.json"
    argv = [
        *("--apps", args.app, "--each-once", "--rounds", str(args.rounds), *arguments),
        *("--seed", str(args.seed), "--gap", *GAP_S),
        *("--root", str(folder / "stack"), "--json", str(report)),
    ]
    for setting in BOTH:
        argv += ["--set", setting]
    command = [sys.executable, "-m", "stream_pipelines.devtools.chaos", *argv]
    code = subprocess.run(command, stdout=sys.stderr, check=False).returncode
    if not report.is_file():
        raise BenchmarkError(f"the chaos run in {folder} wrote no report (exit {code})")
    found = json.loads(report.read_text())
    found["exit_code"] = code
    return found


def timings(report: dict[str, Any]) -> dict[str, list[float]]:
    """Per figure, the seconds of each recovered fault."""
    found: dict[str, list[float]] = {key: [] for key in LABELS}
    for fault in report.get("faults", []):
        if not fault["recovered"] or fault["next_batch_s"] is None:
            continue
        if fault["fault"] == "query-failure" and fault.get("query_failed_s") is not None:
            found["query-failure"].append(round(fault["next_batch_s"] - fault["query_failed_s"], 1))
        elif fault["fault"] in ("driver-freeze", *KILLS):
            figure = "driver-kill" if fault["fault"] in KILLS else fault["fault"]
            found[figure].append(fault["next_batch_s"])
            if figure == "driver-kill" and fault.get("new_driver_s") is not None:
                found["driver-kill-supervision"].append(fault["new_driver_s"])
                found["driver-kill-new-driver"].append(
                    round(fault["next_batch_s"] - fault["new_driver_s"], 1)
                )
    return found


def run_benchmark(args: Any, _interrupts: Interrupts) -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {}
    sides = VERSUS[args.versus]
    chosen = args.runs or list(sides)
    unknown = sorted(set(chosen) - set(sides))
    if unknown:
        raise BenchmarkError(
            f"--versus {args.versus} compares {' and '.join(sides)}, not {', '.join(unknown)}"
        )
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as scratch:
        for name, arguments in sides.items():
            if name not in chosen:
                continue
            log(f"{name}: chaos on {args.app} x {args.rounds}, {' '.join(arguments)}")
            folder = Path(scratch) / name
            folder.mkdir()
            runs[name] = chaos_run(folder, args, arguments)
    figures = {name: timings(runs.get(name, {})) for name in sides}
    return {
        "machine": machine_info(),
        "app": args.app,
        "rounds": args.rounds,
        "seed": args.seed,
        "versus": args.versus,
        "sides": list(sides),
        "arguments": {name: list(arguments) for name, arguments in sides.items()},
        "figures": figures,
        "goals": GOALS,
        "first_start_s": {name: first_start_s(report, args.app) for name, report in runs.items()},
        "problems": {name: report.get("problems", []) for name, report in runs.items()},
        "reports": runs,
    }


def first_start_s(report: dict[str, Any], app: str) -> float | None:
    """The app's first start on the chaos stack: first spark-submit to the first batch of all its queries."""
    return report.get("cold_start_s", {}).get(app)


LABELS = {
    "query-failure": "query failure -> next committed batch",
    "driver-freeze": "SIGSTOP of the JVM -> next committed batch",
    "driver-kill": "kill -9 of the driver -> next committed batch",
    "driver-kill-new-driver": "new driver: its launch -> that batch",
    "driver-kill-supervision": "kill -9 -> the new launch (the rest)",
}


def format_table(results: dict[str, Any]) -> str:
    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" if values else "-"

    first_side, second_side = results.get("sides", ("before", "after"))
    before, after = results["figures"][first_side], results["figures"][second_side]
    lines = [
        f"recovery of {results['app']} on the chaos stack, each fault {results['rounds']} time(s) per run, "
        f"{results['machine'].get('usable_cpus', '?')} CPUs; seconds, median (min-max)",
        f"{'figure':<46}{first_side:>18}{second_side:>18}{second_side + '/' + first_side:>14}{'goal':>8}",
    ]
    for key, label in LABELS.items():
        if not (before[key] or after[key]) and results.get("versus") == "cluster":
            continue  # a figure of a fault this comparison does not inject
        ratio = "-"
        # Seconds rounded to 0.1 can be 0: no ratio then rather than a division by zero.
        if before[key] and after[key] and statistics.median(before[key]) > 0:
            ratio = f"{statistics.median(after[key]) / statistics.median(before[key]):.2f}"
        goal = f"<= {GOALS[key]:.0f}" if key in GOALS else ""
        lines.append(f"{label:<46}{median(before[key]):>18}{median(after[key]):>18}{ratio:>14}{goal:>8}")
    first = results.get("first_start_s", {})
    lines.append(
        f"the app's first start on the stack (its first launch to its first batch, beside the "
        f"stack's own start): {first_side} {_seconds(first.get(first_side))}, "
        f"{second_side} {_seconds(first.get(second_side))}"
    )
    for name, problems in results["problems"].items():
        for problem in problems:
            lines.append(f"{name}: {problem}")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.1f}s"


def build_parser():
    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.recovery", __doc__)
    parser.add_argument("--app", default="raw_archive", help="the app the faults hit (default raw_archive)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="each fault class this often per run")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument(
        "--versus",
        choices=tuple(VERSUS),
        default="design",
        help="design: before and after in-driver recovery and the frozen-JVM check (the default); "
        "cluster: a driver's kill on the Airflow worker (local) and in a YARN container (yarn)",
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        default=None,
        help="which of the comparison's two runs to make (before/after, or local/yarn; default: both; "
        "one alone leaves the other column empty)",
    )
    add_results_argument(parser, DEFAULT_OUT)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_and_report("bench-recovery", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
