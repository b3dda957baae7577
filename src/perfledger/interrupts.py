"""Ctrl-C and SIGTERM held over a few steps that must not be cut in the middle."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any, Final

# The signals a user stops a command with.
_STOPPING: Final[tuple[int, ...]] = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM received in the block answered when it ends, not inside it: the
    first of them is given to the handler it had then (which raises, in place of the block's
    own error if any).

    For steps an exception must not split: a library's loading or a fork handler (where the
    exception may be lost, or abort the process), a folder renamed aside before another takes
    its name. Only a handler written in Python is held: a signal ignored or left to the
    system stays so, and outside the main thread nothing is held."""
    held: list[tuple[int, Any]] = []

    def hold(signum: int, frame: Any) -> None:
        held.append((signum, frame))

    replaced: dict[int, Any] = {}
    with contextlib.suppress(ValueError):  # not the main thread: nothing to hold
        for signum in _STOPPING:
            handler = signal.getsignal(signum)
            if callable(handler):
                replaced[signum] = signal.signal(signum, hold)
    try:
        yield
    finally:
        for stopping, handler in replaced.items():
            if signal.getsignal(stopping) is hold:  # not one a library set meanwhile
                signal.signal(stopping, handler)
        if held:  # also in place of an error of the block's: the user stopped the command
            first, frame = held[0]
            replaced[first](first, frame)
