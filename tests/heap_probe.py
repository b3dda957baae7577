"""Source text for the child processes of the heap tests: where glibc put a block (in its
heap, the ``[heap]`` line of /proc/self/maps, or mapped elsewhere), and a block made by a new
thread. Prepend it to a child's own text; it loads nothing until called. Also how the tests
of the command line's process settings run such a child (:func:`child_line`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

# The heap tests' mark: they read /proc/self/maps and glibc's heap
NEEDS_GLIBC_HEAP: Final = pytest.mark.skipif(
    not Path("/proc/self/maps").exists() or not sys.platform.startswith("linux"),
    reason="reads /proc/self/maps (glibc's heap)",
)

PROBE: Final = """
def in_heap(address):
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            return int(start <= address < end)
    return 0
def thread_block():
    # a 16 MB block made by a thread of its own (ended after): its address, in the heap or not
    import threading
    import numpy as np
    seen = []
    def allocate():
        block = np.ones(2 << 20)
        seen.append((block.ctypes.data, in_heap(block.ctypes.data)))
    thread = threading.Thread(target=allocate)
    thread.start()
    thread.join()
    return seen[0]
"""


def child_line(
    source: str, *argv: str, unset: str, env: dict[str, str] | None = None, prefix: str
) -> list[str]:
    """The words of the last line starting with ``prefix`` that the child running ``source``
    (with ``argv``) prints, the prefix left out: its environment this one's without the
    variable ``unset``, plus ``env``."""
    environment = {k: v for k, v in os.environ.items() if k != unset}
    environment.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", source, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=environment,
    )
    lines = [x for x in result.stdout.splitlines() if x.startswith(prefix)]
    return lines[-1][len(prefix) :].split()
