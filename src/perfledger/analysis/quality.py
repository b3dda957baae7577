"""Plausibility checks on one rank's analysed trace: what makes its figures doubtful.

Run after the steps and the time account, before anything is written. Each check counts what
it found (docs/accounting.md, "Trace quality"):

- ``shared_correlation``: host launch calls of one name sharing one correlation id — which
  call issued a task (and so the idle cause before it) is then a guess (runtimes that give a
  request and its reply one id, as MTIA's, use different names and are not counted);
- ``overlapping_stream_tasks``: device tasks that overlap on one stream, which runs its tasks
  one after the other, by more than the few µs old CUPTI clocks jitter, or that ran before a
  task issued after them on their stream: their times are off;
- ``non_nesting_slices``: operators, annotations, steps and data-loader slices on one thread
  that overlap without nesting — the host activity an idle gap is blamed on (and operator self
  time) reads from that nesting (Python-tracer slices, whose ends are approximate, and runtime
  calls, asynchronous on some devices, are not counted);
- ``relinked_tasks``: device tasks tied by their id to an operator their launch call does not
  lie in, owned by the operator that encloses the call instead;
- ``launchless_tasks``: device tasks whose launch is not in the trace (usually issued before
  the profiler started): they count as issued when they start;
- ``taskless_launches``: host launch calls (kernel launches, asynchronous copies and sets)
  whose device task is not in the trace: device work the time account cannot see (CUPTI often
  leaves out memsets, which only touch the operator tables);
- ``zero_length_tasks``: most device tasks last no time at all — durations that were not
  recorded, so busy time and steps read as empty;
- ``empty_windows``: step windows in which the device ran nothing, on a profile with device work;
- ``invariants``: a window longer than the trace, a negative category, categories that do not
  sum to the window, a share outside 0-100 % — never expected; flagged, never hidden.

Pure functions over the analysis results.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.graph_waits import coded_at
from perfledger.analysis.intervals import Int64Array, crossing_intervals
from perfledger.analysis.steps import launch_starts
from perfledger.model import schema
from perfledger.model.accounts import Accounting, HostWindowAccount, StepWindow, WindowAccount
from perfledger.model.findings import AdvisorReport
from perfledger.model.quality import (
    COMMUNICATION,
    EMPTY_WINDOWS,
    INVARIANTS,
    LAUNCHLESS_TASKS,
    NON_NESTING_SLICES,
    OPERATORS,
    OVERLAPPING_STREAM_TASKS,
    RELINKED_TASKS,
    REPLAY_ERROR,
    SHARED_CORRELATION,
    STEP_TIME,
    TASKLESS_LAUNCHES,
    TIME_ACCOUNT,
    UNMATCHED_COLLECTIVES,
    UTILIZATION,
    WHATIF,
    WHATIF_BOUNDS,
    ZERO_LENGTH_TASKS,
    QualityCheck,
)
from perfledger.model.whatif import REPLAY_MEDIAN_ERROR_PCT, REPLAY_WORST_ERROR_PCT, ReplayReport

# Overlaps up to this on one stream are the jitter of old CUPTI clocks (µs timestamps, seen
# up to 13 µs on a V100 trace), not a fault.
STREAM_OVERLAP_TOLERANCE_NS: Final = 20_000
# Host calls that issue one device task: kernel launches, asynchronous copies and memsets.
_LAUNCH_CALL: Final = re.compile(r"launch|memcpy|memset", re.IGNORECASE)
_KERNEL_LAUNCH: Final = re.compile(r"launch", re.IGNORECASE)
# The host slices whose nesting the time account reads.
_NESTED_SLICES: Final = (schema.CPU_OP, schema.ANNOTATION, schema.STEP, schema.DATALOADER)


def rank_checks(
    events: pa.Table,
    windows: Sequence[StepWindow],
    accounting: Accounting,
    *,
    where: str | None = None,
    launches: Int64Array | None = None,
    traced: Sequence[QualityCheck | None] | None = None,
) -> tuple[QualityCheck, ...]:
    """Every plausibility check of one analysed rank (those that found something); ``where``
    is what their messages name (the trace's file; default the rank). ``launches``:
    :func:`~perfledger.analysis.steps.launch_starts` of ``events`` if already computed;
    ``traced``: :func:`trace_checks` of the same arguments, if already made (beside the
    accounting, which only the last check reads)."""
    if events.num_rows == 0:
        return ()
    if traced is None:
        traced = trace_checks(events, windows, where=where, launches=launches)
    found = [*traced, _invariants(events, accounting, _named(events, where))]
    return tuple(c for c in found if c is not None and c.count > 0)


def trace_checks(
    events: pa.Table,
    windows: Sequence[StepWindow],
    *,
    where: str | None = None,
    launches: Int64Array | None = None,
) -> list[QualityCheck | None]:
    """The checks of :func:`rank_checks` that read no accounting, in its order (None: a
    check that found nothing to say)."""
    if events.num_rows == 0:
        return []
    rank = _named(events, where)
    if launches is None:
        launches = launch_starts(events)
    return [
        _shared_correlation(events, rank),
        _overlapping_stream_tasks(events, launches, rank),
        _non_nesting_slices(events, rank),
        _launchless_tasks(events, launches, rank),
        _taskless_launches(events, rank),
        _zero_length_tasks(events, rank),
        _empty_windows(events, windows, rank),
    ]


def _named(events: pa.Table, where: str | None) -> str:
    """What the checks' messages name: ``where``, else the rank."""
    return where or f"rank {int(events.column('rank')[0].as_py())}"


def _shared_correlation(events: pa.Table, rank: str) -> QualityCheck | None:
    # the columns read at the launch calls' rows only: no copy of a whole column
    rows = np.flatnonzero(columns.isin(events, "kind", schema.LAUNCH_KINDS))
    correlation = columns.int64_at(events, "correlation", rows)
    host = (columns.int64_at(events, "device", rows) < 0) & (correlation >= 0)
    rows, correlation = rows[host], correlation[host]
    if rows.size < 2:
        return None
    name = coded_at(events, "name", rows)[0]
    # distinct (correlation, name) pairs, counted on one sort of the pairs
    order = columns.pair_order(correlation, name)
    repeated = (np.diff(correlation[order]) == 0) & (np.diff(name[order]) == 0)
    shared = int(repeated.sum())
    return QualityCheck(
        SHARED_CORRELATION,
        shared,
        f"{rank}: {shared:,} host launch calls reuse the correlation id of another call "
        "of their name; "
        "which call issued a task, and the idle cause before it, are guesses",
        (TIME_ACCOUNT, OPERATORS),
        repaired=False,
    )


def _overlapping_stream_tasks(
    events: pa.Table, launches: Int64Array, rank: str
) -> QualityCheck | None:
    tasks = np.flatnonzero(columns.isin(events, "kind", schema.DEVICE_TASK_KINDS))
    if tasks.size < 2:
        return None
    device = columns.int64_at(events, "device", tasks)
    stream = columns.int64_at(events, "stream", tasks)
    start = columns.int64_at(events, "start_ns", tasks)
    end = start + columns.int64_at(events, "dur_ns", tasks)
    issued = launches[tasks]
    order = np.lexsort((start, stream, device))
    same = (device[order][1:] == device[order][:-1]) & (stream[order][1:] == stream[order][:-1])
    running_end = _running_max_by_group(end[order], same)
    overlap = same & (start[order][1:] < running_end[:-1] - STREAM_OVERLAP_TOLERANCE_NS)
    # a task issued before the one that ran just before it on its stream ran out of order
    known = (issued[order][1:] >= 0) & (issued[order][:-1] >= 0)
    reordered = (
        same & known & (issued[order][1:] < issued[order][:-1] - STREAM_OVERLAP_TOLERANCE_NS)
    )
    count = int((overlap | reordered).sum())
    return QualityCheck(
        OVERLAPPING_STREAM_TASKS,
        count,
        f"{rank}: {count:,} device tasks overlap the previous task on their stream or ran "
        "before a task issued after them (a stream runs its tasks one by one, in order): their "
        "times are off",
        (STEP_TIME, UTILIZATION, TIME_ACCOUNT),
        repaired=False,
    )


def _running_max_by_group(values: np.ndarray, same_as_previous: np.ndarray) -> np.ndarray:
    """The running maximum of ``values``, restarted where a row starts a new group."""
    group = np.concatenate(([0], np.cumsum(~same_as_previous)))
    # add a per-group offset that dwarfs every value, so one running maximum serves all groups
    span = int(values.max() - values.min()) + 1 if values.size else 1
    shifted = (values - values.min()) + group * span
    return np.asarray(np.maximum.accumulate(shifted) - group * span + values.min())


def _non_nesting_slices(events: pa.Table, rank: str) -> QualityCheck | None:
    rows = np.flatnonzero(
        columns.isin(events, "kind", _NESTED_SLICES) & (columns.int64(events, "device") < 0)
    )
    if rows.size < 2:
        return None
    pid = columns.int64_at(events, "pid", rows)
    thread = columns.int64_at(events, "stream", rows)
    start = columns.int64_at(events, "start_ns", rows)
    end = start + columns.int64_at(events, "dur_ns", rows)
    # the rows thread by thread, each thread's in start order (a stable sort)
    order = np.lexsort((thread, pid))
    pid, thread, start, end = pid[order], thread[order], start[order], end[order]
    bounds = np.flatnonzero((np.diff(pid) != 0) | (np.diff(thread) != 0)) + 1
    crossing = 0
    for first, stop in itertools.pairwise([0, *bounds.tolist(), rows.size]):  # over threads
        if stop - first > 1:
            crossing += int(crossing_intervals(start[first:stop], end[first:stop]).sum())
    return QualityCheck(
        NON_NESTING_SLICES,
        crossing,
        f"{rank}: {crossing:,} host slices overlap another slice of their thread without "
        "nesting in it; the host activity idle gaps are blamed on reads from that nesting",
        (TIME_ACCOUNT, OPERATORS),
        repaired=False,
    )


def _launchless_tasks(events: pa.Table, launches: Int64Array, rank: str) -> QualityCheck | None:
    tasks = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS)
    if not tasks.any():
        return None
    count = int((launches[tasks] < 0).sum())
    return QualityCheck(
        LAUNCHLESS_TASKS,
        count,
        f"{rank}: {count:,} of {int(tasks.sum()):,} device tasks have no launch in the "
        "trace (issued before the profiler started, or not recorded); they count as issued "
        "when they start",
        (OPERATORS,),
        repaired=False,
    )


