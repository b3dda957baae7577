"""Step windows: which stretch of time belongs to which training or inference step.

DESIGN.md: host step annotations give [hs_i, he_i). The device side of a step ends with the last
device task issued inside it, end_i = max(he_i, end of the last task whose launch began in
[hs_i, he_i)), and windows tile without overlap: start_i = max(hs_i, end_{i-1}). With no step
annotation there is one window from the first to the last event, numbered 0.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.intervals import Int64Array
from perfledger.model import schema
from perfledger.model.accounts import StepWindow

_STEP_NUMBER = re.compile(r"#\s*(\d+)\s*$")
# The window of a profile without step annotations carries this step number.
WHOLE_TRACE_STEP = 0


def launch_starts(events: pa.Table) -> Int64Array:
    """For each row, the start of the host call that launched it; -1 when none is known.

    A device task is linked to its launch by (rank, correlation): the host ``runtime`` or
    ``sync`` call carrying the same correlation id. Host rows get -1.
    """
    n = events.num_rows
    result = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return result
    correlation = columns.int64(events, "correlation")
    rank = columns.int64(events, "rank")
    start = columns.int64(events, "start_ns")
    device = columns.int64(events, "device")
    is_launch = columns.isin(events, "kind", schema.LAUNCH_KINDS) & (device < 0)
    is_task = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS) & (correlation >= 0)
    launch_rows = np.flatnonzero(is_launch & (correlation >= 0))
    task_rows = np.flatnonzero(is_task)
    if launch_rows.size == 0 or task_rows.size == 0:
        return result
    # one key per (rank, correlation); the earliest launch wins when a source repeats an id
    launch_keys = rank[launch_rows] * (1 << 40) + correlation[launch_rows]
    order = np.lexsort((start[launch_rows], launch_keys))
    keys_sorted = launch_keys[order]
    first_of_key = np.ones(keys_sorted.size, dtype=bool)
    first_of_key[1:] = keys_sorted[1:] != keys_sorted[:-1]
    keys_unique = keys_sorted[first_of_key]
    starts_unique = start[launch_rows][order][first_of_key]
    task_keys = rank[task_rows] * (1 << 40) + correlation[task_rows]
    pos = np.clip(np.searchsorted(keys_unique, task_keys), 0, keys_unique.size - 1)
    found = keys_unique[pos] == task_keys
    result[task_rows[found]] = starts_unique[pos[found]]
    return result


def step_number(name: str, fallback: int) -> int:
    """The step number written in a step annotation (``ProfilerStep#12`` → 12)."""
    match = _STEP_NUMBER.search(name)
    return int(match.group(1)) if match else fallback


def step_annotations(events: pa.Table) -> list[tuple[int, int, int]]:
    """(step, host_start_ns, host_end_ns) of the step annotations, sorted by start.

    When several host threads carry step annotations, the thread with the most of them is the
    one that drives the steps (the others are usually nested copies).
    """
    rows = np.flatnonzero(columns.isin(events, "kind", [schema.STEP]))
    if rows.size == 0:
        return []
    pid = columns.int64(events, "pid")[rows]
    thread = columns.int64(events, "stream")[rows]
    start = columns.int64(events, "start_ns")[rows]
    dur = columns.int64(events, "dur_ns")[rows]
    pairs = np.stack([pid, thread], axis=1)
    keys, inverse, counts = np.unique(pairs, axis=0, return_inverse=True, return_counts=True)
    best = int(np.argmax(counts))  # np.unique sorts keys: ties go to the lowest (pid, thread)
    chosen = np.flatnonzero(inverse.reshape(-1) == best)
    names = columns.strings(events.take(rows[chosen]), "name")
    order = np.argsort(start[chosen], kind="stable")
    result = []
    for position, i in enumerate(order):
        number = step_number(str(names[i]), position)
        result.append((number, int(start[chosen][i]), int(start[chosen][i] + dur[chosen][i])))
    del keys
    return result


def step_windows(events: pa.Table, launches: Int64Array | None = None) -> tuple[StepWindow, ...]:
    """The step windows of one rank's events.

    Args:
        events: one rank's canonical events.
        launches: :func:`launch_starts` of ``events`` if already computed.
    """
    if events.num_rows == 0:
        return ()
    rank = int(events.column("rank")[0].as_py())
    annotations = step_annotations(events)
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    if not annotations:
        first, last = int(start.min()), int(end.max())
        return (StepWindow(rank, WHOLE_TRACE_STEP, first, last, first, last),)
    if launches is None:
        launches = launch_starts(events)
    is_task = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS)
    # a task with no known launch counts as issued when it starts
    issued = np.where(launches >= 0, launches, start)[is_task]
    task_end = end[is_task]
    order = np.argsort(issued, kind="stable")
    issued, task_end = issued[order], task_end[order]
    windows: list[StepWindow] = []
    previous_end: int | None = None
    for number, host_start, host_end in annotations:
        lo = np.searchsorted(issued, host_start, side="left")
        hi = np.searchsorted(issued, host_end, side="left")
        device_end = int(task_end[lo:hi].max()) if hi > lo else host_end
        window_start = host_start if previous_end is None else max(host_start, previous_end)
        window_end = max(host_end, device_end, window_start)
        windows.append(StepWindow(rank, number, host_start, host_end, window_start, window_end))
        previous_end = window_end
    return tuple(windows)


def assign_steps(
    events: pa.Table, windows: tuple[StepWindow, ...], launches: Int64Array | None = None
) -> pa.Table:
    """The events with the ``step`` column filled (a new table; the input is not changed).

    A device task belongs to the step inside whose host annotation it was issued; a host event
    to the step whose host annotation contains its start. Anything else gets -1. Without step
    annotations every event belongs to the whole-trace window.
    """
    n = events.num_rows
    if n == 0 or not windows:
        return events
    if len(windows) == 1 and windows[0].step == WHOLE_TRACE_STEP and not step_annotations(events):
        step = np.full(n, WHOLE_TRACE_STEP, dtype=np.int32)
    else:
        if launches is None:
            launches = launch_starts(events)
        start = columns.int64(events, "start_ns")
        issued = np.where(launches >= 0, launches, start)
        host_starts = np.array([w.host_start_ns for w in windows], dtype=np.int64)
        host_ends = np.array([w.host_end_ns for w in windows], dtype=np.int64)
        numbers = np.array([w.step for w in windows], dtype=np.int32)
        order = np.argsort(host_starts, kind="stable")
        host_starts, host_ends, numbers = host_starts[order], host_ends[order], numbers[order]
        i = np.searchsorted(host_starts, issued, side="right") - 1
        i_c = np.clip(i, 0, None)
        inside = (i >= 0) & (issued < host_ends[i_c])
        step = np.where(inside, numbers[i_c], schema.NO_STEP).astype(np.int32)
    index = events.schema.get_field_index("step")
    return events.set_column(index, events.schema.field("step"), pa.array(step, pa.int32()))
