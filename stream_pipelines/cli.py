"""pipelinectl: the front door for what people do by hand.

    pipelinectl setup-jvm                      resolve the pinned JVM artifacts and build the drivers'
                                               class archive once (make setup does it)
    pipelinectl pack-env --out DIR|URL         pack the drivers' Python and Spark's jars for YARN, upload
                                               them once per version, and print the config that ships them
    pipelinectl setup-web-assets               fetch the files Data Docs load, once (make setup does it)
    pipelinectl broker start|stop|status       the local single-node KRaft broker (+ topics on start)
    pipelinectl topics                         create the configured topics (idempotent) on any cluster
    pipelinectl produce ...                    generate events to Kafka or to JSON-lines files
    pipelinectl run APP [--trigger ...]        run a streaming app through spark-submit
    pipelinectl stop APP                       ask a running app to stop gracefully (drain, commit, exit 0)
    pipelinectl status [APP]                   each app's state; with APP, every control record behind it
    pipelinectl checkpoint inspect APP         the resume point and health of an app's checkpoints
    pipelinectl checkpoint reset APP --from committed|offsets|time [--query Q] [--offsets JSON]
                [--time ISO] --confirm APP     a new checkpoint from those offsets (state is lost)
    pipelinectl control APP ACTION             stop|start|restart|pause|resume, as the pipeline_control DAG
    pipelinectl reconcile --date D             the nightly reconciliation for event day D, without Airflow
    pipelinectl outputs sweep [--dry-run]      remove output files the sinks' logs do not list (debris)
    pipelinectl metrics-targets --out FILE [--every SECONDS]
                                               Prometheus' file of the drivers' metrics endpoints (file_sd)
    pipelinectl init-conf DIR [--env NAME ...] [--force]
                                               write a deployment's starter conf dir (the config YAMLs
                                               and the sensor metadata) into DIR
    pipelinectl airflow-dags DIR [--force]     write the DAG files (one import each) into Airflow's
                                               DAGs folder DIR
    pipelinectl up | down                      the local stack (make up / down)
    pipelinectl demo                           the scripted end-to-end scenario (make demo)

Every command but init-conf and airflow-dags, which read no config, takes --env, --conf-dir and
--set KEY=VALUE like the apps do.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

from stream_pipelines.checkpoint.inspect import CheckpointError, inspect
from stream_pipelines.checkpoint.reset import RESET_FROM, parse_offsets_argument, parse_reset_time, reset
from stream_pipelines.control.app_report import app_line, app_records
from stream_pipelines.control.control_store import ControlStore, apply_action
from stream_pipelines.core import shipped, store
from stream_pipelines.core.config import Duration, PipelineConfig, add_config_arguments, config_or_report
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.core.registry import APP_NAMES, App
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.kafka.clients import KafkaAccessRefused
from stream_pipelines.kafka.topics import ensure_topics
from stream_pipelines.launching import elf, jvm, packed_env, yarn_driver
from stream_pipelines.launching.launch import StartRefused, prepare
from stream_pipelines.launching.submit import (
    compact_submit_command,
    reconcile_submit_command,
    submit_environment,
)
from stream_pipelines.observability.metrics_targets import publish
from stream_pipelines.quality import data_docs_assets
from stream_pipelines.tables import maintenance, retention

# Where pack-env builds the archives it uploads to a store (else the user's or the checkout's cache).
PACK_CACHE = "PIPELINE_PACK_CACHE"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return ExitCode.BAD_CONFIG
    if not args.loads_config:
        # Writes files a deployment starts from: no config to load (the conf dir may not exist yet).
        try:
            return int(args.handler(args) or 0)
        except shipped.ShippedFileError as error:
            print(f"pipelinectl: {error}", file=sys.stderr)
            return ExitCode.BAD_CONFIG
    config = config_or_report(args, "pipelinectl")
    if config is None:
        return ExitCode.BAD_CONFIG
    try:
        return int(args.handler(config, args) or 0)
    except UserFacingError as error:
        print(f"pipelinectl: {error}", file=sys.stderr)
        return 1
    except KafkaAccessRefused as error:
        print(f"pipelinectl: {error}", file=sys.stderr)
        return ExitCode.BAD_CONFIG


class UserFacingError(RuntimeError):
    pass


DEVELOPER_COMMANDS = "stream_pipelines.devtools.commands"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipelinectl", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    commands = parser.add_subparsers(title="commands")

    def command(name: str, handler, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        add_config_arguments(sub)
        sub.set_defaults(handler=handler, loads_config=True)
        return sub

    def file_writer(name: str, writer, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("folder", type=Path, metavar="DIR")
        sub.set_defaults(handler=writer, loads_config=False)
        return sub

    command(
        "setup-jvm",
        _setup_jvm,
        "check Java 17+, resolve the pinned JVM artifacts into the JVM cache (PIPELINE_JVM_CACHE; else a "
        "checkout's .cache/jvm or ~/.cache/stream-pipelines/jvm), build the drivers' class archive",
    )
    command(
        "setup-web-assets",
        _setup_web_assets,
        "fetch the pinned scripts and styles Data Docs load into the web cache (PIPELINE_WEB_ASSET_CACHE; "
        "else a checkout's .cache/web or ~/.cache/stream-pipelines/web), so they open offline",
    )

    pack_env = command(
        "pack-env",
        _pack_env,
        "pack this environment's Python (interpreter included) and Spark's jars into DIR, each named by "
        "its content's digest (built again only when that changes), and print the Spark settings that "
        "ship them with a YARN application, so that a NodeManager needs only a JVM",
    )
    pack_env.add_argument(
        "--out",
        required=True,
        metavar="DIR|URL",
        help="where the two archives go: a local folder, or a folder on the store every node reaches "
        "(hdfs://..., s3a://...), where each is uploaded once per version",
    )

    command("topics", _topics, "create the configured topics, or grow their partitions (idempotent)")

    run = command("run", _run, "run a streaming app through spark-submit (Ctrl-C stops it gracefully)")
    run.add_argument("app", choices=APP_NAMES)
    run.add_argument("--trigger", choices=["processing", "available-now"], default="processing")

    stop = command("stop", _stop, "ask a running app to stop after its current batch")
    stop.add_argument("app", choices=APP_NAMES)

    status = command(
        "status",
        _status,
        "each app's state; with APP, every control record behind it (desired state, lease, last exit, "
        "restarts, crash loop, watchdog) and where the records are kept",
    )
    status.add_argument("app", nargs="?", choices=APP_NAMES, default=None)

    checkpoint = command(
        "checkpoint",
        _checkpoint,
        "show an app's checkpoints and resume point, or reset them (asks to confirm)",
    )
    checkpoint_arguments(checkpoint)

    control = command("control", _control, "operator actions, as the pipeline_control DAG does them")
    control.add_argument("app", choices=APP_NAMES)
    control.add_argument("action", choices=["stop", "start", "restart", "pause", "resume"])
    control.add_argument("--reason", default="", help="recorded with the change")

    reconcile = command("reconcile", _reconcile, "reconcile event day D against the streams (spark-submit)")
    reconcile.add_argument("--date", required=True, type=date.fromisoformat, help="event day D (YYYY-MM-DD)")

    outputs = command(
        "outputs",
        _outputs,
        "remove the files in the streaming outputs that their sink's log does not list (debris of "
        "interrupted batches, which plain Parquet readers would count), once older than the grace period",
    )
    outputs.add_argument("action", choices=["sweep"])
    outputs.add_argument(
        "--grace", default=None, help="e.g. '6 hours' (default: maintenance.orphan_grace in the config)"
    )
    outputs.add_argument("--dry-run", action="store_true", help="report what would go; remove nothing")

    compact = command(
        "compact",
        _compact,
        "compact every file sink's closed days into big files (spark-submit), as the daily "
        "output_maintenance DAG does before its sweep; settings in the config's `compaction` section",
    )
    compact.add_argument("--dry-run", action="store_true", help="say what would be compacted; write nothing")

    maintain = command(
        "maintain",
        _maintain,
        "what the daily output_maintenance DAG does: the output sweep, then retention (batch log, reset "
        "copies, records); every dataset's retention is in the config's `retention` section",
    )
    maintain.add_argument("--dry-run", action="store_true", help="report what would go; remove nothing")

    metrics_targets = command(
        "metrics-targets",
        _metrics_targets,
        "write the drivers' metrics endpoints from their running records into the file Prometheus "
        "discovers them in (file_sd): once, or every SECONDS; rewritten whole, and only when they change",
    )
    metrics_targets.add_argument(
        "--out", required=True, type=Path, help="the file the Prometheus job stream_pipelines reads"
    )
    metrics_targets.add_argument(
        "--every", type=float, default=None, metavar="SECONDS", help="keep it current until stopped"
    )

    init_conf = file_writer(
        "init-conf",
        _init_conf,
        "write the conf dir a deployment starts from into DIR: each environment's <env>.yaml (and the "
        "ones it extends) and the sensor metadata, copies of the package's; then edit them and name DIR "
        "in PIPELINE_CONF_DIR or --conf-dir",
    )
    init_conf.add_argument(
        "--env",
        dest="envs",
        action="append",
        default=[],
        choices=shipped.starter_envs(),
        metavar="NAME",
        help=f"only this environment, with its base (repeatable; default: all of {shipped.starter_envs()})",
    )
    init_conf.add_argument("--force", action="store_true", help="replace files that exist already")

    airflow_dags = file_writer(
        "airflow-dags",
        _airflow_dags,
        "write the pipeline's DAG files into Airflow's DAGs folder DIR: one import each, of the DAGs in "
        "the installed package; rewrite them after an upgrade",
    )
    airflow_dags.add_argument(
        "--force", action="store_true", help="replace a file of the same name that this command did not write"
    )

    # The developer commands (local broker, generator, stack, demo) where the tooling is installed: the
    # package that ships to a cluster leaves stream_pipelines.devtools out.
    developer_commands = _developer_commands()
    if developer_commands is not None:
        developer_commands.register(command)
    return parser


def _developer_commands():
    """stream_pipelines.devtools.commands, or None where the tooling is not installed."""
    try:
        return importlib.import_module(DEVELOPER_COMMANDS)
    except ModuleNotFoundError as missing:
        if missing.name and DEVELOPER_COMMANDS.startswith(missing.name):
            return None
        raise


# --------------------------------------------------------------------------- handlers


def _setup_jvm(config: PipelineConfig, args: argparse.Namespace) -> int:
    # Here: the training replays events in their Spark schemas (pyspark), which no other command needs.
    from stream_pipelines.launching import class_archive_training

    try:
        print(f"java {jvm.check_java()} at {jvm.java_executable()}")
        for bundle, folder in jvm.resolve_all().items():
            print(f"{bundle}: {len(jvm.jars(bundle))} jars in {folder}")
        # Progress goes to stderr: `make setup` keeps this command's stdout quiet, not a minute's wait.
        archive = class_archive_training.ensure(config, say=lambda line: print(line, file=sys.stderr))
    except (jvm.JvmSetupError, class_archive_training.ClassArchiveError) as error:
        raise UserFacingError(str(error)) from None
    print(f"class archive: {archive}" if archive else "class archive: off (spark.class_archive)")
    return 0


def _setup_web_assets(config: PipelineConfig, args: argparse.Namespace) -> int:
    try:
        folders = data_docs_assets.fetch_all()
    except data_docs_assets.WebAssetError as error:
        raise UserFacingError(str(error)) from None
    print(f"{len(folders)} web asset packages in {data_docs_assets.cache_root()}")
    return 0


def _pack_env(config: PipelineConfig, args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        # Progress to stderr: stdout holds what a script reads, the archives and the settings.
        print(f"pack-env: {line}", file=sys.stderr, flush=True)

    destination = str(args.out)
    # Built on this disk (into the named folder, or a cache for a store), then uploaded once per name.
    remote = not store.is_local(destination)
    local = shipped.cache_dir(PACK_CACHE, "environments") if remote else Path(destination)
    try:
        environment = packed_env.build_environment_archive(local, say=say)
        jars = packed_env.build_jars_archive(local, say=say)
        urls = [_published(config, archive.path, destination, say) for archive in (environment, jars)]
        if remote:  # the local copies are a cache: the previous version's go
            for path in packed_env.remove_superseded(local, [environment.path, jars.path]):
                say(f"removed {path.name} from the build cache {local}")
    except (packed_env.PackError, elf.ElfError) as error:
        raise UserFacingError(str(error)) from None
    except OSError as error:
        raise UserFacingError(f"could not upload to {destination}: {error}") from None
    print(f"python environment: {environment.describe()}")
    print(f"spark jars: {jars.describe()}")
    print(f"the nodes must provide: {', '.join(environment.required_from_nodes)} (and a JVM)")
    print("the config that ships them with every YARN application (conf/<env>.yaml):")
    print(f"yarn:\n  python_environment: {urls[0]}\n  spark_jars_archive: {urls[1]}")
    return 0


def _published(config: PipelineConfig, archive: Path, destination: str, say: Callable[[str], None]) -> str:
    """The archive's URL under ``destination``, uploaded there unless a file of that name (its content's
    digest) already is."""
    if store.is_local(destination):
        return archive.resolve().as_uri()
    url = f"{destination.rstrip('/')}/{archive.name}"
    target = store.location(config.spark.extra_conf, url)
    if archive.name in store.entries(target.parent):
        say(f"{url} is on the store already")
    else:
        say(f"uploading {archive.name} ({archive.stat().st_size / 1e6:.0f} MB) to {url}")
        store.upload_file(archive, target)
    return url


def _topics(config: PipelineConfig, args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        for topic, outcome in ensure_topics(config).items():
            print(f"topic {topic}: {outcome}")
    except KafkaException as error:
        raise UserFacingError(
            f"could not manage topics on {config.kafka.bootstrap_servers}: {error}"
        ) from None
    return 0


def _run(config: PipelineConfig, args: argparse.Namespace) -> int:
    try:
        launch = prepare(config, declared_app(args.app), args.trigger, args.overrides)
    except StartRefused as refused:
        print(f"pipelinectl: {refused}", file=sys.stderr)
        return refused.code
    process = subprocess.Popen(launch.command, env=submit_environment(config=config), start_new_session=True)
    store = ControlStore(config)

    def request_stop(signum: int, _frame: object) -> None:
        # Ctrl-C or SIGTERM here means "stop after the batch in flight", never a kill mid-batch.
        if not store.stop_marker(args.app).exists():
            store.request_stop(args.app)
            print(f"\npipelinectl: stopping {args.app} after its current batch ...", file=sys.stderr)

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    submitted = process.wait()
    launch.submitted()
    if launch.yarn_tag is None or submitted != 0:
        return submitted
    return _follow_in_yarn(config, args.app, launch.yarn_tag)


def _follow_in_yarn(config: PipelineConfig, app: str, tag: str) -> int:
    """A driver in YARN: follow its application until it ends; its exit code, as YARN reports it."""

    rm = yarn_driver.resource_manager_of(config)
    application = yarn_driver.submitted(rm, tag)
    print(f"pipelinectl: {app} runs in {application.describe()}", file=sys.stderr, flush=True)
    final = yarn_driver.follow(rm, application, config.supervision.heartbeat_interval.seconds)
    problem = yarn_driver.remove_staging(config, final)
    if problem:
        print(f"pipelinectl: {app}: {problem}", file=sys.stderr)
    result = yarn_driver.outcome(config, app, final)
    print(f"pipelinectl: {app} ended: {result.text}", file=sys.stderr)
    if result.graceful:
        return 0
    return result.code if result.code is not None and result.code > 0 else 1


def _status(config: PipelineConfig, args: argparse.Namespace) -> int:
    if args.app is not None:
        print("\n".join(app_records(config, declared_app(args.app))))
        return 0
    # In a development checkout the local servers (broker, Airflow, monitoring) come first.
    developer_commands = _developer_commands()
    if developer_commands is not None:
        for line in developer_commands.local_servers_status(config):
            print(line)
    for name in APP_NAMES:
        print(app_line(config, declared_app(name)))
    return 0


def _stop(config: PipelineConfig, args: argparse.Namespace) -> int:
    print(apply_action(config, declared_app(args.app), "stop", by="pipelinectl", reason="pipelinectl stop"))
    return 0


def _checkpoint(config: PipelineConfig, args: argparse.Namespace) -> int:
    if args.action == "inspect":
        return checkpoint_inspect(config, declared_app(args.app), as_json=args.json)
    return checkpoint_reset(config, declared_app(args.app), args)


def checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """``checkpoint inspect|reset APP [...]`` arguments."""

    parser.add_argument("action", choices=["inspect", "reset"])
    parser.add_argument("app", choices=APP_NAMES)
    parser.add_argument("--json", action="store_true", help="inspect: print the report as JSON")
    parser.add_argument("--query", default="all", help="reset: one query (sink name), or all (default)")
    parser.add_argument(
        "--from",
        dest="reset_from",
        choices=RESET_FROM,
        default=None,
        help="reset: committed = after the last committed batch; offsets = --offsets; time = --time",
    )
    parser.add_argument(
        "--offsets",
        default=None,
        metavar="JSON",
        help='reset --from offsets: {"topic": {"partition": offset}} (-2 earliest, -1 latest), or @file',
    )
    parser.add_argument(
        "--time",
        dest="reset_time",
        default=None,
        metavar="ISO",
        help="reset --from time: e.g. 2026-01-01T00:00Z",
    )
    parser.add_argument("--confirm", default=None, metavar="APP", help="reset: the app's name, to confirm")


def checkpoint_inspect(config: PipelineConfig, app: App, *, as_json: bool = False) -> int:
    """Print the report; exits as the launcher's preflight would (CHECKPOINT_REFUSED when it refuses)."""
    import json

    report = inspect(config, app)
    print(json.dumps(report.to_dict(), indent=2) if as_json else report.describe())
    return ExitCode.OK if report.ok else ExitCode.CHECKPOINT_REFUSED


