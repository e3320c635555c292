"""Great Expectations (1.x) gates around the nightly reconciliation.

Suites: the raw events of day D (the archive rows the job reads), the streaming tumbling output for D,
and the compliance table's D partition. Policy: an expectation with severity "critical" failing fails
the gate (QualityGateFailed); a "warning" is reported and does not. Quarantine counts by reason come
with the raw gate. Validations run through a file Data Context under ``paths.gx`` with a Spark
dataframe data source on the caller's session.

The Data Docs site is rebuilt once per nightly run, after its gates (``with_data_docs``), from the
validation results of the last ``retention.data_docs``: a rebuild renders every stored result, so
unpruned it would grow by three pages a night and take longer every night. The reports keep every
gate's outcome for as long as they are kept. The site loads its scripts and styles from vendored
copies (data_docs_assets), so it opens offline.

Great Expectations' file context needs a local disk. When ``paths.gx`` is on an object store, the
context lives in the local scratch folder and each rebuilt site replaces the one in ``paths.gx``, where
the gate results link to it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.core import registry, store
from stream_pipelines.inputs.parsing import CLICK, IMPRESSION, SENSOR_READING
from stream_pipelines.quality.data_docs_assets import localize
from stream_pipelines.reconciliation import events
from stream_pipelines.tables.day_reader import read_dataset_day

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stream_pipelines.core.config import Duration, PipelineConfig

RAW_EVENTS, STREAMING_OUTPUTS, COMPLIANCE = "raw_events", "streaming_outputs", "compliance_table"
CRITICAL, WARNING = "critical", "warning"
DATASOURCE = "pipeline_spark"
# The Data Docs site of a file context (GX's default name for it), and its folder of one page per
# validation result, the part that grows night after night.
LOCAL_SITE = "local_site"
VALIDATION_PAGES = "validations"
# Aggregates are floating point: min <= avg <= max is checked with this slack.
FLOAT_SLACK = 1e-9


class QualityGateFailed(RuntimeError):
    def __init__(self, result: GateResult) -> None:
        self.result = result
        super().__init__(
            f"quality gate {result.suite} failed on critical expectations: "
            f"{'; '.join(result.critical_failures)} (Data Docs: {result.data_docs})"
        )


@dataclass
class GateResult:
    suite: str
    day: str
    success: bool
    evaluated: int
    critical_failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rows: int = 0
    data_docs: str | None = None
    # Why the Data Docs site was not rebuilt (the gate's outcome stands; the site is only a view of it).
    data_docs_error: str | None = None
    quarantine: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- suites


def raw_events_expectations(day: date, cutoff: datetime) -> list:
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectTableColumnsToMatchSet(
            column_set=list(registry.ARCHIVE.column_names), exact_match=True, severity=CRITICAL
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="topic", severity=CRITICAL),
        gxe.ExpectColumnValuesToNotBeNull(column="kafka_timestamp", severity=CRITICAL),
        gxe.ExpectColumnValuesToNotBeNull(column="archived_at", severity=CRITICAL),
        # Tombstones and empty messages are legal Kafka, but none of our producers send them.
        gxe.ExpectColumnValuesToNotBeNull(column="value", severity=WARNING),
        gxe.ExpectColumnValuesToBeBetween(
            column="kafka_timestamp",
            min_value=datetime.combine(day - timedelta(days=1), datetime.min.time()),
            max_value=cutoff,
            severity=CRITICAL,
        ),
    ]


def window_expectations() -> list:
    """What any table of tumbling-window aggregates must satisfy (streaming output, compliance)."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["window_start", "sensor_id"], severity=CRITICAL),
        gxe.ExpectColumnValuesToNotBeNull(column="sensor_id", severity=CRITICAL),
        gxe.ExpectColumnValuesToNotBeNull(column="window_start", severity=CRITICAL),
        gxe.ExpectColumnValuesToBeBetween(column="reading_count", min_value=1, severity=CRITICAL),
        gxe.ExpectColumnValuesToBeBetween(column="avg_minus_min", min_value=-FLOAT_SLACK, severity=CRITICAL),
        gxe.ExpectColumnValuesToBeBetween(column="max_minus_avg", min_value=-FLOAT_SLACK, severity=CRITICAL),
        # Unknown sensors are kept and flagged by design; many of them deserve a look, not a stop.
        gxe.ExpectColumnValuesToBeInSet(
            column="known_sensor", value_set=[True], mostly=0.99, severity=WARNING
        ),
    ]


