"""The worker processes that decode one large Kineto trace, started early.

A spawned worker spends its first half second loading its libraries (numpy, Arrow, the
decoder). ``perfledger analyze`` of one large trace starts them at the top of the command
line (:func:`prestart`); the import then takes them (:func:`take`) instead of starting a pool
of its own. Where the system can fork (Linux) they are forked once this process has loaded
the decoder's modules, before it starts a thread of its own or loads the rest: each starts
with them loaded, for a few milliseconds instead of about 0.4 s of CPU, and this process's
own loading has the cores to itself meanwhile. Elsewhere they are spawned first and load
theirs while this process loads its own. The command line then has them read the trace
(``kineto_parallel.read_ahead``, which takes the pool) while it loads the rest. A pool nobody
takes is stopped by :func:`discard` (or at the interpreter's exit).

Only the standard library is imported here: the command line reaches this module before
anything heavy is loaded.
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from perfledger.heap import keep_freed_heap
from perfledger.orphans import exit_with_parent
from perfledger.pages import ordinary_pages

# This process reads, cuts and takes the blocks back at about a fifth of the workers' cost
# (bench/import_workers.py measures both): beyond about five workers it sets the pace, and
# more workers only cost memory.
MAX_WORKERS = 6
# Below this much JSON, starting worker processes (a spawned interpreter imports numpy and
# pyarrow: about half a second of CPU each) costs more than they save.
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
# gzip shrinks trace JSON about tenfold: a gzip file counts as ten times its size.
GZIP_RATIO = 10

_lock = threading.Lock()
_started: tuple[ProcessPoolExecutor, int] | None = None


def start_worker(parent_pid: int, preload: str) -> None:
    """A worker's start: it dies with its parent, ignores Ctrl-C (the parent stops the pool)
    and loads the module ``preload`` (the decoder, its libraries with it) before it is given
    a chunk (a forked worker has it loaded already)."""
    exit_with_parent(parent_pid)
    keep_freed_heap()
    # As in the one-process import: millions of small objects and no cycles among them.
    gc.disable()
    # Ctrl-C is the main process's to handle: it stops the pool (a worker killed by it would
    # look like a worker that died, which the caller answers by reading in one process).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a forked worker has the command line's SIGTERM handler, which raises in the main thread
    # of the command: a worker is ended by it, as a spawned one is
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    importlib.import_module(preload)
    # numpy loaded now (a spawned worker of ``record``'s analysis has no environment of ours)
    ordinary_pages()


def new_pool(workers: int, preload: str, *, fork: bool = False) -> ProcessPoolExecutor:
    """A pool of ``workers`` workers (none started until a task is submitted), each loading
    the module ``preload`` as it starts. ``fork``: forked from this process, which loads
    ``preload`` first, where the system can fork (:func:`_can_fork`) and this process then
    runs no other thread of its own; else spawned.

    Raises:
        OSError: no pool here (no semaphores: no /dev/shm ...).
    """
    method = "spawn"
    if fork and _can_fork():
        importlib.import_module(preload)
        # no other Python thread, whose locks the child would inherit (loading the module
        # may have started one)
        if threading.active_count() == 1:
            method = "fork"
    context = multiprocessing.get_context(method)
    return ProcessPoolExecutor(
        workers, mp_context=context, initializer=start_worker, initargs=(os.getpid(), preload)
    )


def _can_fork() -> bool:
    """Whether the system here can fork workers: Linux (Arrow's allocator and thread pools
    have their own handlers for a fork; elsewhere a fork is not safe with them)."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def prestart(workers: int, preload: str) -> bool:
    """Start ``workers`` workers now (at most :data:`MAX_WORKERS`), each loading the module
    ``preload`` (forked where :func:`new_pool` can), for :func:`take`; False where no pool can
    start here (the import then reads the way it would have)."""
    global _started
    workers = max(1, min(workers, MAX_WORKERS))
    with _lock:
        if _started is not None:
            return True
        try:
            pool = new_pool(workers, preload, fork=True)
            with warnings.catch_warnings():
                # Python 3.12+ warns of a fork while any thread runs: Arrow's allocator keeps
                # one (jemalloc's background thread), which the child makes again
                warnings.simplefilter("ignore", DeprecationWarning)
                for _ in range(workers):  # each submit starts one more worker (a fork: all)
                    pool.submit(os.getpid)
        except (OSError, RuntimeError):
            return False
        _started = (pool, workers)
    return True


def take(workers: int) -> ProcessPoolExecutor | None:
    """The started pool when it has ``workers`` workers (at most :data:`MAX_WORKERS`), now
    the caller's to shut down; None when there is none (one of another size is stopped)."""
    global _started
    with _lock:
        started, _started = _started, None
    if started is None:
        return None
    pool, count = started
    if count != max(1, min(workers, MAX_WORKERS)):
        _stop(pool)
        return None
    return pool


def discard() -> None:
    """Stop the started pool, if any (the run took another road)."""
    global _started
    with _lock:
        started, _started = _started, None
    if started is not None:
        _stop(started[0])


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool nobody took: its workers hold no work (at most their start), so they are
    ended at once rather than told to finish, which waits for them to be ready first."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def prestart_for(argv: list[str], preload: str) -> tuple[str, int] | None:
    """Start the workers for ``perfledger analyze`` of one large trace (``argv``: the command
    line's arguments): a ``.json`` of at least :data:`PARALLEL_MIN_BYTES` (a ``.json.gz``
    counted at :data:`GZIP_RATIO` times its size), the only file named, with the default
    workers (one per core; none with ``--workers`` or ``--dask``, whose runs start their own,
    nor for help); ``preload``: the module they load as they start (the decoder's). The trace
    and the workers started for it, if any."""
    if not argv or argv[0] != "analyze" or (os.cpu_count() or 1) < 2:
        return None
    if any(a.startswith(("--workers", "--dask", "-h", "--help")) for a in argv[1:]):
        return None
    named = [a for a in argv[1:] if not a.startswith("-") and os.path.isfile(a)]
    if len(named) == 1 and _large_json(named[0]):
        workers = os.cpu_count() or 1
        if prestart(workers, preload):
            return named[0], workers
    return None


def _large_json(path: str) -> bool:
    ratio = 1 if path.endswith(".json") else GZIP_RATIO if path.endswith(".json.gz") else 0
    try:
        return ratio > 0 and Path(path).stat().st_size * ratio >= PARALLEL_MIN_BYTES
    except (OSError, ValueError):
        return False