def checkpoint_reset(config: PipelineConfig, app: App, args: argparse.Namespace) -> int:
    """Run a reset from parsed arguments; asks for the confirmation on a terminal when it is not given."""

    confirm = args.confirm
    if confirm is None and sys.stdin is not None and sys.stdin.isatty():
        confirm = input(
            f"Resetting {app.name} ({args.query}) loses its state. Type {app.name} to confirm: "
        ).strip()
    try:
        if args.reset_from is None:
            raise CheckpointError("reset needs --from committed, --from offsets or --from time")
        result = reset(
            config,
            app,
            args.query,
            from_=args.reset_from,
            offsets=parse_offsets_argument(args.offsets) if args.offsets else None,
            timestamp_ms=parse_reset_time(args.reset_time) if args.reset_time else None,
            confirm=confirm,
        )
    except CheckpointError as error:
        print(f"pipelinectl: {error}", file=sys.stderr)
        return ExitCode.FAILED
    print(result.describe())
    return ExitCode.OK


def _control(config: PipelineConfig, args: argparse.Namespace) -> int:
    print(apply_action(config, declared_app(args.app), args.action, by="pipelinectl", reason=args.reason))
    return 0


def _reconcile(config: PipelineConfig, args: argparse.Namespace) -> int:
    command = reconcile_submit_command(config, args.date, args.overrides)
    return subprocess.run(command, env=submit_environment(config=config), check=False).returncode


