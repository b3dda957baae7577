"""``perfledger query`` scans the profile's Parquet files as the query reads them: the same
rows, in the same order, as from the tables read whole, in far less memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from perfledger.cli.query import open_profile
from perfledger.profiledir import load_profile
from tests.cli import perfledger
from tests.paths import DATA

QUERIES = [
    "SELECT * FROM events",  # every column, in the files' order (ranks in rank order)
    "SELECT rank, kind, count(*), sum(dur_ns) FROM events GROUP BY ALL ORDER BY ALL",
    "SELECT e.name, s.step FROM events e JOIN steps s ON e.step = s.step AND e.rank = s.rank "
    "WHERE e.kind = 'kernel' ORDER BY e.start_ns, e.name LIMIT 50",
    "SELECT table_name, column_name, data_type FROM information_schema.columns "
    "ORDER BY table_name, ordinal_position",
]


@pytest.fixture(scope="module", params=["kineto/sampled_2ranks", "kineto/v100_rank1_ddp.json.gz"])
def profile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("query") / "profile"
    done = perfledger("analyze", DATA / request.param, "-o", out)
    assert done.returncode == 0, done.stderr
    return out


def _read_whole(path: Path, sql: str) -> list[tuple[Any, ...]]:
    stored = load_profile(path)
    with duckdb.connect(":memory:") as connection:
        for name in stored.table_names():
            connection.register(name, stored.read_table(name))
        return connection.execute(sql).fetchall()


@pytest.mark.parametrize("sql", QUERIES)
def test_the_scanned_tables_answer_as_the_tables_read_whole(profile: Path, sql: str) -> None:
    connection = open_profile(profile)
    try:
        scanned = connection.execute(sql).fetchall()
    finally:
        connection.close()
    # compared as text: the flops column's NaN is not equal to itself
    assert scanned and repr(scanned) == repr(_read_whole(profile, sql))


def test_a_damaged_table_file_is_one_line_naming_it(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    done = perfledger("analyze", DATA / "kineto/v100_rank1_ddp.json.gz", "-o", copy)
    assert done.returncode == 0, done.stderr
    steps = copy / "tables" / "steps.parquet"
    steps.write_bytes(steps.read_bytes()[:100])
    result = perfledger("query", copy, "SELECT count(*) FROM events")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and str(steps) in result.stderr
