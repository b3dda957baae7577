"""glibc's heap set to keep freed blocks for reuse, by ``perfledger analyze`` and the import's
workers (the standard library only: a worker sets it before it loads anything heavy)."""

from __future__ import annotations

import ctypes
from typing import Final

# mallopt's parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_MAX: Final = -4


def keep_freed_heap() -> None:
    """Let glibc's heap keep what is freed for what is allocated next, until
    :func:`perfledger.memory.release_freed_memory` hands it back (no-op off glibc).

    By default glibc maps every block of 32 MB or more (a column of 4 million int64s) on its
    own and unmaps it when freed, and gives the top of the heap back as soon as it is free: a
    pass that makes and frees such columns one after the other faults in fresh pages for each
    (each zeroed by the system first). From the heap the next column reuses the pages the last
    one freed. Set for a whole process (``perfledger analyze``'s, the import's workers'): the
    hand-backs where the phases of an analysis meet keep its memory where it was.
    """
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(_M_MMAP_MAX, 0)
    mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
