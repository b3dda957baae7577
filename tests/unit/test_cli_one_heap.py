"""``perfledger analyze`` sets glibc's one heap up before the process starts a thread, and
Arrow's pool to the C heap for itself and the import's workers (unless the user chose one);
other commands leave both alone."""

from __future__ import annotations

import pytest

from tests.heap_probe import NEEDS_GLIBC_HEAP, PROBE, child_line

pytestmark = NEEDS_GLIBC_HEAP

# main() with the command line given, then a thread's 16 MB block: in the heap only where the
# one-heap setting holds (by default a thread allocates from a heap of its own)
_CHILD = (
    PROBE
    + """
import os, sys
from perfledger.__main__ import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
_, in_heap_now = thread_block()
print("POOL", os.environ.get("ARROW_DEFAULT_MEMORY_POOL"), "HEAP", in_heap_now)
"""
)


def _probe(*argv: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    words = child_line(_CHILD, *argv, unset="ARROW_DEFAULT_MEMORY_POOL", env=env, prefix="POOL ")
    return words[0], int(words[2])


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
