"""The local PostgreSQL that `make up`, `make chaos` and the Airflow tests keep Airflow's metadata in: a
real server on 127.0.0.1 (Debian's postgresql, so this is the integration tier), started, stopped and
started again on its port, with its password."""

from __future__ import annotations

import psycopg
import pytest

from stream_pipelines.devtools import postgres
from stream_pipelines.devtools.postgres import DATABASE, HOST, ROLE, LocalPostgres, PostgresError


@pytest.fixture
def server(tmp_path):
    running = LocalPostgres(tmp_path / "postgres").start()
    yield running
    running.remove()


def test_it_takes_queries_as_airflow_over_loopback_with_its_password_only(server):
    database = server.database()
    assert database.query_one("select current_user, current_database()") == (ROLE, DATABASE)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(host=HOST, port=server.port, dbname=DATABASE, user=ROLE, password="wrong").close()
    settings = database.airflow_settings()
    assert settings["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://airflow:")
    assert settings["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"].startswith("postgresql+psycopg_async://")
    assert not list(server.data.parent.glob(".s.PGSQL.*")), "no Unix socket: loopback TCP only"


def test_a_restart_keeps_its_port_password_and_data(server, tmp_path):
    server.new_database("second")
    with server.connect("second") as connection:
        connection.execute("create table kept (n int)")
    port, pid = server.port, server.pid()
    assert server.stop() is True
    assert not server.running()
    with pytest.raises(postgres.MetadataUnavailable, match="did not answer"):
        server.database().query_one("select 1")
    again = LocalPostgres.attach(tmp_path / "postgres").start()
    assert again.port == port and again.pid() != pid
    assert again.database("second").query_one("select count(*) from kept") == (0,)
    assert server.stop() is True and server.stop() is False


def test_remove_leaves_nothing_behind(tmp_path):
    server = LocalPostgres(tmp_path / "postgres").start()
    data = server.data
    server.remove()
    assert not server.running() and not data.exists()
    assert LocalPostgres.attach(tmp_path / "postgres") is None


def test_without_the_server_programs_the_error_says_what_to_install_and_nothing_is_left(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(postgres, "SEARCHED_BIN_DIRS", (str(tmp_path / "none" / "bin"),))
    server = LocalPostgres(tmp_path / "postgres")
    with pytest.raises(PostgresError, match="apt-get install postgresql"):
        server.start()
    assert not server.data.parent.exists() and not (tmp_path / "postgres").exists()


def test_a_cluster_whose_state_was_deleted_is_replaced_not_refused(tmp_path):
    """`make clean` deletes the state (port, password) while, run as root, the data lives on in the temp
    folder: the next start must not meet a cluster whose password it does not know."""
    server = LocalPostgres(tmp_path / "postgres").start()
    (tmp_path / "postgres" / postgres.STATE_FILE).unlink()
    again = LocalPostgres(tmp_path / "postgres").start()
    try:
        assert again.database().query_one("select current_user") == (ROLE,)
        assert again.password != server.password
        with pytest.raises(postgres.MetadataUnavailable):  # the old port and password: gone
            server.database().query_one("select 1")
    finally:
        again.remove()


def test_the_state_holding_the_password_is_readable_by_its_owner_only(server, tmp_path):
    mode = (tmp_path / "postgres" / postgres.STATE_FILE).stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)


def test_a_session_left_idle_inside_a_transaction_loses_its_locks(monkeypatch, tmp_path):
    """A scheduler killed inside a transaction leaves it open (its forked workers hold the socket); its
    row lock would stop every other scheduler. The airflow role's sessions end when idle in a transaction:
    a minute as shipped, two seconds here so that the other session's wait shows it."""
    monkeypatch.setattr(postgres, "IDLE_IN_TRANSACTION_TIMEOUT", "2s")
    server = LocalPostgres(tmp_path / "postgres").start()
    try:
        with server.connect(DATABASE) as setup:
            setup.execute("create table slot_pool (id int primary key)")
            setup.execute("insert into slot_pool values (1)")
        stuck = server.connect(DATABASE)
        stuck.autocommit = False
        stuck.execute("select * from slot_pool where id = 1 for update")  # then silence, as if killed
        with server.connect(DATABASE) as other:
            other.execute("set lock_timeout = '20s'")
            assert other.execute("select id from slot_pool where id = 1 for update").fetchone() == (1,)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            stuck.execute("select 1")  # the server ended the idle session
    finally:
        server.remove()


def test_the_shipped_idle_in_transaction_limit_is_a_minute(server):
    assert server.database().query_one("show idle_in_transaction_session_timeout") == ("1min",)