def _taskless_launches(events: pa.Table, rank: str) -> QualityCheck | None:
    correlation = columns.int64(events, "correlation")
    calls = np.flatnonzero(
        columns.isin(events, "kind", schema.LAUNCH_KINDS)
        & (columns.int64(events, "device") < 0)
        & (correlation >= 0)
    )
    # the patterns tested once per distinct name
    launches = calls[_name_search(events, _LAUNCH_CALL)[calls]]
    if launches.size == 0:
        return None
    tasks = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS) & (correlation >= 0)
    missing = launches[~_present(correlation[launches], correlation[tasks])]
    kernels = int(_name_search(events, _KERNEL_LAUNCH)[missing].sum())
    # tasks that lost their correlation id may be these launches' own: only launches beyond
    # them are device work the account cannot see
    unlinked = int(
        (columns.isin(events, "kind", schema.DEVICE_TASK_KINDS) & (correlation < 0)).sum()
    )
    unseen = kernels > unlinked
    return QualityCheck(
        TASKLESS_LAUNCHES,
        int(missing.size),
        f"{rank}: {missing.size:,} of {launches.size:,} launch calls have no device task in the "
        f"trace ({f'{kernels:,} of them kernel launches' if kernels else 'copies and sets only'})"
        + (": device work the time account cannot see" if unseen else ""),
        (TIME_ACCOUNT, OPERATORS) if unseen else (OPERATORS,),
        repaired=False,
    )


