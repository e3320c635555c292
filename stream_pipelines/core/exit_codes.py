"""How every app, job and command ends, as one set of numbers the supervisor and the CLI share."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    # A job's own failure (the nightly run's unexplained diffs, a refused CLI request).
    FAILED = 1
    # The configuration is invalid; the message names the key.
    BAD_CONFIG = 2
    # A streaming query failed; a restart from the checkpoint may well fix it.
    QUERY_FAILED = 3
    # The checkpoint preflight refused to start; a person has to act.
    CHECKPOINT_REFUSED = 4
    # Another driver owns the app's lease (or took it over from this one): not a crash.
    OWNED_ELSEWHERE = 5


# Exits that a restart cannot fix: the supervisor fails at once instead of looping, with this reason.
NOT_RETRIED: dict[int, str] = {
    ExitCode.BAD_CONFIG: "the configuration is invalid (see the message above)",
    ExitCode.CHECKPOINT_REFUSED: "the checkpoint preflight refused to start (see the message above)",
}
