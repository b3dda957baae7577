"""numpy's large arrays on ordinary pages in perfledger's own processes: the analysing
commands set numpy's switch before it loads (for the import's workers too), a process that
loaded numpy first turns it off (``record``'s, a worker's start), ``record`` leaves its
program's environment alone, and the user's own choice is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfledger.pages import NUMPY_HUGE_PAGES
from tests.heap_probe import child_line

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps (Linux)"
)

# Whether the kernel has transparent huge pages: where it has, an array numpy asks them for
# lies in a mapping flagged "hg" (madvise(MADV_HUGEPAGE)), whatever the system's policy
_THP = Path("/sys/kernel/mm/transparent_hugepage").is_dir()

# After the setup named by argv[1], a 128 MB array: the variable, numpy's switch, and whether
# the array's mapping asks for huge pages (VmFlags "hg" in /proc/self/smaps)
_CHILD = """
import os, sys
setup, argv = sys.argv[1], sys.argv[2:]
if setup == "main":
    from perfledger.__main__ import main
    try:
        main(argv)
    except SystemExit:
        pass
else:
    import numpy
    if setup == "ordinary_pages":
        from perfledger.pages import ordinary_pages
        ordinary_pages()
    elif setup == "worker":
        from perfledger.import_pool import start_worker
        start_worker(os.getppid(), "json")
import numpy as np

def flags(address):
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            start, end = (int(x, 16) for x in head[0].split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            return head[1:]
    return []

core = getattr(np, "_core", None) or np.core
block = np.ones(16 << 20)
print("PAGES", os.environ.get("NUMPY_MADVISE_HUGEPAGE"), core.multiarray._get_madvise_hugepage(),
      "hg" in flags(block.ctypes.data + (8 << 20)))
"""


def _probe(setup: str, *argv: str, env: dict[str, str] | None = None) -> tuple[str, bool, bool]:
    """The variable, numpy's switch and whether the array asks for huge pages."""
    words = child_line(_CHILD, setup, *argv, unset=NUMPY_HUGE_PAGES, env=env, prefix="PAGES ")
    return words[0], words[1] == "True", words[2] == "True"


@pytest.mark.parametrize("command", ["analyze", "query", "timeline", "whatif", "diff", "runs"])
def test_analysing_commands_keep_numpy_off_huge_pages(command: str) -> None:
    assert _probe("main", command, "--help") == ("0", False, False)


def test_record_leaves_the_programs_environment_alone() -> None:
    variable, switch, huge = _probe("main", "record", "--help")
    assert variable == "None"
    assert switch  # numpy's default until record's own analysis (which turns it off)
    if _THP:
        assert huge  # the probe sees the mapping numpy asks huge pages for


def test_the_users_choice_is_kept() -> None:
    assert _probe("main", "analyze", "--help", env={NUMPY_HUGE_PAGES: "1"})[:2] == ("1", True)
    assert _probe("ordinary_pages", env={NUMPY_HUGE_PAGES: "1"})[:2] == ("1", True)


def test_a_process_that_loaded_numpy_first_turns_them_off() -> None:
    assert _probe("ordinary_pages")[1:] == (False, False)
    if _THP:
        assert _probe("numpy-first")[1:] == (True, True)  # what it turns off


def test_the_import_workers_turn_them_off_as_they_start() -> None:
    # a spawned worker of record's analysis has none of the command line's environment
    assert _probe("worker")[1:] == (False, False)
