"""Step windows: which stretch of time belongs to which training or inference step.

DESIGN.md: host step annotations give [hs_i, he_i). The device side of a step ends with the last
device task issued inside it, end_i = max(he_i, end of the last task whose launch began in
[hs_i, he_i)) — but a collective that runs on past the start of the next step's first task
ends the step there: the next step's work, running beside it, is the next step's. Windows
tile without overlap: start_i = max(hs_i, end_{i-1}). With no step annotation there is one
window, numbered 0, from the first to the last event — but the device's span (first task
start to last task end) when host activity around it makes the trace more than twice as long
as the device's work: never a host annotation that dwarfs the device's work.

Odd marks are repaired and counted (:class:`StepPlan`): step numbers used twice are given
fresh ones, marks that overlap are tiled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.graph_waits import coded_at
from perfledger.analysis.intervals import Int64Array
from perfledger.errors import PerfledgerError
from perfledger.model import schema, vendors
from perfledger.model.accounts import StepWindow
from perfledger.model.launches import LaunchKeys
from perfledger.model.quality import (
    DUPLICATE_STEP_NUMBERS,
    OVERLAPPING_STEPS,
    STEP_TIME,
    TIME_ACCOUNT,
    UTILIZATION,
    WINDOW_BEYOND_DEVICE,
    QualityCheck,
)

_STEP_NUMBER = re.compile(r"#\s*(\d+)\s*$")
# The window of a profile without step annotations carries this step number.
WHOLE_TRACE_STEP = 0
# Host activity around the device's span that makes the whole trace this many times longer than
# the device's work is not part of the one window (an outer annotation around the program).
HOST_BEYOND_DEVICE_RATIO: Final = 2.0


@dataclass(frozen=True)
class StepPlan:
    """The step windows of one rank and what was repaired to make them."""

    windows: tuple[StepWindow, ...]
    checks: tuple[QualityCheck, ...] = ()


def launch_starts(events: pa.Table, keys: LaunchKeys | None = None) -> Int64Array:
    """For each row, the start of the host call that launched it; -1 when none is known.

    A device task is linked to its launch by (rank, correlation): the host ``runtime`` or
    ``sync`` call carrying the same correlation id. Host rows get -1, and so do tasks whose id
    several calls of one name carry (the ``shared_correlation`` quality check counts them).
    ``keys``: :func:`launch_keys` of these events, if found already.
    """
    result = np.full(events.num_rows, -1, dtype=np.int64)
    keys = launch_keys(events) if keys is None else keys
    if keys.task_rows.size:
        result[keys.task_rows] = keys.starts(columns.int64_at(events, "start_ns", keys.launch_rows))
    return result


def launch_keys(events: pa.Table) -> LaunchKeys:
    """The calls that may have launched each task: the host calls carrying its (rank,
    correlation); the earliest of them is its launch (:func:`launch_starts`). A key that
    calls of one name carry twice is left out: which of them issued the task is unknown,
    and the task counts as issued when it starts."""
    empty = np.zeros(0, dtype=np.int64)
    none = LaunchKeys(empty, empty, empty, empty)
    if events.num_rows == 0:
        return none
    # the columns read at the calls' and the tasks' rows only: no copy of a whole column
    launch_rows = np.flatnonzero(columns.isin(events, "kind", schema.LAUNCH_KINDS))
    launch_rows = launch_rows[columns.int64_at(events, "device", launch_rows) < 0]
    launch_correlation = columns.int64_at(events, "correlation", launch_rows)
    launch_rows = launch_rows[launch_correlation >= 0]
    launch_correlation = launch_correlation[launch_correlation >= 0]
    task_rows = np.flatnonzero(columns.isin(events, "kind", schema.DEVICE_TASK_KINDS))
    task_correlation = columns.int64_at(events, "correlation", task_rows)
    task_rows = task_rows[task_correlation >= 0]
    task_correlation = task_correlation[task_correlation >= 0]
    if launch_rows.size == 0 or task_rows.size == 0:
        return none
    # one key per (rank, correlation); calls of different names may share an id (a request
    # and its reply), calls of one name may not
    launch_keys = columns.int64_at(events, "rank", launch_rows) * (1 << 40) + launch_correlation
    names = coded_at(events, "name", launch_rows)[0]
    order = columns.pair_order(launch_keys, names)
    keys_sorted = launch_keys[order]
    names_sorted = names[order]
    same_name = (keys_sorted[1:] == keys_sorted[:-1]) & (names_sorted[1:] == names_sorted[:-1])
    ambiguous_keys = np.unique(keys_sorted[1:][same_name])
    kept = ~np.isin(keys_sorted, ambiguous_keys)
    keys_sorted = keys_sorted[kept]
    grouped = launch_rows[order[kept]]
    if keys_sorted.size == 0:
        return none
    first_of_key = np.ones(keys_sorted.size, dtype=bool)
    first_of_key[1:] = keys_sorted[1:] != keys_sorted[:-1]
    bounds = np.flatnonzero(first_of_key)
    keys_unique = keys_sorted[bounds]
    task_keys = columns.int64_at(events, "rank", task_rows) * (1 << 40) + task_correlation
    pos = np.clip(np.searchsorted(keys_unique, task_keys), 0, keys_unique.size - 1)
    found = keys_unique[pos] == task_keys
    return _of_tasks(LaunchKeys(task_rows[found], pos[found], grouped, bounds))


def _of_tasks(keys: LaunchKeys) -> LaunchKeys:
    """``keys`` without the keys no task carries, and their calls: the calls of a runtime
    that launch nothing (stream waits, event queries, occupancy queries: half the calls with
    a correlation id in a CUDA trace), whose starts every replay would otherwise map again
    for no task."""
    used = np.zeros(keys.bounds.size, dtype=bool)
    used[keys.task_key] = True
    if used.all():
        return keys
    calls = np.diff(np.append(keys.bounds, keys.launch_rows.size))
    kept_calls = calls[used]
    bounds = np.zeros(kept_calls.size, dtype=np.int64)
    np.cumsum(kept_calls[:-1], out=bounds[1:])
    renumbered = np.cumsum(used) - 1  # each kept key's place among the kept
    return LaunchKeys(
        keys.task_rows,
        renumbered[keys.task_key],
        keys.launch_rows[np.repeat(used, calls)],
        bounds,
    )


def mark_steps(events: pa.Table, name: str, source: str) -> pa.Table:
    """The events with the host events named ``name`` as the step marks (``--step-mark``):
    they become steps, numbered by the ``#N`` in their name or else in order, and the trace's
    own step marks become plain annotations. ``source`` names the trace in the error raised
    when no host event has that name."""
    names = columns.strings(events, "name")
    host = columns.int64(events, "device") < 0
    chosen = host & (names == name)
    if not chosen.any():
        raise PerfledgerError(
            f"{source}: --step-mark {name!r}: no host event of that name in the trace"
        )
    kinds = columns.strings(events, "kind")
    kinds = np.where(chosen, schema.STEP, np.where(kinds == schema.STEP, schema.ANNOTATION, kinds))
    field = events.schema.field("kind")
    column = pa.array(kinds.tolist(), pa.string()).dictionary_encode().cast(field.type)
    return events.set_column(events.schema.get_field_index("kind"), field, column)


def step_number(name: str, fallback: int) -> int:
    """The step number written in a step annotation (``ProfilerStep#12`` → 12)."""
    match = _STEP_NUMBER.search(name)
    return int(match.group(1)) if match else fallback


def step_annotations(events: pa.Table) -> list[tuple[int, int, int]]:
    """(step, host_start_ns, host_end_ns) of the step annotations, sorted by start.

    When several host threads carry step annotations, the thread with the most of them is the
    one that drives the steps (the others are usually nested copies).
    """
    rows = step_mark_rows(events)
    if rows.size == 0:
        return []
    start = columns.int64_at(events, "start_ns", rows)
    end = start + columns.int64_at(events, "dur_ns", rows)
    return annotations_at(mark_names(events, rows), start, end)


def step_mark_rows(events: pa.Table) -> Int64Array:
    """The rows of the step annotations of the thread that drives the steps (the thread with
    the most of them; ties go to the lowest (pid, thread)), in row order."""
    rows = np.flatnonzero(columns.isin(events, "kind", [schema.STEP]))
    if rows.size == 0:
        return rows
    pid = columns.int64_at(events, "pid", rows)
    thread = columns.int64_at(events, "stream", rows)
    pairs = np.stack([pid, thread], axis=1)
    _, inverse, counts = np.unique(pairs, axis=0, return_inverse=True, return_counts=True)
    best = int(np.argmax(counts))  # np.unique sorts keys: ties go to the lowest (pid, thread)
    return rows[np.flatnonzero(inverse.reshape(-1) == best)]


def mark_names(events: pa.Table, rows: Int64Array) -> list[str]:
    """The names of the step annotations at ``rows``."""
    # the one column taken: a take on the table would first join every column's chunks
    return [str(name) for name in columns.strings(events.select(["name"]).take(rows), "name")]


def annotations_at(
    names: list[str], start: Int64Array, end: Int64Array
) -> list[tuple[int, int, int]]:
    """(step, host_start_ns, host_end_ns) of step annotations of these names and times,
    sorted by start (stable), numbered by their names, numbers used twice made fresh."""
    order = np.argsort(start, kind="stable")
    result = []
    for position, i in enumerate(order.tolist()):
        result.append((step_number(names[i], position), int(start[i]), int(end[i])))
    return _unique_numbers(result)


def _unique_numbers(annotations: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The marks with a step number used twice given fresh ones, after the highest."""
    numbers = [n for n, _, _ in annotations]
    if len(set(numbers)) == len(numbers):
        return annotations
    seen: set[int] = set()
    fresh = max(numbers) + 1
    result = []
    for number, lo, hi in annotations:
        if number in seen:
            number, fresh = fresh, fresh + 1
        seen.add(number)
        result.append((number, lo, hi))
    return result


def _duplicate_numbers(events: pa.Table) -> int:
    """How many step marks repeat a step number an earlier mark has."""
    rows = np.flatnonzero(columns.isin(events, "kind", [schema.STEP]))
    if rows.size < 2:
        return 0
    names = columns.strings(columns.take_rows(events, rows, ["name"]), "name")
    numbers = [step_number(str(name), -1 - i) for i, name in enumerate(names)]
    return len(numbers) - len(set(numbers))


def step_windows(events: pa.Table, launches: Int64Array | None = None) -> tuple[StepWindow, ...]:
    """The step windows of one rank's events (:func:`step_plan` without its checks)."""
    return step_plan(events, launches).windows


def step_plan(
    events: pa.Table, launches: Int64Array | None = None, *, where: str | None = None
) -> StepPlan:
    """The step windows of one rank's events, with the repairs made to find them.

    Args:
        events: one rank's canonical events.
        launches: :func:`launch_starts` of ``events`` if already computed.
        where: what the checks' messages name (the trace's file; default the rank).
    """
    if events.num_rows == 0:
        return StepPlan(())
    rank = int(events.column("rank")[0].as_py())
    where = where or f"rank {rank}"
    annotations = step_annotations(events)
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    is_task = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS)
    if not annotations:
        return whole_window(rank, start, end, is_task, where)
    if launches is None:
        launches = launch_starts(events)
    # a task with no known launch counts as issued when it starts
    issued = np.where(launches >= 0, launches, start)[is_task]
    windows = windows_at(
        rank, annotations, issued, start[is_task], end[is_task], comm_rows(events)[is_task]
    )
    return StepPlan(windows, _mark_checks(events, annotations, where))


def comm_rows(events: pa.Table) -> np.ndarray:
    """Which rows are communication (by kind, or a collective's kernel name)."""
    return columns.isin(events, "kind", [schema.COMM]) | columns.matches(
        events, "name", lambda name: bool(vendors.COMM_KERNEL.search(name))
    )


def windows_at(
    rank: int,
    annotations: list[tuple[int, int, int]],
    issued: Int64Array,
    task_start: Int64Array,
    task_end: Int64Array,
    is_comm: np.ndarray,
) -> tuple[StepWindow, ...]:
    """The windows of step ``annotations`` (:func:`step_annotations`) over device tasks: when
    each was issued (its launch's start, else its own), its start and end, whether it is
    communication."""
    order = np.argsort(issued, kind="stable")
    issued, task_start, task_end, is_comm = (
        issued[order],
        task_start[order],
        task_end[order],
        is_comm[order],
    )
    bounds = [
        (
            int(np.searchsorted(issued, lo, side="left")),
            int(np.searchsorted(issued, hi, side="left")),
        )
        for _, lo, hi in annotations
    ]
    windows: list[StepWindow] = []
    previous_end: int | None = None
    for i, (number, host_start, host_end) in enumerate(annotations):
        lo, hi = bounds[i]
        device_end = _device_end(task_start, task_end, is_comm, lo, hi, bounds, i, host_end)
        window_start = host_start if previous_end is None else max(host_start, previous_end)
        window_end = max(host_end, device_end, window_start)
        windows.append(StepWindow(rank, number, host_start, host_end, window_start, window_end))
        previous_end = window_end
    return tuple(windows)


def _device_end(
    task_start: Int64Array,
    task_end: Int64Array,
    is_comm: np.ndarray,
    lo: int,
    hi: int,
    bounds: list[tuple[int, int]],
    i: int,
    host_end: int,
) -> int:
    """Where the device side of step ``i`` ends: its last task's end — but a collective that
    runs on past the start of the next step's first task ends the step there (the next step's
    work runs beside it and is the next step's)."""
    if hi <= lo:
        return host_end
    work = ~is_comm[lo:hi]
    work_end = int(task_end[lo:hi][work].max()) if work.any() else host_end
    comm_end = int(task_end[lo:hi][~work].max()) if (~work).any() else work_end
    if comm_end <= work_end or i + 1 >= len(bounds):
        return max(work_end, comm_end)
    next_lo, next_hi = bounds[i + 1]
    if next_hi <= next_lo:
        return comm_end
    first_next = int(task_start[next_lo:next_hi].min())
    return max(work_end, min(comm_end, first_next))


def whole_window(
    rank: int, start: Int64Array, end: Int64Array, is_task: np.ndarray, where: str
) -> StepPlan:
    """The one window of a profile without step marks: the whole trace, or the device's span
    when host activity around it dwarfs the device's work."""
    first, last = int(start.min()), int(end.max())
    whole = StepPlan((StepWindow(rank, WHOLE_TRACE_STEP, first, last, first, last),))
    if not is_task.any():
        return whole
    lo, hi = int(start[is_task].min()), int(end[is_task].max())
    if last - first <= HOST_BEYOND_DEVICE_RATIO * max(hi - lo, 1):
        return whole
    window = StepWindow(rank, WHOLE_TRACE_STEP, lo, hi, lo, hi)
    check = QualityCheck(
        WINDOW_BEYOND_DEVICE,
        1,
        f"{where}: no step marks, and host activity spans {(last - first) / 1e6:,.3f} ms "
        f"around {(hi - lo) / 1e6:,.3f} ms of device work; the profiled window is the device's "
        "span",
        (UTILIZATION, TIME_ACCOUNT),
        repaired=True,
    )
    return StepPlan((window,), (check,))


def _mark_checks(
    events: pa.Table, annotations: list[tuple[int, int, int]], where: str
) -> tuple[QualityCheck, ...]:
    """Step marks that needed repair: numbers used twice, marks that overlap."""
    checks = []
    duplicates = _duplicate_numbers(events)
    if duplicates:
        checks.append(
            QualityCheck(
                DUPLICATE_STEP_NUMBERS,
                duplicates,
                f"{where}: {duplicates} step marks repeat the number of an earlier step; "
                "they were given fresh numbers",
                (STEP_TIME,),
                repaired=True,
            )
        )
    overlapping = sum(1 for (_, _, end), (_, start, _) in pairwise(annotations) if start < end)
    if overlapping:
        checks.append(
            QualityCheck(
                OVERLAPPING_STEPS,
                overlapping,
                f"{where}: {overlapping} step marks start before the previous step ends; "
                "each window starts where the previous one ends",
                (STEP_TIME, TIME_ACCOUNT),
                repaired=True,
            )
        )
    return tuple(checks)


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
        # the window each row was issued in, if any: each temporary made once and reused (a
        # column of the rows' each: fresh pages cost more than the passes over them)
        at = np.searchsorted(host_starts, issued, side="right")
        at -= 1
        inside = at >= 0
        np.maximum(at, 0, out=at)
        inside &= issued < host_ends[at]
        del issued
        step = numbers[at]
        step[~inside] = schema.NO_STEP
    index = events.schema.get_field_index("step")
    return events.set_column(index, events.schema.field("step"), pa.array(step, pa.int32()))
