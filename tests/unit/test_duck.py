"""perfledger.duck: cursors of one in-memory database per process, each with its own
registered tables, whose queries leave the C heap's free memory where it is (opening and
closing a DuckDB database, and DuckDB's own threads, hand it back to the system)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from perfledger.duck import duck


def test_each_cursor_has_its_own_registered_tables() -> None:
    with duck() as first, duck() as second:
        first.register("numbers", pa.table({"n": [1, 2, 3]}))
        second.register("numbers", pa.table({"n": [10, 20]}))
        assert first.sql("SELECT sum(n) FROM numbers").fetchall() == [(6,)]
        assert second.sql("SELECT sum(n) FROM numbers").fetchall() == [(30,)]


def test_cursors_of_several_threads_query_at_once() -> None:
    sums: dict[int, int] = {}
    start = threading.Barrier(4)

    def query(index: int) -> None:
        start.wait(10)
        with duck() as con:
            con.register("t", pa.table({"n": list(range(index * 100_000))}))
            sums[index] = con.sql("SELECT sum(n) FROM t").fetchall()[0][0] or 0

    threads = [threading.Thread(target=query, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sums == {i: sum(range(i * 100_000)) for i in range(4)}


# In a child process (the heap is the whole process's): 256 MB freed, then queries in new
# cursors, large enough for DuckDB to spread them over threads it had any; the freed memory
# is still resident after them (``connect`` instead of ``duck``: handed back).
_CHILD = """
import sys, time
from perfledger.heap import keep_freed_heap
keep_freed_heap()
import duckdb
import numpy as np
import duckdb
import pyarrow as pa
from perfledger.duck import duck
def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 // 2**20
opened = duck if sys.argv[1] == "duck" else duckdb.connect
opened().close()
table = pa.table({"n": np.arange(3_000_000) % 1000, "v": np.arange(3_000_000)})
before = resident_mb()
block = np.ones(32 << 20)  # 256 MB, every page touched
del block
for _ in range(3):
    time.sleep(0.2)  # DuckDB hands back at most every 100 ms
    with opened() as con:
        con.register("t", table)
        con.sql("SELECT n, count(DISTINCT v) FROM t GROUP BY n").fetchall()
print(resident_mb() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_queries_leave_the_freed_heap_memory_where_it_is() -> None:
    def held(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True
        )
        return int(out.stdout.split()[-1])

    assert held("duck") >= 200
    assert held("connect") < 100  # what a database of its own per query would do


def test_readers_query_on_duckdbs_threads_and_the_analysis_on_the_asking_one() -> None:
    with duckdb.connect() as default:
        cores = default.sql("SELECT current_setting('threads')").fetchall()[0][0]
    with duck() as analysis, duck(parallel=True) as reader:
        assert analysis.sql("SELECT current_setting('threads')").fetchall() == [(1,)]
        assert reader.sql("SELECT current_setting('threads')").fetchall() == [(cores,)]
        # two databases: a table one creates is not the other's
        reader.execute("CREATE TABLE readers_own AS SELECT 1 AS x")
        try:
            assert reader.sql("SELECT x FROM readers_own").fetchall() == [(1,)]
            with pytest.raises(duckdb.CatalogException):
                analysis.sql("SELECT x FROM readers_own")
        finally:
            reader.execute("DROP TABLE readers_own")
