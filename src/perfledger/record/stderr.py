"""Where a C++ library's messages go while the profiler changes state (stdlib only: it runs
inside the profiled program)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def stderr_into(log: Path) -> Iterator[None]:
    """Send what is written to file descriptor 2 to ``log`` (appended) for the block.

    The profiler library (Kineto) prints a line or more at every start and stop, from C++,
    straight to the process's stderr; the program's terminal is not the place for them. A
    Python-level error raised in the block is still reported by the caller, on stderr.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    except OSError:
        os.close(saved)
        yield
        return
    try:
        os.dup2(target, 2)
        os.close(target)
        yield
    finally:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
