"""Pool workers end when the process that started them is killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from perfledger import orphans

# A parent that starts a spawned pool of two workers, keeps them busy, prints their pids and
# kills itself (as the kernel's out-of-memory killer would).
PARENT = """
import os, signal, sys, time, multiprocessing
from concurrent.futures import ProcessPoolExecutor
import psutil
from perfledger.orphans import exit_with_parent

if __name__ == "__main__":
    watched = sys.argv[1] == "watched"
    pool = ProcessPoolExecutor(
        2,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=exit_with_parent if watched else None,
        initargs=(os.getpid(),) if watched else (),
    )
    for _ in range(4):
        pool.submit(time.sleep, 60)
    pids = [child.pid for child in multiprocessing.active_children()]
    # both workers up and busy before the parent dies (a watched one has started its watch):
    # it is a running worker that must notice, not one that starts after the parent is gone
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
        psutil.Process(pid).num_threads() < (2 if watched else 1) for pid in pids
    ):
        time.sleep(0.05)
    time.sleep(0.5)
    with open(sys.argv[2], "w") as out:
        out.write(" ".join(str(p) for p in sorted(pids)))
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _orphans(mode: str, folder: Path) -> list[int]:
    """The pids of the workers of a parent killed in ``mode``."""
    listed = folder / f"{mode}.pids"
    # no pipes: the workers inherit the parent's output, and a pipe would stay open with them
    done = subprocess.run(
        [sys.executable, "-c", PARENT, mode, str(listed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL
    pids = [int(p) for p in listed.read_text().split()]
    assert len(pids) == 2
    return pids


def test_workers_of_a_killed_parent_exit(tmp_path: Path) -> None:
    pids = _orphans("watched", tmp_path)
    assert pids
    deadline = time.monotonic() + 5 * orphans.POLL_S + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


def test_without_the_watch_they_would_linger(tmp_path: Path) -> None:
    pids = _orphans("plain", tmp_path)
    try:
        time.sleep(3 * orphans.POLL_S)
        assert [p for p in pids if _alive(p)], "the control should leave workers behind"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
