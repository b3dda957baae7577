"""Worker processes that end with the process that started them.

A :class:`concurrent.futures.ProcessPoolExecutor` worker waits for work on a queue whose
writing end it holds itself: when its parent is killed (out of memory, ``kill -9``) nothing
tells it, and it waits on forever. A worker started with :func:`exit_with_parent` as its pool
initializer watches for its parent to go and ends then.

It assumes the workers are children of the process that passes its pid: true of the "spawn"
and "fork" start methods used here, not of "forkserver" (whose workers are the fork server's
children: they would end at once).
"""

from __future__ import annotations

import os
import threading

# How often a worker looks for its parent, in seconds: an orphan lingers at most this long.
POLL_S = 1.0


def exit_with_parent(parent_pid: int) -> None:
    """Start a daemon thread that ends this process once ``parent_pid`` is no longer its
    parent (the parent died and the process was handed to another)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            stopped.wait(POLL_S)
        os._exit(1)

    stopped = threading.Event()  # never set: the wait is the poll's sleep
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
