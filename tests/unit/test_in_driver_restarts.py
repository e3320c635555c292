"""The driver's side of in-driver recovery (``lifecycle.InDriverRestarts`` and ``_watch``), with queries
that stand in for Spark's: what happens when a stop is asked during the backoff, when the restarted
query's start raises, and when the lease becomes unsure while it starts. No JVM."""

from __future__ import annotations

from pathlib import Path

from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.driver.lifecycle import STOP_DURING_BACKOFF, InDriverRestarts, StopRequest, _watch
from stream_pipelines.driver.recovery import Recovery

APP = "raw_archive"


class Query:
    def __init__(self, name: str, error: str | None = None) -> None:
        self.name, self.error = name, error
        self.isActive = error is None
        self.stopped = False
        self.status = {"isTriggerActive": False}

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        self.isActive, self.stopped = False, True

    def awaitTermination(self, _timeout: float) -> None:
        return None


class Decider:
    """Stands in for QueryRecovery: restarts after ``delay_s`` until told otherwise."""

    def __init__(self, delay_s: float = 0.0, sure: list[bool] | None = None) -> None:
        self.delay_s = delay_s
        self.decisions: list[str] = []
        self.sure = sure if sure is not None else []

    def decide(self, query: str, error: str) -> Recovery:
        self.decisions.append(error)
        if len(self.decisions) > 3:
            return Recovery(False, "too many")
        return Recovery(True, "test", self.delay_s)

    def may_start(self) -> bool:
        return self.sure.pop(0) if self.sure else True


def test_a_stop_asked_during_the_backoff_drains_the_others_and_is_a_stop(tmp_path: Path):
    marker = tmp_path / "stop"
    stop = StopRequest(marker)
    failed, other = Query(f"{APP}.archive", "IOException: refused"), Query(f"{APP}.copy")
    marker.touch()  # asked while the failed query waits its backoff
    restarter = InDriverRestarts(APP, Decider(delay_s=30), lambda query: Query(query.name), stop)  # type: ignore[arg-type]
    assert restarter.recover([failed, other]) == STOP_DURING_BACKOFF

    marker.unlink()
    stop = StopRequest(marker)
    restarter = InDriverRestarts(APP, Decider(delay_s=1.0), lambda query: Query(query.name), stop)  # type: ignore[arg-type]
    queries = [Query(f"{APP}.archive", "IOException: refused"), Query(f"{APP}.copy")]
    marker.touch()
    # _watch sees the failure first (no stop yet when it looks), then the stop during the wait.
    ended = _watch(APP, queries, _StopAfterFirstLook(stop), "processing", 0.01, 5.0, restarter)  # type: ignore[arg-type]
    assert ended.code == ExitCode.OK and ended.status == "stopped", ended
    assert "raw_archive.archive had failed and restarts from its checkpoint at the next start" in ended.detail
    assert queries[1].stopped, "the other query was drained and stopped"


class _StopAfterFirstLook:
    """A StopRequest whose marker is seen only from its second look on: the stop lands in the backoff."""

    def __init__(self, stop: StopRequest) -> None:
        self._stop, self._looks = stop, 0
        self.lease_lost = None

    @property
    def reason(self) -> str | None:
        return self._stop.reason

    def requested(self) -> bool:
        self._looks += 1
        return self._looks > 1 and self._stop.requested()


def test_a_start_that_raises_is_decided_again_and_a_start_the_lease_outlived_is_stopped(tmp_path: Path):
    stop = StopRequest(tmp_path / "stop")
    attempts: list[Query] = []

    def restart(query: Query) -> Query:
        if not attempts:
            attempts.append(query)
            raise OSError("checkpoint unreadable: the store is still away")
        started = Query(query.name)
        attempts.append(started)
        return started

    decider = Decider()
    queries = [Query(f"{APP}.archive", "IOException: refused")]
    assert InDriverRestarts(APP, decider, restart, stop).recover(queries) is None  # type: ignore[arg-type]
    assert decider.decisions == [
        "IOException: refused",
        "its restart failed: OSError: checkpoint unreadable: the store is still away",
    ]
    assert queries[0] is attempts[-1] and queries[0].isActive

    # Sure before the start, unsure just after it: the started query is stopped again, the driver gives up.
    unsure = Decider(sure=[True, False])
    failed = Query(f"{APP}.archive", "IOException: refused")
    started: list[Query] = []
    gave_up = InDriverRestarts(
        APP,
        unsure,
        lambda query: started.append(Query(query.name)) or started[-1],
        stop,  # type: ignore[arg-type]
    ).recover([failed])
    assert gave_up == "the lease became unsure while the query started: stopped it again"
    assert started[0].stopped
