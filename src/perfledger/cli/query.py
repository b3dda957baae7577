"""``perfledger query PROFILE SQL``: DuckDB SQL over a profile's canonical tables, read-only."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import duckdb
from rich.console import Console
from rich.table import Table

from perfledger.errors import PerfledgerError
from perfledger.profiledir import load_profile
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
    parser.set_defaults(run=run)


def open_profile(path: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the profile's tables registered, locked down."""
    profile = load_profile(path)
    connection = duckdb.connect(":memory:")
    for name in profile.table_names():
        # a table split by rank is one table, its parts in rank order
        table = profile.read_table(name)
        assert table is not None
        connection.register(name, table)
    # the query may read the registered tables only: no files, no extensions, no writes
    connection.execute("SET enable_external_access = false")
    connection.execute("SET lock_configuration = true")
    return connection


def run(args: argparse.Namespace) -> int:
    """Run the query and print the result."""
    connection = open_profile(args.profile)
    if args.tables:
        sql = (
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"
        )
    elif args.sql:
        sql = args.sql
    else:
        raise PerfledgerError("query: give an SQL query, or --tables to list the tables")
    try:
        result = connection.execute(sql)
        names = [d[0] for d in result.description or []]
        rows = result.fetchall()
    except duckdb.Error as error:
        message = str(error).splitlines()[0]
        raise PerfledgerError(f"query failed: {message}") from error
    _print(names, rows, args.format)
    return 0


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
