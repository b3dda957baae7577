"""In-memory DuckDB databases, one of each kind per process; a cursor of one for each query
pass.

Opening a database costs tens of milliseconds, a cursor on an open one about one, and an
analysis queries in a dozen passes. Opening and closing a database also makes DuckDB hand the
C heap's free memory back to the system (``malloc_trim``, as its thread pool starts and stops),
and so do DuckDB's own threads after their tasks: inside ``perfledger analyze``, which holds
that memory for its next phase (:func:`perfledger.memory.holding_freed_memory`), every pass
would undo the holding. The databases are opened on first use and stay open for the process's
life. The analysis's passes query one whose queries run on the thread that asks, beside the
analysis's other threads; the readers of exported databases, whose queries are the bulk of an
import that comes first, one that spreads them over DuckDB's threads (one per core).
"""

from __future__ import annotations

import os
import threading

import duckdb

# by kind (parallel or not): the process that opened it, the database
_databases: dict[bool, tuple[int, duckdb.DuckDBPyConnection]] = {}
_databases_lock = threading.Lock()


def duck(*, parallel: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection of its own for one pass (``with duck() as con:``; closed after).

    A cursor on one of the process's in-memory databases (a forked process opens its own):
    the tables it registers or creates as temporary are its own, and cursors of several
    threads run at once. ``parallel``: of the database whose queries DuckDB spreads over its
    threads (see the module's text).
    """
    with _databases_lock:
        opened = _databases.get(parallel)
        if opened is None or opened[0] != os.getpid():
            config: dict[str, str | bool | int | float | list[str]] = (
                {} if parallel else {"threads": 1}
            )
            opened = _databases[parallel] = (os.getpid(), duckdb.connect(config=config))
        return opened[1].cursor()
