"""Device idle gaps: how long they are, why the device was idle, and the worst of them.

``gap_report(gaps, events)`` reads the idle intervals of the accounting
(:data:`perfledger.model.accounts.GAPS_SCHEMA`) and returns a :class:`GapReport`:
- ``buckets``: a histogram of gap durations in :data:`GAP_BUCKETS` (<10 µs, 10–100 µs,
  0.1–1 ms, 1–10 ms, >10 ms; lower bound included), with count and total ns per bucket and per
  idle cause (every cause of IDLE_CAUSES, then any other cause found; a null cause counts as
  "other"); gaps of zero length are left out;
- ``worst``: the longest gaps (longest first, ties by start), :data:`WORST_GAPS_SCHEMA`:
    rank, device, step, start_ns, end_ns, dur_ns, cause,
    next_task       -- name of the device task that ends the gap (null when none),
    host_op         -- the innermost cpu_op running on the host at the gap start (null if none),
    host_annotation -- the innermost user annotation running then (null if none).
  "Innermost" is the latest started among those running at the gap start on any thread of the
  rank (the shortest on a tie): the host's most specific activity at that moment.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.ops import take_rows
from perfledger.model import schema
from perfledger.model.accounts import IDLE_CAUSES
from perfledger.model.gaps import WORST_GAPS_SCHEMA, CauseShare, GapBucket, GapReport

_INT64_MIN: Final = int(np.iinfo(np.int64).min)

# (label, lower bound ns included, upper bound ns excluded; None: unbounded)
GAP_BUCKETS: Final = (
    ("<10us", 0, 10_000),
    ("10-100us", 10_000, 100_000),
    ("0.1-1ms", 100_000, 1_000_000),
    ("1-10ms", 1_000_000, 10_000_000),
    (">10ms", 10_000_000, None),
)
WORST_GAPS: Final = 20


def gap_report(gaps: pa.Table, events: pa.Table, worst: int = WORST_GAPS) -> GapReport:
    """Histogram of gap durations by bucket and cause, and the ``worst`` longest gaps."""
    dur = np.asarray(gaps["dur_ns"], dtype=np.int64)
    kept = np.flatnonzero(dur > 0)
    gaps = gaps.take(pa.array(kept, pa.int64()))
    dur = dur[kept]
    cause = pc.fill_null(pc.cast(gaps["cause"], pa.string()), "other")
    seen = {str(c) for c in pc.unique(cause).to_pylist()}
    known = list(IDLE_CAUSES) + sorted(seen - set(IDLE_CAUSES))
    cause_index = np.asarray(
        pc.index_in(cause, value_set=pa.array(known, pa.string())), dtype=np.int64
    )

    edges = np.array([lower for _, lower, _ in GAP_BUCKETS[1:]], dtype=np.int64)
    bucket = np.searchsorted(edges, dur, side="right")
    cell = bucket * len(known) + cause_index
    size = len(GAP_BUCKETS) * len(known)
    cell_count = np.bincount(cell, minlength=size).reshape(len(GAP_BUCKETS), len(known))
    cell_total = _int_bincount(cell, dur, size).reshape(len(GAP_BUCKETS), len(known))
    buckets = tuple(
        GapBucket(
            label=label,
            lower_ns=lower,
            upper_ns=upper,
            count=int(cell_count[b].sum()),
            total_ns=int(cell_total[b].sum()),
            by_cause=tuple(
                CauseShare(name, int(cell_count[b, c]), int(cell_total[b, c]))
                for c, name in enumerate(known)
            ),
        )
        for b, (label, lower, upper) in enumerate(GAP_BUCKETS)
    )
    return GapReport(
        buckets=buckets,
        count=int(dur.size),
        total_ns=int(dur.sum()),
        worst=_worst_gaps(gaps, events, worst),
    )


def _int_bincount(
    index: npt.NDArray[np.int64], weight: npt.NDArray[np.int64], size: int
) -> npt.NDArray[np.int64]:
    # np.bincount sums weights in float64; ns totals must stay exact integers.
    total = np.zeros(size, dtype=np.int64)
    np.add.at(total, index, weight)
    return total


def _worst_gaps(gaps: pa.Table, events: pa.Table, worst: int) -> pa.Table:
    dur = np.asarray(gaps["dur_ns"], dtype=np.int64)
    # only the gaps at least as long as the worst-th longest can be among the worst: those
    # sorted (in row order, as a sort of every gap would meet them)
    if 0 < worst < dur.size:
        candidates = np.flatnonzero(dur >= np.partition(dur, dur.size - worst)[dur.size - worst])
    else:
        candidates = np.arange(dur.size if worst > 0 else 0)
    order = candidates[
        np.lexsort(
            (
                np.asarray(gaps["device"], dtype=np.int64)[candidates],
                np.asarray(gaps["rank"], dtype=np.int64)[candidates],
                np.asarray(gaps["start_ns"], dtype=np.int64)[candidates],
                -dur[candidates],
            )
        )
    ][:worst]
    top = gaps.take(pa.array(order, pa.int64()))
    task_names = _ending_task(events, top)
    rank = np.asarray(top["rank"], dtype=np.int64)
    start = np.asarray(top["start_ns"], dtype=np.int64)
    return pa.table(
        {
            "rank": top["rank"],
            "device": top["device"],
            "step": top["step"],
            "start_ns": top["start_ns"],
            "end_ns": top["end_ns"],
            "dur_ns": top["dur_ns"],
            "cause": top["cause"],
            "next_task": task_names,
            "host_op": _running_at(events, schema.CPU_OP, rank, start),
            "host_annotation": _running_at(events, schema.ANNOTATION, rank, start),
        }
    ).cast(WORST_GAPS_SCHEMA)


def _ending_task(events: pa.Table, top: pa.Table) -> pa.Array:
    """Name of the device task that ends each gap (null when the gap names none).

    ``next_task`` is a row of the rank's own events table; when the row does not hold a task
    of that rank and device starting at the gap end (tables of several ranks concatenated),
    the task is looked up by (rank, device, start).
    """
    next_task = np.asarray(top["next_task"], dtype=np.int64)
    rank = np.asarray(top["rank"], dtype=np.int64)
    device = np.asarray(top["device"], dtype=np.int64)
    end = np.asarray(top["end_ns"], dtype=np.int64)
    # the kinds tested once per distinct kind, not per row
    is_task = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS)
    chosen = np.full(len(next_task), -1, dtype=np.int64)
    # the rows named first, read at those rows only; whole columns only for a row that
    # is not the task it should be
    named = np.flatnonzero((next_task >= 0) & (next_task < events.num_rows))
    named = named[is_task[next_task[named]]]
    at = np.unique(next_task[named])
    held = columns.take_rows(events, at, ["rank", "device", "start_ns"])
    place = np.searchsorted(at, next_task[named])
    same = (
        (columns.int64(held, "rank")[place] == rank[named])
        & (columns.int64(held, "device")[place] == device[named])
        & (columns.int64(held, "start_ns")[place] == end[named])
    )
    chosen[named[same]] = next_task[named[same]]
    looked_up = np.flatnonzero((next_task >= 0) & (chosen < 0))
    if looked_up.size:
        event_rank = columns.int64(events, "rank")
        event_device = columns.int64(events, "device")
        event_start = columns.int64(events, "start_ns")
        for i in looked_up.tolist():
            match = np.flatnonzero(
                is_task
                & (event_rank == rank[i])
                & (event_device == device[i])
                & (event_start == end[i])
            )
            if match.size:
                chosen[i] = match[0]
    # chunk by chunk: a take on the whole column would first join its chunks
    return pc.cast(take_rows(events.column("name"), chosen), pa.string())


def _running_at(
    events: pa.Table, kind: str, rank: npt.NDArray[np.int64], at_ns: npt.NDArray[np.int64]
) -> pa.Array:
    """Name of the innermost ``kind`` event of each rank running at each instant (or null)."""
    # the rows of that kind read at those rows only (a filter copies what it keeps)
    rows = np.flatnonzero(columns.isin(events, "kind", [kind]))
    taken = columns.take_rows(events, rows, ["rank", "start_ns", "dur_ns"])
    host_rank = columns.int64(taken, "rank")
    host_start = columns.int64(taken, "start_ns")
    host_end = host_start + columns.int64(taken, "dur_ns")
    del taken
    # by start (the rows of one rank come so already): what runs at t started at most the
    # longest run before it, and no later than t
    if bool((host_start[1:] >= host_start[:-1]).all()):
        by_start, starts = np.arange(host_start.size), host_start
    else:
        by_start = np.argsort(host_start, kind="stable")
        starts = host_start[by_start]
    longest = int((host_end - host_start).max(initial=0))
    chosen = np.full(len(at_ns), -1, dtype=np.int64)
    # One vectorised pass per reported gap (a handful) over the rows that may run then.
    for i, (r, t) in enumerate(zip(rank, at_ns, strict=True)):
        earliest = max(int(t) - max(longest, 0), _INT64_MIN)
        lo = int(np.searchsorted(starts, earliest, side="left"))
        hi = int(np.searchsorted(starts, t, side="right"))
        # by start, then row: of the innermost's ties (start and length), the first row
        near = by_start[lo:hi]
        running = near[(host_rank[near] == r) & (host_end[near] > t)]
        if running.size:
            pick = np.lexsort((host_end[running] - host_start[running], -host_start[running]))
            chosen[i] = running[pick[0]]
    picked = np.where(chosen >= 0, rows[np.maximum(chosen, 0)] if rows.size else -1, -1)
    return pc.cast(take_rows(events.column("name"), picked), pa.string())