def _compact(config: PipelineConfig, args: argparse.Namespace) -> int:
    command = compact_submit_command(config, dry_run=args.dry_run, overrides=args.overrides)
    return subprocess.run(command, env=submit_environment(config=config), check=False).returncode


def _outputs(config: PipelineConfig, args: argparse.Namespace) -> int:
    try:
        grace = Duration.parse(args.grace) if args.grace else config.maintenance.orphan_grace
    except ValueError as error:
        raise UserFacingError(f"--grace: {error}") from None
    return _report(maintenance.sweep_and_record(config, grace.seconds, dry_run=args.dry_run))


def _maintain(config: PipelineConfig, args: argparse.Namespace) -> int:
    for name, kept in retention.stated(config).items():
        print(f"retention {name}: {kept}")
    return _report(
        maintenance.maintain(config, config.maintenance.orphan_grace.seconds, dry_run=args.dry_run)
    )


def _metrics_targets(config: PipelineConfig, args: argparse.Namespace) -> int:
    if args.every is not None and args.every <= 0:
        raise UserFacingError(f"--every must be a positive number of seconds, got {args.every:g}")
    try:
        publish(config, args.out, lambda line: print(f"metrics-targets: {line}", flush=True), args.every)
    except OSError as error:
        raise UserFacingError(f"could not update {args.out}: {error}") from None
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the loop; the file is whole, as after every write
    return 0