def compliance_expectations(day: date) -> list:
    import great_expectations.expectations as gxe

    return [
        *window_expectations(),
        gxe.ExpectColumnValuesToBeInSet(column="event_date", value_set=[day.isoformat()], severity=CRITICAL),
    ]


def with_range_columns(windows: DataFrame) -> DataFrame:
    """The differences the min <= avg <= max expectations look at."""
    from pyspark.sql import functions as F

    return windows.withColumn(
        "avg_minus_min", F.col("avg_temperature") - F.col("min_temperature")
    ).withColumn("max_minus_avg", F.col("max_temperature") - F.col("avg_temperature"))


# --------------------------------------------------------------------------- running


def validate(
    config: PipelineConfig, frame: DataFrame, suite_name: str, day: date, expectations: list
) -> GateResult:
    """Run one suite over a Spark DataFrame through a Checkpoint, which stores its result (Data Docs
    are rebuilt once for a run's gates: ``with_data_docs``)."""
    import great_expectations as gx

    context = gx_context(config)
    source = context.data_sources.add_or_update_spark(name=DATASOURCE)
    asset = next((a for a in source.assets if a.name == suite_name), None) or source.add_dataframe_asset(
        name=suite_name
    )
    batch_definition = next(
        (b for b in asset.batch_definitions if b.name == "whole"), None
    ) or asset.add_batch_definition_whole_dataframe("whole")
    suite = context.suites.add_or_update(gx.ExpectationSuite(name=suite_name, expectations=expectations))
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=suite_name, data=batch_definition, suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(name=suite_name, validation_definitions=[definition], actions=[])
    )
    outcome = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=None)
    critical, warnings, evaluated = [], [], 0
    for suite_result in outcome.run_results.values():
        for result in suite_result.results:
            evaluated += 1
            if result.success:
                continue
            configuration = result.expectation_config
            described = f"{configuration.type}({_describe_kwargs(configuration.kwargs)})"
            unexpected = (result.result or {}).get("unexpected_count")
            if unexpected is not None:
                described += f": {unexpected} unexpected"
            if result.exception_info and result.exception_info.get("raised_exception"):
                described += f": error {result.exception_info.get('exception_message')}"
            severity = str(getattr(configuration, "severity", CRITICAL)).lower()
            (critical if severity.endswith(CRITICAL) else warnings).append(described)
    return GateResult(
        suite=suite_name,
        day=day.isoformat(),
        success=not critical,
        evaluated=evaluated,
        critical_failures=critical,
        warnings=warnings,
    )


def with_data_docs(
    config: PipelineConfig, results: list[GateResult], now: datetime | None = None
) -> list[GateResult]:
    """Rebuild the Data Docs site once, from the validation results younger than
    ``retention.data_docs``, publish it, and link each of ``results`` to its index."""
    context = gx_context(config)
    prune_validation_results(context, config.retention.data_docs, now or datetime.now(UTC))
    project_root = gx_project_root(config)
    site = data_docs_site(context)
    built_at = time.time() - 1  # a second's slack for the file system's clock
    context.build_data_docs(site_names=[LOCAL_SITE])
    # The rebuild rewrote the page of every kept result, in place (the site stays readable meanwhile);
    # the pages of pruned results are the ones it left older than that.
    pages = site / VALIDATION_PAGES
    for name, (_size, modified) in store.tree_entries(pages).items():
        if modified < built_at:
            store.remove_file(pages / name)
    index = _docs_index(context)
    if index is None:
        return results
    localize(site)
    link = publish_data_docs(config, project_root, site) or index
    for result in results:
        result.data_docs = link
    return results


