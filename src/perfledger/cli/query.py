"""``perfledger query PROFILE SQL``: DuckDB SQL over a profile's canonical tables, read-only."""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import threading
from pathlib import Path
from typing import Any, Final

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
from rich.console import Console
from rich.table import Table

from perfledger.cli import count_argument
from perfledger.errors import PerfledgerError
from perfledger.profiledir import StoredProfile, load_profile
from perfledger.profiledir.reader import read_parquet_schema
from perfledger.render.shown import shown


def add_parser(subparsers: Any) -> None:
    """Register the ``query`` subcommand."""
    parser = subparsers.add_parser(
        "query",
        help="run SQL over a profile's tables (events, counters, steps, step_trace, gaps, ...)",
        description=(
            "Run a DuckDB SQL query over the tables of a profile directory. Each "
            "tables/<name>.parquet is a table called <name>, and so is a folder "
            "tables/<name>/ of per-rank files (rank=<N>.parquet). The profile is opened "
            "read-only."
        ),
    )
    parser.add_argument("profile", type=Path, help="profile directory")
    parser.add_argument("sql", nargs="?", help="the query; omit with --tables")
    parser.add_argument(
        "--format", choices=("table", "csv", "json"), default="table", help="output format"
    )
    parser.add_argument("--tables", action="store_true", help="list the tables and columns")
    limits = parser.add_argument_group("limits (a query that passes one is stopped and says so)")
    limits.add_argument(
        "--memory-limit",
        type=_memory_size,
        default=DEFAULT_MEMORY_LIMIT,
        metavar="SIZE",
        help=f"memory the query may use, e.g. 512MB, 8GB (default: {DEFAULT_MEMORY_LIMIT})",
    )
    limits.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time the query may run (default: {DEFAULT_TIMEOUT_S:g}; 0: no limit)",
    )
    limits.add_argument(
        "--max-rows",
        type=count_argument,
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"rows printed at most (default: {DEFAULT_MAX_ROWS:,}; 0: every row)",
    )
    parser.set_defaults(run=run)


DEFAULT_MEMORY_LIMIT: Final = "4GB"
DEFAULT_TIMEOUT_S: Final = 60.0
DEFAULT_MAX_ROWS: Final = 10_000
# Rows fetched from DuckDB at a time: the printed rows are the only ones held.
_BATCH_ROWS: Final = 2_048
_SIZE: Final = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)


def _memory_size(text: str) -> str:
    if not _SIZE.match(text):
        raise argparse.ArgumentTypeError(f"not a size like 512MB or 8GB: {text!r}")
    return text.strip()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds: {text!r}")
    return value


def open_profile(path: Path, memory_limit: str = DEFAULT_MEMORY_LIMIT) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the profile's tables registered, locked down.

    The query may use ``memory_limit`` and never spills to disk (it writes nothing anywhere).
    """
    profile = load_profile(path)
    connection = duckdb.connect(":memory:")
    for name in profile.table_names():
        # a table split by rank is one table, its parts in rank order
        connection.register(name, _table(profile, name))
    # the query may read the registered tables only: no files, no extensions, no writes
    connection.execute(f"SET memory_limit = '{memory_limit}'")
    connection.execute("SET temp_directory = ''")
    connection.execute("SET enable_external_access = false")
    connection.execute("SET lock_configuration = true")
    return connection


def _table(profile: StoredProfile, name: str) -> ds.Dataset | pa.Table:
    """A profile's table as the query reads it: its files scanned as the query goes (the
    columns it names, a batch at a time: the events of a large profile are never all in
    memory), or read whole where its per-rank files' schemas differ (an older profile's
    parts: joined as ``read_table`` joins them)."""
    files = profile.table_files(name)
    schemas = [read_parquet_schema(file) for file in files]
    if all(schema.equals(schemas[0]) for schema in schemas[1:]):
        return ds.dataset([str(f) for f in files], schema=schemas[0], format="parquet")
    table = profile.read_table(name)
    assert table is not None
    return table


def run(args: argparse.Namespace) -> int:
    """Run the query and print the result."""
    connection = open_profile(args.profile, args.memory_limit)
    if args.tables:
        sql = (
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"
        )
    elif args.sql:
        sql = args.sql
    else:
        raise PerfledgerError("query: give an SQL query, or --tables to list the tables")
    timer = threading.Timer(args.timeout, connection.interrupt) if args.timeout else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        result = connection.execute(sql)
        names = [d[0] for d in result.description or []]
        rows, more = _fetch(result, args.max_rows)
    except duckdb.InterruptException as error:
        raise PerfledgerError(
            f"query stopped by the time limit: still running after {args.timeout:g} s "
            "(--timeout SECONDS, 0 for none)"
        ) from error
    except duckdb.OutOfMemoryException as error:
        raise PerfledgerError(
            f"query stopped by the memory limit: it needs more than {args.memory_limit} "
            "(--memory-limit SIZE)"
        ) from error
    except duckdb.Error as error:
        message = str(error).splitlines()[0]
        raise PerfledgerError(f"query failed: {message}") from error
    finally:
        if timer is not None:
            timer.cancel()
        connection.close()
    _print(names, rows, args.format)
    if more:
        print(
            f"perfledger: the first {args.max_rows:,} rows printed; the query returns more "
            "(--max-rows N, 0 for every row)",
            file=sys.stderr,
        )
    return 0


def _fetch(result: duckdb.DuckDBPyConnection, limit: int) -> tuple[list[tuple[Any, ...]], bool]:
    """The first ``limit`` rows (every row when 0), and whether there are more."""
    rows: list[tuple[Any, ...]] = []
    while True:
        want = _BATCH_ROWS if not limit else min(_BATCH_ROWS, limit + 1 - len(rows))
        batch = result.fetchmany(want)
        rows.extend(batch)
        if limit and len(rows) > limit:
            return rows[:limit], True
        if len(batch) < want:
            return rows, False


def _print(names: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(rows)
    elif fmt == "json":
        records = [dict(zip(names, row, strict=True)) for row in rows]
        print(json.dumps(records, indent=2, default=str))
    else:
        table = Table(show_lines=False)
        for name in names:
            table.add_column(shown(name))
        for row in rows:
            table.add_row(*(shown("" if v is None else v) for v in row))
        Console().print(table)
