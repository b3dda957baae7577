"""The program ends with its launcher: process identities and the watches that use them.

A recording is a launcher and the program it started. When the launcher dies (``kill -9``, out
of memory) nothing would analyse the program's traces any more, so the program must not run on
alone: the launcher's direct child gets a parent-death signal from the kernel (Linux), and every
Python process of the program watches the launcher and ends itself once it is gone.

A process is named by its pid *and* its start time, so that a pid the kernel handed to another
process since is not mistaken for the launcher. Only the standard library is imported: this
module runs inside the profiled program.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

ENV_LAUNCHER: Final = "PERFLEDGER_LAUNCHER"

# How often the program looks for its launcher, in seconds: an orphan lingers at most this long.
WATCH_INTERVAL_S: Final = 0.5

_PR_SET_PDEATHSIG: Final = 1
_PROC: Final = Path("/proc")


def process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None when no such process runs.

    A zombie (dead, not yet reaped by its parent) does not run. Without ``/proc`` the start is
    unknown: 0 for a process that exists.
    """
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return _exists_without_proc(pid)
    # The command name, in parentheses, may hold spaces and parentheses: fields follow the last.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _exists_without_proc(pid: int) -> int | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # another user's process
        return 0
    return 0


def identity(pid: int) -> str | None:
    """``pid:start`` naming a running process for good, or None when it does not run."""
    start = process_start(pid)
    return None if start is None else f"{pid}:{start}"


def is_running(process_identity: str) -> bool:
    """Whether the process named by :func:`identity` still runs (not a later one of its pid)."""
    pid_text, _, start_text = process_identity.partition(":")
    try:
        pid, start = int(pid_text), int(start_text)
    except ValueError:
        return True  # not ours to judge
    now = process_start(pid)
    return now is not None and (now == start or 0 in (now, start))


def system_identity() -> dict[str, str]:
    """This boot of this machine and this pid namespace: where pids mean the same processes."""
    found: dict[str, str] = {}
    try:
        found["boot_id"] = (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
        found["pid_namespace"] = os.readlink(_PROC / "self" / "ns" / "pid")
    except OSError:
        pass
    return found


def parent_death_signal(signum: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` part: the child gets ``signum`` when the process that started it dies.

    Made in the parent (the C library is looked up before the fork), called in the child before
    ``exec``. The kernel sends the signal when the parent's *thread* ends, so the child must be
    started from a thread that lives as long as the parent (the main one). A parent that died
    before the setting took effect is caught by comparing the child's parent with ours.
    """
    parent = os.getpid()
    prctl: Callable[..., int] | None = None
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl = libc.prctl

    def arm_in_child() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return arm_in_child


def watch_launcher(launcher: str, interval_s: float = WATCH_INTERVAL_S) -> threading.Thread:
    """Start a daemon thread that kills this process once ``launcher`` (an identity) is gone.

    Nothing would analyse this process's traces any more; SIGKILL, as the kernel's
    parent-death signal, since a program's own SIGTERM handler may carry on.
    """

    def watch() -> None:
        while is_running(launcher):
            stopped.wait(interval_s)
        os.kill(os.getpid(), signal.SIGKILL)

    stopped = threading.Event()  # never set: the wait is the poll's sleep
    thread = threading.Thread(target=watch, name="perfledger-lifeline", daemon=True)
    thread.start()
    return thread