def _init_conf(args: argparse.Namespace) -> int:
    folder = args.folder.absolute()
    written = shipped.write_starter_conf(folder, args.envs, force=args.force)
    print(f"wrote {len(written)} files into {folder}: {', '.join(path.name for path in written)}")
    envs = [path.stem for path in written if path.suffix == ".yaml"]
    print("next:")
    print(
        "  1. edit them for this deployment (docs/configuration.md): spark.master, kafka.bootstrap_servers "
        "and kafka.security, paths.data_root, the topics; secrets only as ${VARIABLE}s"
    )
    relative = shipped.relative_locations(folder, written)
    if relative:
        print(f"     relative locations resolve under the conf dir's parent, {folder.parent}:")
    for location in relative:
        print(f"       {location.file} {location.key}: {location.value} -> {location.resolved}")
        if location.missing:
            print(
                f"         no such file: set {location.key} to {folder / Path(location.value).name} "
                "(written here) or a store URL, or name the conf dir conf"
            )
    print(
        f"  2. point every command, app and Airflow worker at it: PIPELINE_CONF_DIR={folder} (or "
        f"--conf-dir {folder}) and PIPELINE_ENV=<one of {envs}> (or --env)"
    )
    checked = args.envs[0] if args.envs else "local" if "local" in envs else envs[0]
    print(f"  3. check it: pipelinectl status --conf-dir {folder} --env {checked}")
    return 0


def _airflow_dags(args: argparse.Namespace) -> int:
    folder = args.folder.absolute()
    outcome = shipped.write_dag_files(folder, force=args.force)
    for verb, paths in (("wrote", outcome.written), ("unchanged", outcome.unchanged)):
        if paths:
            print(f"{verb} {len(paths)} DAG files in {folder}: {', '.join(path.name for path in paths)}")
    for path in outcome.removed:
        print(f"removed {path}: its DAG module is no longer in the package")
    print(
        f"Airflow parses them where {folder} is its DAGs folder ([core] dags_folder) or a DAG bundle's "
        "path; its DAG processor and workers need this package installed beside Airflow, and the "
        "workers the conf dir (PIPELINE_CONF_DIR, PIPELINE_ENV)"
    )
    return 0


def _report(outcome: maintenance.SweepOutcome) -> int:
    for line in outcome.lines():
        print(line)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