def prune_validation_results(context: Any, kept_for: Duration | None, now: datetime) -> int:
    """Remove the stored validation results run before ``now - kept_for``; how many were removed."""
    if kept_for is None:
        return 0
    oldest = now - timedelta(seconds=kept_for.seconds)
    store_ = context.validation_results_store
    removed = 0
    for key in store_.list_keys():
        run_time = key.run_id.run_time
        if run_time is not None and run_time.astimezone(UTC) < oldest:
            store_.remove_key(key)
            removed += 1
    return removed


def data_docs_site(context: Any) -> Path:
    """The local folder of the context's Data Docs site (GX's default place for it)."""
    return Path(context.root_directory) / "uncommitted" / "data_docs" / LOCAL_SITE


def gx_context(config: PipelineConfig) -> Any:
    import great_expectations as gx

    return gx.get_context(mode="file", project_root_dir=str(gx_project_root(config)))


def gx_project_root(config: PipelineConfig) -> Path:
    """The local folder of the Great Expectations project: ``paths.gx`` itself when local, else the
    local scratch folder (GX's file context cannot live on an object store)."""
    home = config.data_path("gx")
    if store.is_local(home):
        return Path(home.removeprefix("file://"))
    scratch = config.scratch_dir("gx")
    if scratch is None:
        raise store.StoreError(
            f"paths.gx is {home}, so Great Expectations needs a local working folder, but paths.scratch "
            f"({config.data_path('scratch')}) is not local; set paths.scratch to a local absolute path"
        )
    return Path(scratch)


def publish_data_docs(config: PipelineConfig, project_root: Path, site: Path) -> str | None:
    """Bring the Data Docs site in ``paths.gx`` to the rebuilt one when that is on an object store (the
    new pages first, then the pruned ones removed, so a reader never finds it missing); returns the URL
    of its index there (None when ``paths.gx`` is local: the site is already in place)."""
    home = config.data_path("gx")
    if store.is_local(home):
        return None
    url = f"{home.rstrip('/')}/{site.relative_to(project_root).as_posix()}"
    target = store.location(config.spark.extra_conf, url)
    store.copy_tree(site, target)
    for stale in set(store.files_under(target)) - set(store.files_under(site)):
        store.remove_file(target / stale)
    return f"{url}/index.html"


def _describe_kwargs(kwargs: dict[str, Any]) -> str:
    shown = {k: v for k, v in kwargs.items() if k not in ("batch_id", "result_format")}
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def _docs_index(context: Any) -> str | None:
    for site in context.get_docs_sites_urls():
        url = site.get("site_url")
        if url:
            return url
    return None


def raw_events_gate(config: PipelineConfig, day: date, archive: DataFrame) -> GateResult:
    """The raw-events suite over ``archive``: D's archive rows as the reconciliation reads them
    (``events.read_archive``), with the quarantine counts by reason."""
    topics = config.kafka.topics
    cutoff = registry.arrival_cutoff(day, config.reconciliation.late_horizon)
    result = validate(config, archive, RAW_EVENTS, day, raw_events_expectations(day, cutoff))
    result.rows = archive.count()
    result.quarantine = events.quarantine_counts(
        archive,
        ((topics.sensors, SENSOR_READING), (topics.impressions, IMPRESSION), (topics.clicks, CLICK)),
        config,
    )
    return result


def streaming_outputs_gate(config: PipelineConfig, day: date, spark: SparkSession) -> GateResult:
    of_day = with_range_columns(read_dataset_day(spark, config, registry.SENSOR_WINDOWS, day))
    result = validate(config, of_day, STREAMING_OUTPUTS, day, window_expectations())
    result.rows = of_day.count()
    return result


def compliance_gate(config: PipelineConfig, day: date, spark: SparkSession) -> GateResult:
    of_day = with_range_columns(read_dataset_day(spark, config, registry.COMPLIANCE_WINDOWS, day))
    result = validate(config, of_day, COMPLIANCE, day, compliance_expectations(day))
    result.rows = of_day.count()
    return result


def enforce(result: GateResult) -> GateResult:
    """Raise on a critical failure; warnings pass through (they are in the result and the report)."""
    if not result.success:
        raise QualityGateFailed(result)
    return result
