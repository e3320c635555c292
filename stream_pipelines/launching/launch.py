"""One launch of a streaming app, for every launcher: ``pipelinectl run`` and the Airflow supervisor.

    start checks -> clear an earlier stop -> mark starting -> spark-submit (driver told: checked)

The start checks (the topics exist and the cluster lets this config in; the checkpoint may be started
from) run once per start. The launcher runs them before spark-submit, so a refused start costs no
JVM, and tells the driver so (``--checked``); a driver started any other way runs them itself
(``lifecycle.run_app``). A refusal carries the exit code a driver would have exited with, and
``exit_codes.NOT_RETRIED`` is the one place that says which refusals no restart can fix.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stream_pipelines.checkpoint.inspect import CheckpointError, preflight
from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.core.registry import App
from stream_pipelines.kafka.topics import REFUSALS, require_topics
from stream_pipelines.launching.driver_bundle import DriverBundle, DriverBundleError
from stream_pipelines.launching.submit import TriggerMode, submission
from stream_pipelines.launching.yarn_driver import new_launch_tag

# The driver argument that says its launcher ran the start checks.
CHECKED = "--checked"


class StartRefused(RuntimeError):
    """A start check refused: ``code`` is the driver's exit code for it, the message says what to fix."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def start_checks(config: PipelineConfig, app: App, log: Callable[[str], None]) -> None:
    """The topics the app reads and writes exist and the cluster lets this config in; the checkpoint may
    be started from. What they find goes to ``log`` (the resume point, a broker that did not answer);
    a refusal raises ``StartRefused``."""

    try:
        unchecked = require_topics(config, app)
    except REFUSALS as error:
        raise StartRefused(ExitCode.BAD_CONFIG, str(error)) from None
    if unchecked:
        log(f"{app.name}: {unchecked}")
    try:
        log(preflight(config, app).describe())
    except CheckpointError as error:
        raise StartRefused(
            ExitCode.CHECKPOINT_REFUSED, f"checkpoint preflight refused to start {app.name}:\n{error}"
        ) from None


@dataclass(frozen=True)
class Launch:
    """A checked start: the whole spark-submit line (``pipelinectl run``), and its parts for Airflow's
    operator, which builds the line itself."""

    command: list[str]
    spark_conf: dict[str, str]
    application_args: list[str]
    # On YARN: the tag of this launch's application (yarn_driver.submitted finds it by this tag).
    yarn_tag: str | None = None
    # With drivers in YARN: what ships the config to the driver; discard it once spark-submit returned.
    bundle: DriverBundle | None = None

    def submitted(self) -> None:
        """spark-submit has returned: whatever it had to upload is uploaded."""
        if self.bundle is not None:
            self.bundle.discard()


def prepare(
    config: PipelineConfig,
    app: App,
    trigger: TriggerMode,
    overrides: Sequence[str] = (),
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Launch:
    """The start checks, then the control store's bookkeeping of a start; raises ``StartRefused``."""
    start_checks(config, app, log)
    tag = new_launch_tag() if config.on_yarn else None
    try:
        submit = submission(config, app.name, ["--trigger", trigger], overrides, app=app.name, launch_tag=tag)
    except DriverBundleError as error:  # a conf dir too large to ship to a driver in YARN
        raise StartRefused(ExitCode.BAD_CONFIG, str(error)) from None
    store = ControlStore(config)
    # A marker left from an earlier stop would end this run at once.
    if store.clear_stop(app.name):
        log(f"{app.name}: removed a stop marker left by an earlier stop")
    store.mark_starting(app.name)
    return Launch(
        command=[*submit.command(), CHECKED],
        spark_conf=submit.conf,
        application_args=[*submit.args, CHECKED],
        yarn_tag=tag,
        bundle=submit.bundle,
    )