def _present(values: Int64Array, pool: Int64Array) -> columns.BoolArray:
    """Which ``values`` are in ``pool`` (``np.isin``, by one sort of the pool and a binary
    search: a tenth of isin's time on the ids of a large trace)."""
    if pool.size == 0:
        return np.zeros(values.size, dtype=bool)
    pool = np.sort(pool, kind="stable")  # ids counted up as tasks are issued: a run sort
    at = np.minimum(np.searchsorted(pool, values), pool.size - 1)
    return np.asarray(pool[at] == values)


def _name_search(events: pa.Table, pattern: re.Pattern[str]) -> columns.BoolArray:
    """Rows whose name holds ``pattern`` (tested once per distinct name)."""
    return columns.matches(events, "name", lambda name: pattern.search(name) is not None)


def _zero_length_tasks(events: pa.Table, rank: str) -> QualityCheck | None:
    tasks = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS)
    total = int(tasks.sum())
    if total == 0:
        return None
    zero = int((columns.int64(events, "dur_ns")[tasks] == 0).sum())
    if 2 * zero <= total:
        return None
    return QualityCheck(
        ZERO_LENGTH_TASKS,
        zero,
        f"{rank}: {zero:,} of {total:,} device tasks last no time at all: their durations were "
        "not recorded, and busy time reads as none",
        (STEP_TIME, UTILIZATION, TIME_ACCOUNT),
        repaired=False,
    )


