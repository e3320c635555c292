"""`pipelinectl up` and `down` when Airflow's metadata database cannot start or stop: one line naming it,
not a traceback."""

from __future__ import annotations

import argparse

import pytest

from stream_pipelines.cli import UserFacingError
from stream_pipelines.devtools import commands, stack
from stream_pipelines.devtools.postgres import PostgresError


@pytest.mark.parametrize("command, step", [(commands._up, "up"), (commands._down, "down")])
def test_a_metadata_database_that_fails_is_one_line_naming_it(monkeypatch, command, step):
    def fail(config):
        raise PostgresError("PostgreSQL did not start on 127.0.0.1:5999: its data folder is locked")

    monkeypatch.setattr(stack, step, fail)
    with pytest.raises(UserFacingError) as raised:
        command(None, argparse.Namespace())
    assert str(raised.value) == (
        "Airflow's metadata database: PostgreSQL did not start on 127.0.0.1:5999: its data folder is locked"
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
