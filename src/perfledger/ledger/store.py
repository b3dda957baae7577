"""The experiments ledger: one SQLite file, safe for concurrent writers and killed writers.

Every write is one ``BEGIN IMMEDIATE`` transaction in WAL mode with a busy timeout: two
``perfledger analyze`` processes finishing at once queue for the write lock instead of failing,
and a writer killed mid-transaction leaves the file as it was before that transaction (SQLite
rolls the journal back on the next open).

Table ``runs`` (schema version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``):
    id, registered_ns, profile_created_ns, label, note, kind (analyze / record), command (JSON
    list), options (JSON object), git_commit, git_branch, git_dirty, device, source_kind,
    profile_path, ranks, step_count, step_median_ms, step_p90_ms, utilization_pct,
    accounting (JSON: category -> share of the step in %), top_finding, top_finding_title,
    top_finding_ms, workload (JSON: program, vendor, device and op type digests, see
    :mod:`perfledger.analysis.diff.workload`), batch_size (samples per step read from the
    trace); the last two added in version 3, NULL in older rows.

A ledger of an older schema is brought up to date when first opened for writing; one that
cannot be written (a read-only copy) is still read, its missing columns as NULL.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from perfledger.errors import PerfledgerError
from perfledger.ledger.locate import LEDGER_DIR, LEDGER_FILE, find_ledger

__all__ = ["LEDGER_DIR", "LEDGER_FILE"]

SCHEMA_VERSION: Final = 3
BUSY_TIMEOUT_S: Final = 60.0
# SQLite answers a switch of journal mode that another connection's lock stands in the way
# of at once, without its busy handler: the switch is tried again this often meanwhile.
_WAL_RETRY_S: Final = 0.05

_SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        registered_ns INTEGER NOT NULL,
        profile_created_ns INTEGER,
        label TEXT NOT NULL,
        note TEXT,
        kind TEXT,
        command TEXT,
        options TEXT,
        git_commit TEXT,
        git_branch TEXT,
        git_dirty INTEGER,
        device TEXT,
        source_kind TEXT,
        profile_path TEXT,
        ranks INTEGER,
        step_count INTEGER,
        step_median_ms REAL,
        step_p90_ms REAL,
        utilization_pct REAL,
        accounting TEXT,
        top_finding TEXT,
        top_finding_title TEXT,
        top_finding_ms REAL,
        workload TEXT,
        batch_size INTEGER
    )
    """,
    "CREATE INDEX IF NOT EXISTS runs_registered ON runs (registered_ns)",
)
# Columns added after version 1: (name, SQL type), added to older tables by ALTER TABLE.
_ADDED_COLUMNS: Final = (("workload", "TEXT"), ("batch_size", "INTEGER"))


class LedgerUnavailable(Exception):
    """The ledger file cannot be opened or written (permissions, read-only disk, locked)."""


class LedgerCorrupt(PerfledgerError):
    """The file exists but is not a perfledger ledger (not SQLite, damaged, or foreign)."""


@dataclass(frozen=True)
class RunRecord:
    """One registered run (``id`` is 0 until the ledger assigns it)."""

    label: str
    registered_ns: int
    id: int = 0
    profile_created_ns: int | None = None
    note: str | None = None
    kind: str | None = None
    command: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    git_commit: str | None = None
    git_branch: str | None = None
    git_dirty: bool | None = None
    device: str | None = None
    source_kind: str | None = None
    profile_path: str | None = None
    ranks: int | None = None
    step_count: int | None = None
    step_median_ms: float | None = None
    step_p90_ms: float | None = None
    utilization_pct: float | None = None
    accounting: Mapping[str, float] = field(default_factory=dict)
    top_finding: str | None = None
    top_finding_title: str | None = None
    top_finding_ms: float | None = None
    workload: Mapping[str, Any] | None = None
    batch_size: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields."""
        document = asdict(self)
        document["command"] = list(self.command)
        document["options"] = dict(self.options)
        document["accounting"] = dict(self.accounting)
        document["workload"] = None if self.workload is None else dict(self.workload)
        return document


_COLUMNS: Final = tuple(f.name for f in fields(RunRecord))
_JSON_COLUMNS: Final = frozenset({"command", "options", "accounting", "workload"})


def default_ledger_path(cwd: Path | None = None) -> Path:
    """The project's ledger for a command run in ``cwd``
    (:func:`perfledger.ledger.locate.find_ledger`)."""
    return find_ledger(cwd=cwd).path


@contextmanager
def connect(
    path: Path, *, create: bool = True, read_only: bool = False
) -> Iterator[sqlite3.Connection]:
    """An open ledger: created (with its folder) when missing and ``create`` is set; with
    ``read_only`` opened for reading only, as it is (an older schema is not upgraded).

    Raises:
        LedgerUnavailable: the file cannot be opened or written.
        LedgerCorrupt: the file is not a ledger.
        PerfledgerError: no ledger at ``path`` and ``create`` is not set.
    """
    if not path.exists() and (not create or read_only):
        raise PerfledgerError(f"{path}: no ledger here (analyse or record a run first)")
    try:
        if read_only:
            target = f"{path.resolve().as_uri()}?mode=ro"
            connection = sqlite3.connect(
                target, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=True
            )
        else:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.OperationalError) as error:
        raise LedgerUnavailable(f"{path}: {error}") from error
    try:
        _prepare(connection, path, upgrade=not read_only)
        yield connection
    finally:
        connection.close()


def _prepare(connection: sqlite3.Connection, path: Path, *, upgrade: bool = True) -> None:
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise LedgerCorrupt(
                f"{path}: ledger schema version {version} is newer than this perfledger "
                f"({SCHEMA_VERSION}); upgrade perfledger"
            )
        tables = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if tables and "runs" not in tables:
            raise LedgerCorrupt(f"{path}: an SQLite file, but not a perfledger ledger")
        if version < SCHEMA_VERSION and upgrade:
            try:
                _upgrade(connection)
            except sqlite3.OperationalError as error:
                if not tables or "readonly" not in str(error):
                    raise
                # A ledger that cannot be written is still read, as it is.
    except LedgerCorrupt:
        raise
    except sqlite3.OperationalError as error:
        if "not a database" in str(error) or "malformed" in str(error):
            raise LedgerCorrupt(f"{path}: not a perfledger ledger ({error})") from error
        raise LedgerUnavailable(f"{path}: {error}") from error
    except sqlite3.DatabaseError as error:
        raise LedgerCorrupt(f"{path}: not a perfledger ledger ({error})") from error


def _upgrade(connection: sqlite3.Connection) -> None:
    _write_ahead_log(connection)
    with transaction(connection):
        for statement in _SCHEMA:
            connection.execute(statement)
        # Checked inside the transaction: another process may have upgraded the file first.
        present = _present_columns(connection)
        for name, kind in _ADDED_COLUMNS:
            if name not in present:
                connection.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _write_ahead_log(connection: sqlite3.Connection) -> None:
    """WAL mode, which lets readers run while one process writes; set once, kept in the file.

    Two processes making the ledger at once each hold a lock the other's switch waits for,
    and SQLite refuses the switch at once rather than waiting: it is tried again until the
    busy timeout. A ledger left in its default mode still serialises its writers (each
    write takes the lock at once, :func:`transaction`); only its readers wait for them.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            if time.monotonic() >= deadline:
                return
        time.sleep(_WAL_RETRY_S)


