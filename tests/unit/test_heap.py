"""keep_freed_heap: a large block freed is reused by the next one from glibc's heap, where by
default each is mapped on its own (fresh pages every time), and a thread allocates from that
same heap, where by default it has one of its own. Run in child processes: the setting is the
whole process's."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.heap_probe import NEEDS_GLIBC_HEAP, PROBE

pytestmark = NEEDS_GLIBC_HEAP

_CHILD = (
    PROBE
    + """
import sys
import numpy as np
from perfledger.heap import keep_freed_heap
if sys.argv[1] == "keep":
    keep_freed_heap()
first = np.ones(8 << 20)  # 64 MB: glibc maps such a block on its own by default
at = first.ctypes.data
del first
second = np.ones(8 << 20)
print(in_heap(second.ctypes.data), int(second.ctypes.data == at))
"""
)


def _child(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_a_freed_large_block_is_reused_from_the_heap() -> None:
    assert _child("keep") == (1, 1)  # in the heap, where the first one was
    in_heap, _ = _child("default")
    assert in_heap == 0  # mapped on its own (the setting is what changes it)


# Set before numpy loads (and with it any thread); a 16 MB block fits the heap glibc gives a
# thread of its own by default (64 MB), so only the one-heap setting puts it in the heap.
_THREADS_CHILD = (
    PROBE
    + """
import sys
from perfledger.heap import keep_freed_heap
if sys.argv[1] == "keep":
    keep_freed_heap()
# one thread after the other: the second may reuse the first's block
(first, first_in_heap), (second, second_in_heap) = thread_block(), thread_block()
print(first_in_heap, second_in_heap, int(first == second))
"""
)


def _threads_child(mode: str) -> tuple[int, ...]:
    out = subprocess.run(
        [sys.executable, "-c", _THREADS_CHILD, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    ).stdout.split()
    return tuple(int(x) for x in out)


def test_threads_allocate_from_the_one_heap_and_reuse_each_others_blocks() -> None:
    # both threads' blocks in the heap, the second where the first one's was
    assert _threads_child("keep") == (1, 1, 1)
    first_in_heap, second_in_heap, _ = _threads_child("default")
    assert (first_in_heap, second_in_heap) == (0, 0)  # each thread's heap of its own