def _empty_windows(
    events: pa.Table, windows: Sequence[StepWindow], rank: str
) -> QualityCheck | None:
    tasks = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS)
    if not tasks.any() or not windows:
        return None
    # the tasks' starts and ends, each sorted (they come almost in order: a stable sort)
    task_start = columns.int64(events, "start_ns")[tasks]
    start = np.sort(task_start, kind="stable")
    end = np.sort(task_start + columns.int64(events, "dur_ns")[tasks], kind="stable")
    del task_start
    empty = [
        w
        for w in windows
        # no task starts in the window and none runs across its start
        if np.searchsorted(start, w.end_ns, "left") - np.searchsorted(start, w.start_ns, "left")
        == 0
        and np.searchsorted(start, w.start_ns, "left") == np.searchsorted(end, w.start_ns, "right")
    ]
    listed = ", ".join(str(w.step) for w in empty[:10]) + (" ..." if len(empty) > 10 else "")
    return QualityCheck(
        EMPTY_WINDOWS,
        len(empty),
        f"{rank}: the device ran nothing in {len(empty)} step windows ({listed})",
        (),
        repaired=False,
    )


def _invariants(events: pa.Table, accounting: Accounting, rank: str) -> QualityCheck | None:
    start = columns.int64(events, "start_ns")
    trace_ns = int((start + columns.int64(events, "dur_ns")).max() - start.min())
    broken: list[str] = []
    accounts: list[WindowAccount | HostWindowAccount] = [*accounting.windows, *accounting.host]
    for account in accounts:
        try:
            account.self_check()
        except AssertionError as error:
            broken.append(f"step {account.step}: {error}")
            continue
        if account.wall_ns > trace_ns:
            broken.append(f"step {account.step}: window longer than the trace")
    if not broken:
        return None
    return QualityCheck(
        INVARIANTS,
        len(broken),
        f"{rank}: {len(broken)} windows break the accounting invariants ({broken[0]})",
        (STEP_TIME, UTILIZATION, TIME_ACCOUNT),
        repaired=False,
    )


