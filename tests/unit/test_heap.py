"""keep_freed_heap: a large block freed is reused by the next one from glibc's heap, where by
default each is mapped on its own (fresh pages every time). Run in child processes: the setting
is the whole process's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/maps").exists() or not sys.platform.startswith("linux"),
    reason="reads /proc/self/maps (glibc's heap)",
)

_CHILD = """
import sys
import numpy as np
from perfledger.heap import keep_freed_heap
if sys.argv[1] == "keep":
    keep_freed_heap()
def heap():
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            return start, end
    return 0, 0
first = np.ones(8 << 20)  # 64 MB: glibc maps such a block on its own by default
at = first.ctypes.data
del first
second = np.ones(8 << 20)
start, end = heap()
print(int(start <= second.ctypes.data < end), int(second.ctypes.data == at))
"""


def _child(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_a_freed_large_block_is_reused_from_the_heap() -> None:
    assert _child("keep") == (1, 1)  # in the heap, where the first one was
    in_heap, _ = _child("default")
    assert in_heap == 0  # mapped on its own (the setting is what changes it)
