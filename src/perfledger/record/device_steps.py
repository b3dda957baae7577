"""Each step's time on the device: what the host's clock cannot see of asynchronous steps.

A CUDA (or ROCm) program's host runs ahead of its device: a step whose work is queued without
waiting for it (a replayed CUDA graph, a loop without ``.item()``) ends on the host long before
its kernels ran. The host's step times then measure how fast work is queued, not the step.
While profiling, the profiler's own writing waits for the device, so the profiled steps' host
times include the device's work and the unprofiled ones do not: compared, they report the
device's work as the profiler's overhead.

Where a step begins and where it ends on the host (the same instants as its logged host
times: the profiler's own bookkeeping between two steps is in neither), a timing event is
recorded on the current stream of the current device — never while that stream is being
captured into a CUDA graph. A step's device time is the time between its two events, read
once both have completed: never waited for. Only where the program itself has initialised
CUDA: a CPU program never touches it.
"""

from __future__ import annotations

import sys
from typing import Any


def _cuda() -> Any:
    """torch.cuda where the program uses it, else None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        if cuda.is_current_stream_capturing():
            return None
    except Exception:  # a broken or partial CUDA runtime: no device times
        return None
    return cuda


# Steps whose events are kept waiting for the device at most: a device that never gets there
# (a hung program) holds this many, not one per step.
MAX_PENDING = 1024


class DeviceSteps:
    """The device's side of the steps of one process (used under the driver's lock: one
    boundary at a time)."""

    def __init__(self) -> None:
        # (step, its start event, its end event or None while it runs, device), oldest first
        self._pending: list[tuple[int, Any, Any, int]] = []
        self._broken = False

    def _event(self) -> tuple[Any, int] | None:
        if self._broken:
            return None
        cuda = _cuda()
        if cuda is None:
            return None
        try:
            event = cuda.Event(enable_timing=True)
            event.record()
            return event, int(cuda.current_device())
        except Exception:  # no timing on this runtime: none from now on
            self._broken = True
            self._pending.clear()
            return None

    def begin(self, step: int) -> None:
        """Step ``step`` begins now."""
        made = self._event()
        if made is not None:
            self._pending.append((step, made[0], None, made[1]))
            del self._pending[:-MAX_PENDING]

    def end(self, step: int) -> None:
        """Step ``step`` ends now."""
        if not self._pending or self._pending[-1][0] != step or self._pending[-1][2] is not None:
            return
        made = self._event()
        begun, start, _, device = self._pending.pop()
        if made is not None and made[1] == device:
            self._pending.append((begun, start, made[0], device))

    def completed(self) -> list[tuple[int, int]]:
        """(step, device ns) of each ended step whose events have both completed since the
        last call, in step order; their events let go."""
        done: list[tuple[int, int]] = []
        pending = self._pending
        try:
            while pending and pending[0][2] is not None:
                step, start, end, _ = pending[0]
                if not end.query():
                    break  # the device has not got there yet, nor to the steps after it
                done.append((step, max(round(start.elapsed_time(end) * 1e6), 0)))
                pending.pop(0)
        except Exception:
            self._broken = True
            pending.clear()
        return done
