"""The nightly job for one event day D, in one driver: the quality gate on D's raw events, the
reconciliation, the gates on what it and the streams wrote, then one report with every gate in it.

    check the inputs     retention has kept D's inputs; Great Expectations on the archive rows of D
                         (a critical failure stops here, before anything is written)
    reconcile            reconciliation.job: the recompute, the diff, the ledger, the compliance table,
                         over the same archive rows (read once, persisted for both)
    check the outputs    the streaming windows of D, and the compliance partition the run just wrote
    publish              the Data Docs site rebuilt once for the three gates (gates.with_data_docs); the
                         report once, with the gates' results and their links; then the verdict:
                         unexplained diffs first, then a gate's critical failure

One JVM and one import of Great Expectations a run: as tasks of their own, the two gate steps paid a
Spark start and an import each, about 90 s of the 200 s a run took through Airflow (decision 0025).
A job that starts its own session imports Great Expectations while the JVM starts.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import date
from typing import TYPE_CHECKING

from stream_pipelines.core.config import PipelineConfig, add_config_arguments, config_or_report
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.driver.runtime import get_spark
from stream_pipelines.quality import gates
from stream_pipelines.reconciliation import events
from stream_pipelines.reconciliation.job import (
    APP,
    ReconciliationResult,
    UnexplainedDifferences,
    progress_printer,
    run_reconciliation,
    write_report,
)
from stream_pipelines.reconciliation.report import report_dir
from stream_pipelines.tables import maintenance, retention

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_nightly(
    config: PipelineConfig,
    day: date,
    *,
    spark: SparkSession | None = None,
    progress: Callable[[str], None] = lambda step: None,
) -> ReconciliationResult:
    """Gate, reconcile and gate day ``day``; raises RetentionPassed or QualityGateFailed (raw events)
    before writing anything, UnexplainedDifferences or QualityGateFailed (outputs) after the report."""
    maintenance.refuse_if_expired(config, day)
    if spark is None:
        # Great Expectations takes seconds to import, all of them Python's; the JVM's start is the
        # JVM's: side by side, on two cores, one hides the other.
        importing = threading.Thread(
            target=importlib.import_module, args=("great_expectations",), daemon=True
        )
        importing.start()
        spark = get_spark(config, APP)
        importing.join()

    # D's archive rows, read once: the raw gate's expectations and quarantine counts scan them, then
    # every stage of the reconciliation.
    archive = events.read_archive(spark, config, day).persist()
    try:
        progress("quality gate on the raw events (Great Expectations)")
        raw_events = gates.raw_events_gate(config, day, archive)
        if not raw_events.success:
            gates.enforce(*data_docs_or_why_not(config, [raw_events], progress))
        result = run_reconciliation(
            config,
            day,
            spark=spark,
            archive=archive,
            fail_on_unexplained=False,
            write_the_report=False,
            progress=progress,
        )
    finally:
        archive.unpersist()

    progress("quality gates on the streaming windows and the compliance table")
    checked = [raw_events, gates.streaming_outputs_gate(config, day, spark)]
    if "compliance" in result.outputs:  # written only when every diff is explained
        checked.append(gates.compliance_gate(config, day, spark))
    progress("rebuilding the Data Docs site")
    data_docs_or_why_not(config, checked, progress)

    result.quality_gates = [gate.as_json() for gate in checked]
    write_report(result, report_dir(config, result.day))
    if result.unexplained:
        raise UnexplainedDifferences(result)
    for gate in checked:
        gates.enforce(gate)
    return result


def data_docs_or_why_not(
    config: PipelineConfig, results: list[gates.GateResult], progress: Callable[[str], None]
) -> list[gates.GateResult]:
    """The Data Docs site rebuilt for ``results``; should that fail, each result says why and the run
    goes on: the site is a view of the gates' outcomes, which the report keeps whatever happens."""
    try:
        return gates.with_data_docs(config, results)
    except Exception as error:  # GX's and the stores' errors alike: none may cost the night its report
        why = f"{type(error).__name__}: {error}"
        progress(f"the Data Docs site was not rebuilt: {why}")
        for result in results:
            result.data_docs_error = why
        return results


# --------------------------------------------------------------------------- entry point


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--date", required=True, type=date.fromisoformat, help="event day D (YYYY-MM-DD)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """spark_apps/reconcile.py: the verdict as the last line on stderr, "reconcile: ...", which the
    Airflow task quotes when the job fails."""
    args = argument_parser().parse_args(argv)
    config = config_or_report(args, APP)
    if config is None:
        return ExitCode.BAD_CONFIG
    try:
        result = run_nightly(config, args.date, progress=progress_printer())
    except (UnexplainedDifferences, gates.QualityGateFailed, retention.RetentionPassed) as failure:
        print(f"{APP}: {failure}", file=sys.stderr)
        return ExitCode.FAILED
    passed = ", ".join(
        f"{gate['suite']} {gate['evaluated']} checks, {len(gate['warnings'])} warnings"
        for gate in result.quality_gates
    )
    print(
        f"{APP}: {result.day} {result.status}: {result.window_counts}; ledger {result.ledger_count}; "
        f"quality gates passed ({passed}); report {result.report_html}",
        file=sys.stderr,
    )
    return ExitCode.OK