def relinked_tasks(links: pa.Table, *, where: str | None = None) -> tuple[QualityCheck, ...]:
    """``relinked_tasks``: device tasks whose id link named another host operator than the one
    their launch call lies in (:func:`perfledger.analysis.ops.link_device_tasks` re-linked them
    to the operator enclosing the call)."""
    if "relinked" not in links.column_names or links.num_rows == 0:
        return ()
    count = int(np.count_nonzero(np.asarray(links.column("relinked"), dtype=bool)))
    if not count:
        return ()
    rank = where or f"rank {int(links.column('rank')[0].as_py())}"
    return (
        QualityCheck(
            RELINKED_TASKS,
            count,
            f"{rank}: {count:,} device tasks were tied by their id to an operator their launch "
            "call does not lie in; each is owned by the operator enclosing its launch instead",
            (OPERATORS,),
            repaired=True,
        ),
    )


def replay_error(report: ReplayReport) -> tuple[QualityCheck, ...]:
    """``replay_error``: the step graph replayed unchanged misses the measured steps by more
    than 3 % at the median or 10 % at worst — the critical path and what-if predictions rest
    on a graph that does not explain the trace (docs/whatif.md)."""
    median, worst = report.median_error_pct, report.worst_error_pct
    if median is None or worst is None:
        return ()
    if median <= REPLAY_MEDIAN_ERROR_PCT and worst <= REPLAY_WORST_ERROR_PCT:
        return ()
    off = [s for s in report.steps if s.error_pct > REPLAY_WORST_ERROR_PCT] or list(report.steps)
    return (
        QualityCheck(
            REPLAY_ERROR,
            len(off),
            f"the step graph replays the measured steps with a median error of {median:.1f} % "
            f"(worst {worst:.1f} %, rank {off[0].rank} step {off[0].step}); the critical path "
            "and what-if predictions are doubtful",
            (WHATIF,),
            repaired=False,
        ),
    )


def replay_invariants(report: ReplayReport) -> tuple[QualityCheck, ...]:
    """``invariants`` of the critical paths (:meth:`perfledger.model.whatif.StepReplay.
    broken_invariant`): a class below 0, classes that do not sum to the replayed step, a
    communication whose wait and transfer do not add up to it — never expected; flagged."""
    broken = [
        f"rank {step.rank} step {step.step}: {error}"
        for step in report.steps
        if (error := step.broken_invariant()) is not None
    ]
    if not broken:
        return ()
    return (
        QualityCheck(
            INVARIANTS,
            len(broken),
            f"{len(broken)} critical paths break their invariants ({broken[0]})",
            (WHATIF,),
            repaired=False,
        ),
    )


def unmatched_collectives(report: ReplayReport) -> tuple[QualityCheck, ...]:
    """``unmatched_collectives``: collectives of several ranks the replay could not match
    across them (ranks that ran one a different number of times, or a participant that ended
    before the last one arrived): each keeps its observed duration, so a change on another
    rank does not move it, and its wait for its peers is the split's of its own rank."""
    count = report.unmatched_collectives
    if count <= 0:
        return ()
    return (
        QualityCheck(
            UNMATCHED_COLLECTIVES,
            count,
            f"{count} collectives could not be matched across ranks (run a different number "
            "of times, or a participant ended before the last one arrived): they keep their "
            "observed durations in the replay, and what-if predictions across ranks miss them",
            (WHATIF, COMMUNICATION),
            repaired=False,
        ),
    )


def whatif_bounds(advice: AdvisorReport | None) -> tuple[QualityCheck, ...]:
    """``whatif_bounds``: a fix (or the top fixes together), replayed, predicted a longer run
    than the unchanged graph; its gain was kept at 0 (``0 <= whatif_ms <= step`` holds by
    construction, docs/advisor.md), but the replay of that fix is doubtful."""
    if advice is None or advice.slower_replays == 0:
        return ()
    return (
        QualityCheck(
            WHATIF_BOUNDS,
            advice.slower_replays,
            f"{advice.slower_replays} replay(s) of the advisor's fixes predicted longer steps "
            "than the unchanged graph (their gain is counted as 0); those whatif_ms are doubtful",
            (WHATIF,),
            repaired=False,
        ),
    )
