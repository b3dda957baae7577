"""``perfledger analyze`` sets glibc's one heap up before the process starts a thread, and
Arrow's pool to the C heap for itself and the import's workers (unless the user chose one);
other commands leave both alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/maps").exists() or not sys.platform.startswith("linux"),
    reason="reads /proc/self/maps (glibc's heap)",
)

# main() with the command line given, then a thread's 16 MB block: in the heap only where the
# one-heap setting holds (by default a thread allocates from a heap of its own)
_PROBE = """
import os, sys, threading
from perfledger.__main__ import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
import numpy as np
def heap():
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            return tuple(int(x, 16) for x in line.split()[0].split("-"))
    return 0, 0
seen = []
def allocate():
    block = np.ones(2 << 20)
    start, end = heap()
    seen.append(int(start <= block.ctypes.data < end))
thread = threading.Thread(target=allocate)
thread.start()
thread.join()
print("POOL", os.environ.get("ARROW_DEFAULT_MEMORY_POOL"), "HEAP", seen[0])
"""


def _probe(*argv: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    environment = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    environment.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=environment,
    )
    line = [x for x in result.stdout.splitlines() if x.startswith("POOL ")][-1].split()
    return line[1], int(line[3])


def test_analyze_takes_one_heap_and_arrow_from_it() -> None:
    assert _probe("analyze", "--help") == ("system", 1)


@pytest.mark.parametrize("command", ["record", "query", "timeline"])
def test_other_commands_leave_the_heap_and_the_pool_alone(command: str) -> None:
    assert _probe(command, "--help") == ("None", 0)


def test_the_users_pool_is_kept() -> None:
    assert _probe("analyze", "--help", env={"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}) == (
        "jemalloc",
        1,
    )
