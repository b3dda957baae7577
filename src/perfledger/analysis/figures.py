"""The headline figures of a profile, each defined once: every consumer (summary.json, the
terminal, the report, the ledger, diff) calls these functions or reads what they returned.

They read the step_trace table (:func:`perfledger.model.accounts.step_trace_table`): the
in-memory analysis and a stored profile's step_trace.csv hold the same rows, so a figure is
the same whether it comes from a fresh analysis or a profile on disk. The steps that stand for
a profile (median, slowest, fastest) are chosen here too, from the step windows of every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.model.accounts import StepWindow
from perfledger.model.schema import SPAN_STEP

FloatArray = npt.NDArray[np.float64]


def window_rows(step_trace: pa.Table) -> pa.Table:
    """The rows of the accounted windows (each rank, device and step), span rows left out."""
    if step_trace.num_rows == 0:
        return step_trace
    return step_trace.filter(pc.not_equal(step_trace.column("step"), SPAN_STEP))


def is_host_only(step_trace: pa.Table) -> bool:
    """A host-only (CPU) profile: its step_trace has the main thread's columns."""
    return "compute_ns" not in step_trace.column_names


def device_busy_ms(step_trace: pa.Table) -> float | None:
    """The device's work in a step: the median over the accounted windows (every rank,
    device and step) of their busy time, wall less idle (ms); None for a host-only profile
    or no window."""
    if is_host_only(step_trace):
        return None
    rows = window_rows(step_trace)
    if rows.num_rows == 0:
        return None
    busy = np.asarray(rows.column("wall_ns"), np.float64) - np.asarray(
        rows.column("idle_ns"), np.float64
    )
    return float(np.median(busy)) / 1e6


def step_walls_ms(step_trace: pa.Table, step_count: int) -> FloatArray:
    """One wall time (ms) per rank and annotated step, in (rank, step) order; empty without
    step annotations (the one window is then not a step)."""
    if step_count <= 0:
        return np.zeros(0)
    rows = window_rows(step_trace)
    if rows.num_rows == 0:
        return np.zeros(0)
    # every device of a rank shares the rank's step windows: one sample per (rank, step)
    grouped = (
        rows.group_by(["rank", "step"], use_threads=False)
        .aggregate([("wall_ns", "max")])
        .sort_by([("rank", "ascending"), ("step", "ascending")])
    )
    return np.asarray(grouped.column("wall_ns_max"), dtype=np.float64) / 1e6


def step_time_ms(step_trace: pa.Table, step_count: int) -> float | None:
    """The profile's step time: the median wall time of its steps over every rank (ms);
    None without step annotations."""
    walls = step_walls_ms(step_trace, step_count)
    return float(np.median(walls)) if walls.size else None


def utilization_pct(step_trace: pa.Table) -> float | None:
    """Device utilisation: the share of the accounted windows (every rank, device and step)
    in which the device worked — computed or moved data — in %: busy time less the exposed
    communication spent waiting for peers. None for a host-only profile or no window."""
    if is_host_only(step_trace):
        return None
    rows = window_rows(step_trace)
    wall = float(pc.sum(rows.column("wall_ns")).as_py() or 0) if rows.num_rows else 0.0
    if wall <= 0:
        return None
    idle = float(pc.sum(rows.column("idle_ns")).as_py() or 0)
    waiting = (
        float(pc.sum(rows.column("communication_wait_ns")).as_py() or 0)
        if "communication_wait_ns" in rows.column_names
        else 0.0
    )
    return 100.0 * (wall - idle - waiting) / wall


def compute_pct(step_trace: pa.Table) -> float | None:
    """The share of the accounted windows in which a kernel ran (compute), in %; None for a
    host-only profile or no window. Shown beside utilisation, which counts copies and
    communication as well."""
    if is_host_only(step_trace):
        return None
    return category_share_pct(step_trace, "compute")


def category_share_pct(step_trace: pa.Table, category: str) -> float | None:
    """One category's share of the accounted windows' wall time (``<category>_ns`` summed over
    every rank, device and step, over their walls), in %; None when absent or no window."""
    rows = window_rows(step_trace)
    column = f"{category}_ns"
    if rows.num_rows == 0 or column not in rows.column_names:
        return None
    wall = float(pc.sum(rows.column("wall_ns")).as_py() or 0)
    if wall <= 0:
        return None
    return 100.0 * float(pc.sum(rows.column(column)).as_py() or 0) / wall


# The steps a view shows first, in this order of preference.
REPRESENTATIVE_STEPS: Final = ("median", "slowest", "fastest")


def step_hulls(windows: Sequence[StepWindow], events: pa.Table) -> list[tuple[int, int, int]]:
    """Each step's hull over the ranks, ``(step, start_ns, end_ns)`` by step: the earliest start
    and latest end of its windows. Without step windows the profile's events span one step 0;
    no hull without events either."""
    hulls: dict[int, tuple[int, int]] = {}
    for w in windows:  # one window per rank and step
        lo, hi = hulls.get(w.step, (w.start_ns, w.end_ns))
        hulls[w.step] = (min(lo, w.start_ns), max(hi, w.end_ns))
    if not hulls and events.num_rows:
        start = int(pc.min(events.column("start_ns")).as_py())
        # batch by batch: the ends of all events at once would be a whole column
        ends = (
            pc.max(pc.add(b.column("start_ns"), b.column("dur_ns"))).as_py()
            for b in events.to_batches()
        )
        hulls[0] = (start, max(e for e in ends if e is not None))
    return [(step, lo, hi) for step, (lo, hi) in sorted(hulls.items())]


def representative_steps(steps: Sequence[int], walls_ns: Sequence[int]) -> dict[str, int]:
    """The steps that stand for a profile, by wall time: ``median``, ``slowest`` and
    ``fastest`` (keys in REPRESENTATIVE_STEPS order), ties going to the lower step; empty
    without steps.

    The median is the lower one: a step that exists, never an average of two.
    """
    if len(steps) == 0:
        return {}
    step = np.asarray(steps, dtype=np.int64)
    order = np.lexsort((step, np.asarray(walls_ns, dtype=np.int64)))
    return {
        "median": int(step[order[(order.size - 1) // 2]]),
        "slowest": int(step[order[-1]]),
        "fastest": int(step[order[0]]),
    }
