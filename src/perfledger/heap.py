"""glibc's heap set to keep freed blocks for reuse, by ``perfledger analyze`` and the import's
workers (the standard library only: a worker sets it before it loads anything heavy)."""

from __future__ import annotations

import ctypes
from typing import Final

# mallopt's parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD: Final = -1
_M_TOP_PAD: Final = -2
_M_MMAP_MAX: Final = -4
_M_ARENA_MAX: Final = -8
# The heap grown this much beyond each request that does not fit (fewer, larger growths)
TOP_PAD_BYTES: Final = 64 << 20


def keep_freed_heap() -> None:
    """Let glibc's heap keep what is freed for what is allocated next, in one heap for every
    thread, until :func:`perfledger.memory.release_freed_memory` hands it back (no-op off glibc).

    By default glibc maps every block of 32 MB or more (a column of 4 million int64s) on its
    own and unmaps it when freed, gives the top of the heap back as soon as it is free, and
    gives each new thread a heap of its own (unmapped when it empties): a pass that makes and
    frees such columns one after the other faults in fresh pages for each (each zeroed by the
    system first), and what one thread frees another cannot take. From the one heap the next
    column reuses the pages the last one freed, whichever thread frees or allocates.

    Set for a whole process (``perfledger analyze``'s, the import's workers'); the limit to one
    heap holds for the threads that allocate for the first time after it, so it is set before
    the process starts any (the command line does it first thing).
    """
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(_M_MMAP_MAX, 0)
    mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    mallopt(_M_TOP_PAD, TOP_PAD_BYTES)
    mallopt(_M_ARENA_MAX, 1)
