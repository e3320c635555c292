"""A PostgreSQL server on 127.0.0.1 for Airflow's metadata database: `make up`, `make chaos` and the tests
that run Airflow's servers. Debian's postgresql run as a plain process (``initdb``, ``pg_ctl``), no
container, as the broker and HDFS are.

The server listens on loopback TCP only (no Unix socket: a test's folder is too deep for one) and asks
every client for a password (scram-sha-256). Its state lives under ``home``: the port it keeps across
restarts and the password of the ``airflow`` role, which owns the ``airflow`` database (one per test when
a test asks for its own, see ``new_database``).

PostgreSQL refuses to run as root. Run as root (a container, CI), the server runs as the ``postgres``
system user, and its data folder moves to ``<temp>/pipeline-postgres-<id>`` where that user can reach it
(a folder under root's private ones cannot be); ``home`` records where.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from stream_pipelines.devtools.processes import alive, free_port

HOST = "127.0.0.1"
ROLE = DATABASE = "airflow"
SUPERUSER = "postgres"
# The system user the server runs as when this process is root (PostgreSQL refuses root).
SERVER_USER = "postgres"
STATE_FILE = "postgres.json"
# Two schedulers, the dag-processor, the triggerer and the api-server's workers each keep a pool of
# connections (SQLAlchemy's default: 5, overflow 10); the default 100 is too few for a stack and a test's
# second database beside it.
MAX_CONNECTIONS = 200
# See _ensure: how long a session may sit idle inside a transaction before the server ends it.
IDLE_IN_TRANSACTION_TIMEOUT = "60s"
SEARCHED_BIN_DIRS = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin")


class PostgresError(RuntimeError):
    """The local PostgreSQL could not be found, started, reached or stopped; the message says why."""


class MetadataUnavailable(PostgresError):
    """The metadata database did not answer (stopped, restarting, or refusing connections)."""


def server_programs() -> Path:
    """The folder of ``initdb``, ``pg_ctl`` and ``postgres``: on PATH, else Debian's versioned folder
    (the newest), else a source build's."""
    on_path = shutil.which("pg_ctl")
    if on_path and (Path(on_path).parent / "initdb").exists():
        return Path(on_path).parent
    for pattern in SEARCHED_BIN_DIRS:
        found = sorted(Path("/").glob(pattern.lstrip("/")), key=_version_key, reverse=True)
        for folder in found:
            if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
                return folder
    raise PostgresError(
        "PostgreSQL's server programs (initdb, pg_ctl) are not installed: on Debian or Ubuntu run "
        "`apt-get install postgresql` (`make test-deps` does), or put their folder on PATH"
    )


def _version_key(folder: Path) -> tuple[int, ...]:
    version = folder.parent.name
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _as_root() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class MetadataDatabase:
    """One database of a ``LocalPostgres``, as Airflow's metadata database."""

    server: LocalPostgres
    name: str

    def airflow_settings(self) -> dict[str, str]:
        """The variables that point Airflow's metadata database here: its sync engine and its async one
        (which would otherwise ask for asyncpg), both over psycopg 3."""
        return {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.server.url(self.name),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.server.url(self.name, asynchronous=True),
        }

    def query_one(self, query: str, parameters: tuple = ()) -> tuple | None:
        """The first row of a read-only query, as the ``airflow`` role."""
        import psycopg

        try:
            with self.server.connect(self.name, connect_timeout=5) as connection:
                return connection.execute(query, parameters).fetchone()
        except psycopg.OperationalError as error:
            raise MetadataUnavailable(f"the metadata database {self.name} did not answer: {error}") from error


