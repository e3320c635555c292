"""Each app's state and every control record it has, in words: what ``pipelinectl status`` prints.

On-call reads these on whichever host loads the config (an Airflow worker, a gateway), wherever the
records are kept (a local folder, HDFS, S3). The runbooks name this command and the lines it prints,
not a path: the records live under ``paths.control`` on the configured store, which the last line names.
"""

from __future__ import annotations

from stream_pipelines.control.control_store import ControlStore, app_status
from stream_pipelines.control.lease import Lease
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.registry import App


def app_line(config: PipelineConfig, app: App) -> str:
    """``app NAME: STATE - DETAIL``: one app at a glance (running, starting, crash-looping, ...)."""
    status = app_status(config, app.name)
    return f"app {app.name}: {status.state} - {status.detail}"


def app_records(config: PipelineConfig, app: App, now: float | None = None) -> list[str]:
    """The app's line, then each record that decides what its supervisor does next, one line each."""
    control = ControlStore(config)
    name = app.name
    lines = [app_line(config, app)]

    desired = control.desired(name)
    said = ", ".join(
        f"{key} {desired[key]}" for key in ("by", "at", "reason") if desired.get(key) not in (None, "")
    )
    lines.append(f"  desired:    {desired.get('desired')}" + (f" ({said})" if said else ""))

    lease = Lease(config, name)
    holder = lease.read()
    if holder is None:
        lines.append("  lease:      free (no driver holds the app)")
    else:
        live = "live" if lease.is_live(holder, now) else "stale: the next start takes it over"
        lines.append(f"  lease:      {holder.describe(now)}; {live}")
        for query, progress in sorted(holder.queries.items()):
            lines.append(
                f"    query {query}: batch {progress.get('batch_id')}, watermark {progress.get('watermark')}"
            )

    ended = control.last_exit(name)
    if ended is None:
        lines.append("  last exit:  none recorded")
    else:
        lines.append(f"  last exit:  {ended.get('status')} at {ended.get('at')}: {ended.get('detail')}")

    restarts = control.restarts(name)
    window = config.supervision.crash_loop_window
    lines.append(
        f"  restarts:   {restarts.total} in all ({restarts.in_driver} inside the driver), "
        f"{len(restarts.recent)} within the crash-loop window ({window}, limit "
        f"{config.supervision.max_restarts})"
    )
    last = restarts.describe_last()
    if last:
        lines.append(f"    last: {last}")

    looping = control.crash_loop(name)
    lines.append(
        f"  crash loop: tripped: {looping.get('reason')}" if looping else "  crash loop: not tripped"
    )

    watchdog = control.watchdog_record(name)
    if watchdog:
        lines.append(
            f"  watchdog:   {watchdog.get('total')} restart(s) of a stuck driver, the last at "
            f"{watchdog.get('at')}: {watchdog.get('last_reason')}"
        )
    else:
        lines.append("  watchdog:   never restarted it")
    lines.append(f"  records:    {control.root}/{name}.*")
    return lines
