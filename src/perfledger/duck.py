"""One in-memory DuckDB database per process; a cursor of it for each query pass.

Opening a database costs tens of milliseconds, a cursor on an open one about one, and an
analysis queries in a dozen passes. Opening and closing a database also makes DuckDB hand the
C heap's free memory back to the system (``malloc_trim``, as its thread pool starts and stops):
inside ``perfledger analyze``, which holds that memory for its next phase
(:func:`perfledger.memory.holding_freed_memory`), every pass would undo the holding. The one
database is opened on first use and stays open for the process's life; its queries run on the
thread that asks (DuckDB's own threads hand the heap's free memory back after their tasks too),
beside the analysis's other threads.
"""

from __future__ import annotations

import os
import threading

import duckdb

_database: tuple[int, duckdb.DuckDBPyConnection] | None = None
_database_lock = threading.Lock()


def duck() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection of its own for one pass (``with duck() as con:``; closed after).

    A cursor on the process's one in-memory database (a forked process opens its own): the
    tables it registers or creates as temporary are its own, and cursors of several threads
    run at once.
    """
    global _database
    with _database_lock:
        if _database is None or _database[0] != os.getpid():
            # no thread pool of DuckDB's own (see the module's text)
            _database = (os.getpid(), duckdb.connect(config={"threads": 1}))
        return _database[1].cursor()