def _present_columns(connection: sqlite3.Connection) -> set[str]:
    return {str(row[1]) for row in connection.execute("PRAGMA table_info(runs)")}


@contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """One write transaction that takes the write lock at once (waiting up to the timeout)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _to_row(record: RunRecord) -> dict[str, Any]:
    row = {}
    for name in _COLUMNS:
        value = getattr(record, name)
        if name == "workload" and value is None:
            pass
        elif name in _JSON_COLUMNS:
            value = json.dumps(list(value) if name == "command" else dict(value), sort_keys=True)
        elif isinstance(value, bool):
            value = int(value)
        row[name] = value
    return row


def _from_row(row: sqlite3.Row | Sequence[Any], names: Sequence[str]) -> RunRecord:
    values: dict[str, Any] = {}
    for name, value in zip(names, row, strict=True):
        if name in _JSON_COLUMNS:
            decoded = json.loads(value) if value else None
            if name == "command":
                value = tuple(str(x) for x in decoded or ())
            elif name == "workload":
                value = decoded if isinstance(decoded, dict) else None
            else:
                value = dict(decoded or {})
        elif name == "git_dirty" and value is not None:
            value = bool(value)
        values[name] = value
    return RunRecord(**values)


def insert_run(connection: sqlite3.Connection, record: RunRecord) -> int:
    """Store ``record``; returns its id."""
    row = _to_row(record)
    row.pop("id")
    names = ", ".join(row)
    marks = ", ".join(f":{name}" for name in row)
    with transaction(connection):
        cursor = connection.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", row)
    run_id = cursor.lastrowid
    assert run_id is not None
    return int(run_id)


def list_runs(
    connection: sqlite3.Connection,
    *,
    since_ns: int | None = None,
    ids: Sequence[int] | None = None,
) -> list[RunRecord]:
    """Runs oldest first, registered at or after ``since_ns`` and among ``ids`` when given."""
    clauses, parameters = [], []
    if since_ns is not None:
        clauses.append("registered_ns >= ?")
        parameters.append(since_ns)
    if ids is not None:
        clauses.append(f"id IN ({', '.join('?' for _ in ids)})")
        parameters.extend(ids)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    present = _present_columns(connection)
    names = [name for name in _COLUMNS if name in present]
    cursor = connection.execute(
        f"SELECT {', '.join(names)} FROM runs {where} ORDER BY registered_ns, id", parameters
    )
    return [_from_row(row, names) for row in cursor.fetchall()]


def get_run(connection: sqlite3.Connection, run_id: int) -> RunRecord | None:
    """The run with ``run_id``, or None."""
    runs = list_runs(connection, ids=[run_id])
    return runs[0] if runs else None


def set_note(connection: sqlite3.Connection, run_id: int, note: str) -> bool:
    """Replace the note of a run; False when there is no such run."""
    with transaction(connection):
        cursor = connection.execute("UPDATE runs SET note = ? WHERE id = ?", (note, run_id))
    return cursor.rowcount == 1


def import_runs(connection: sqlite3.Connection, runs: Sequence[RunRecord]) -> tuple[int, int]:
    """Copy runs of another ledger into this one, under new ids; a run already here (the same
    registration time, label and profile) is skipped. Returns (copied, skipped)."""
    copied = skipped = 0
    with transaction(connection):
        for run in runs:
            duplicate = connection.execute(
                "SELECT 1 FROM runs WHERE registered_ns = ? AND label = ? AND profile_path IS ?",
                (run.registered_ns, run.label, run.profile_path),
            ).fetchone()
            if duplicate:
                skipped += 1
                continue
            row = _to_row(run)
            row.pop("id")
            names = ", ".join(row)
            marks = ", ".join(f":{name}" for name in row)
            connection.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", row)
            copied += 1
    return copied, skipped
