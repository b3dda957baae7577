"""Handing freed memory back to the system between the phases of a large analysis.

Arrow's memory pool and glibc's heap keep freed blocks for reuse, but what runs next (numpy,
other libraries) allocates elsewhere: without a hand-back a process keeps the high-water mark of
every phase stacked (bench/README.md has the figures).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading
from collections.abc import Callable, Iterator

import pyarrow as pa


def _load_trim() -> Callable[[], object]:
    """glibc's malloc_trim, or a no-op where there is none."""
    # glibc by its usual name first: find_library runs ldconfig in a child process
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
        except OSError:
            return lambda: None
    try:
        trim = libc.malloc_trim
    except AttributeError:
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


_malloc_trim = _load_trim()


def release_freed_memory() -> None:
    """Return the blocks Arrow's pool and the C heap hold freed to the system."""
    pa.default_memory_pool().release_unused()
    _malloc_trim()


_pool_lock = threading.Lock()
_pool_users = 0
_pool_before: list[pa.MemoryPool] = []


@contextlib.contextmanager
def returning_pool() -> Iterator[None]:
    """Arrow allocates from the C heap inside the block (its previous pool again after it).

    Arrow's own pool (mimalloc in the wheels) keeps the pages of freed buffers mapped for
    reuse, so a large table freed between two passes still counts in the process's memory
    while the next pass allocates elsewhere; the C heap hands a large buffer's pages back as
    soon as it is freed (glibc maps each one on its own). Buffers keep the pool that made
    them: tables made inside the block are freed to it after the block too. The pool is the
    process's: blocks entered by several threads at once (tasks of a threaded worker) share
    it, and the previous pool comes back when the last of them ends.
    """
    global _pool_users
    with _pool_lock:
        if _pool_users == 0:
            _pool_before.append(pa.default_memory_pool())
            pa.set_memory_pool(pa.system_memory_pool())
        _pool_users += 1
    try:
        yield
    finally:
        with _pool_lock:
            _pool_users -= 1
            if _pool_users == 0:
                pa.set_memory_pool(_pool_before.pop())