@dataclass
class LocalPostgres:
    """One PostgreSQL server whose state lives under ``home``; ``start`` returns once it takes queries."""

    home: Path
    port: int = 0  # 0: the port kept in home's state, else a free one
    _state: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        saved = self._saved_state()
        # A data folder without this state is a cluster whose password nobody here knows (the state was
        # deleted, say by `make clean`, while the data lived on in the temp folder): start() replaces it.
        self._state_was_saved = bool(saved)
        self._state = {
            "port": self.port or saved.get("port") or free_port(HOST),
            "password": saved.get("password") or secrets.token_urlsafe(24),
            "data": saved.get("data") or str(self._data_folder()),
        }
        self.port = self._state["port"]

    @classmethod
    def attach(cls, home: Path) -> LocalPostgres | None:
        """The server whose state is under ``home``, if one was ever started there."""
        return cls(home) if (Path(home) / STATE_FILE).exists() else None

    # ------------------------------------------------------------------ addresses

    @property
    def data(self) -> Path:
        return Path(self._state["data"])

    @property
    def password(self) -> str:
        """The ``airflow`` role's password (and the superuser's): a secret of this server only."""
        return self._state["password"]

    def url(self, database: str = DATABASE, *, asynchronous: bool = False) -> str:
        """SQLAlchemy's URL of ``database`` as the ``airflow`` role, over psycopg 3 (its async flavour for
        Airflow's async engine, which would otherwise ask for asyncpg)."""
        driver = "psycopg_async" if asynchronous else "psycopg"
        return f"postgresql+{driver}://{ROLE}:{self._state['password']}@{HOST}:{self.port}/{database}"

    def database(self, name: str = DATABASE) -> MetadataDatabase:
        """The database ``name`` on this server (``start`` creates the default one, ``new_database``
        others)."""
        return MetadataDatabase(self, name)

    def describe(self) -> str:
        if not self.running():
            return f"postgres: stopped (would listen on {HOST}:{self.port})"
        state = "ready" if self.ready() else "starting (not answering yet)"
        return f"postgres: running, pid {self.pid()}, {state} on {HOST}:{self.port}"

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 60) -> LocalPostgres:
        """Create the cluster on first use, start the server (a no-op when it runs), and make sure the
        ``airflow`` role and database exist."""
        programs = server_programs()  # before anything is written: a missing install leaves nothing
        if not self._state_was_saved and (self.data / "PG_VERSION").exists():
            self.stop(mode="immediate")
            shutil.rmtree(self.data.parent if self.data.parent != self.home else self.data)
        self._save_state()
        self._state_was_saved = True
        if not (self.data / "PG_VERSION").exists():
            self._initdb(programs)
        self._write_settings()
        if not self.running():
            log = self.data.parent / "server.log"
            started = self._pg_ctl("start", "-w", "-t", str(int(timeout_s)), "-l", str(log))
            if started.returncode != 0:
                raise PostgresError(
                    f"PostgreSQL did not start on {HOST}:{self.port}: {started.stdout}{started.stderr}"
                    f"{_tail(log)}"
                )
        self._wait_ready(timeout_s)
        self._ensure(DATABASE)
        return self

    def stop(self, mode: str = "fast", timeout_s: float = 60) -> bool:
        """Stop the server (``fast``: roll back open transactions, close connections, shut down cleanly;
        ``immediate``: as a crash would, recovered at the next start). True when it was running."""
        if not self.running():
            return False
        stopped = self._pg_ctl("stop", "-m", mode, "-w", "-t", str(int(timeout_s)))
        if stopped.returncode != 0 and self.running():
            raise PostgresError(f"PostgreSQL did not stop: {stopped.stdout}{stopped.stderr}")
        return True

    def remove(self) -> None:
        """Stop the server and delete its data and state."""
        self.stop(mode="immediate")
        shutil.rmtree(self.data.parent if self.data.parent != self.home else self.data, ignore_errors=True)
        (self.home / STATE_FILE).unlink(missing_ok=True)
        (self.home / "server.log").unlink(missing_ok=True)

    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (FileNotFoundError, PermissionError, ValueError, IndexError):
            return None
        return pid if alive(pid) else None

    def running(self) -> bool:
        return self.pid() is not None

    def ready(self) -> bool:
        """The server answers a query as the ``airflow`` role."""
        try:
            with self.connect(DATABASE, connect_timeout=2) as connection:
                connection.execute("select 1")
            return True
        except Exception:  # any refusal (not up, in recovery, shutting down) means "not now"
            return False

    def new_database(self, name: str) -> MetadataDatabase:
        """Create the database ``name`` (owned by the ``airflow`` role) unless it exists: a test's own
        Airflow beside others on one server."""
        self._ensure(name)
        return self.database(name)

    # ------------------------------------------------------------------ internals

    def _saved_state(self) -> dict:
        try:
            return json.loads((self.home / STATE_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _save_state(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / STATE_FILE
        # Created 0600 (it holds the password), never readable by others even for a moment.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(self._state))

    def _data_folder(self) -> Path:
        if not _as_root():
            return self.home / "data"
        digest = hashlib.sha1(str(self.home).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"pipeline-postgres-{digest}" / "data"

    def _run_as_server_user(self, command: list[str], **kwargs) -> subprocess.CompletedProcess:
        if _as_root():
            as_user = [f"--reuid={SERVER_USER}", f"--regid={SERVER_USER}", "--init-groups"]
            command = ["setpriv", *as_user, *command]
        return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)

    def _give_to_server_user(self, path: Path) -> None:
        if _as_root():
            user = pwd.getpwnam(SERVER_USER)
            os.chown(path, user.pw_uid, user.pw_gid)

    def _initdb(self, programs: Path) -> None:
        if _as_root():
            try:
                pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise PostgresError(
                    f"PostgreSQL refuses to run as root, and there is no '{SERVER_USER}' system user to run "
                    "it as (Debian's postgresql package creates one): run as another user"
                ) from None
        folder = self.data.parent
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        self._give_to_server_user(folder)
        password_file = folder / "superuser-password"
        password_file.write_text(self._state["password"] + "\n")
        password_file.chmod(0o600)
        self._give_to_server_user(password_file)
        try:
            created = self._run_as_server_user(
                [
                    str(programs / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={password_file}",
                    "--auth-host=scram-sha-256",
                    "--auth-local=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ]
            )
        finally:
            password_file.unlink(missing_ok=True)
        if created.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)  # a half-made cluster would be taken for one
            output = created.stderr[-2000:] or created.stdout[-2000:]
            raise PostgresError(f"initdb failed in {self.data}: {output}")

    def _write_settings(self) -> None:
        """This server's own settings, rewritten at each start (the port is the state's)."""
        settings = self.data / "pipeline.conf"
        settings.write_text(
            f"listen_addresses = '{HOST}'\n"
            f"port = {self.port}\n"
            "unix_socket_directories = ''\n"
            f"max_connections = {MAX_CONNECTIONS}\n"
        )
        self._give_to_server_user(settings)
        main = self.data / "postgresql.conf"
        include = "include_if_exists = 'pipeline.conf'\n"
        if include not in main.read_text():
            with main.open("a") as handle:
                handle.write(include)

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess:
        return self._run_as_server_user([str(server_programs() / "pg_ctl"), "-D", str(self.data), *args])

    def connect(self, database: str, user: str = ROLE, connect_timeout: int = 5):
        """A psycopg connection (autocommit) to ``database``, as ``user`` with this server's password."""
        import psycopg

        return psycopg.connect(
            host=HOST,
            port=self.port,
            dbname=database,
            user=user,
            password=self._state["password"],
            connect_timeout=connect_timeout,
            autocommit=True,
        )

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                with self.connect("postgres", user=SUPERUSER, connect_timeout=2) as connection:
                    connection.execute("select 1")
                return
            except Exception as error:  # starting up or recovering: ask again
                last = error
                time.sleep(0.2)
        raise PostgresError(
            f"PostgreSQL on {HOST}:{self.port} did not answer within {timeout_s:.0f}s: {last}"
        )

    def _ensure(self, database: str) -> None:
        """The ``airflow`` role (with this server's password) and ``database``, owned by it."""
        from psycopg import sql

        with self.connect("postgres", user=SUPERUSER) as connection:
            # A failed statement is logged with its text, which may hold the password: not this session's.
            connection.execute("set log_min_error_statement = panic")
            if not connection.execute("select 1 from pg_roles where rolname = %s", (ROLE,)).fetchone():
                connection.execute(
                    sql.SQL("create role {} login password {}").format(
                        sql.Identifier(ROLE), sql.Literal(self._state["password"])
                    )
                )
            # A scheduler killed inside a transaction leaves it open while the executor workers it forked
            # hold its socket: its row locks (the scheduling critical section's, on slot_pool) would stop
            # every other scheduler from queueing a task. Such a session is ended after a minute.
            connection.execute(
                sql.SQL("alter role {} set idle_in_transaction_session_timeout = {}").format(
                    sql.Identifier(ROLE), sql.Literal(IDLE_IN_TRANSACTION_TIMEOUT)
                )
            )
            if not connection.execute("select 1 from pg_database where datname = %s", (database,)).fetchone():
                create = sql.SQL("create database {} owner {}")
                connection.execute(create.format(sql.Identifier(database), sql.Identifier(ROLE)))


def _tail(log: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return ""
