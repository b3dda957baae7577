"""Repairs of a trace's clock before its analysis: each counted as a quality check.

Three kinds of damage real traces show make every figure wrong at once, and each can be
recognised from the trace itself:

- device tasks stamped in ns while the host is in µs (every device time 1000 times too large):
  the device's times are divided back when their span and place are a thousand times the
  host's;
- a few events stamped far from all the others (a kernel years late, a clock glitch): a gap
  between two groups of events that dwarfs both groups drops the smaller group;
- marks in another clock domain than the work they should frame (msprof databases with MSTX
  marks and tasks stamped years apart): step marks and annotations that lie nowhere near any
  other event are left out (no offset links the two clocks); without step marks left, the
  profile is one window.

Pure functions: the trace is not changed, a repaired copy is returned with the checks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.intervals import Int64Array
from perfledger.model import schema
from perfledger.model.quality import (
    CLOCK_DOMAINS,
    DEVICE_TIME_UNIT,
    OUTLYING_EVENTS,
    STEP_TIME,
    TIME_ACCOUNT,
    TIMELINE,
    UTILIZATION,
    QualityCheck,
)
from perfledger.model.trace import Trace

# A gap between two groups of events is a clock fault when it is this many times longer than
# both groups together, and at least OUTLIER_GAP_MIN_NS.
OUTLIER_GAP_RATIO: Final = 100
OUTLIER_GAP_MIN_NS: Final = 60 * 1_000_000_000
# ... and the group left out holds at most this share of the events (or this many).
OUTLIER_MAX_SHARE: Final = 0.01
OUTLIER_MAX_EVENTS: Final = 8
# Device times a thousand times the host's (ns read as µs): the ratio of their midpoints
# lies within these bounds, and the device span is this many times the host's at least.
UNIT_RATIO_RANGE: Final = (500.0, 2000.0)
UNIT_SPAN_RATIO: Final = 100.0


def repair_trace(trace: Trace) -> tuple[Trace, tuple[QualityCheck, ...]]:
    """The trace with its clock faults repaired, and a check per repair made."""
    events = trace.events
    checks: list[QualityCheck] = []
    where = trace.source_files[0].name if trace.source_files else "trace"
    for repair in (_device_time_unit, _foreign_clock_marks, _outlying_events):
        events, check = repair(events, where)
        if check is not None:
            checks.append(check)
    if not checks:
        return trace, ()
    return replace(trace, events=events), tuple(checks)


def _device_time_unit(events: pa.Table, where: str) -> tuple[pa.Table, QualityCheck | None]:
    if events.num_rows == 0:
        return events, None
    device = columns.int64(events, "device") >= 0
    if not device.any() or device.all():
        return events, None
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    host = ~device
    host_lo, host_hi = _lowest(start, host), _highest(end, host)
    dev_lo, dev_hi = _lowest(start, device), _highest(end, device)
    host_mid, dev_mid = (host_lo + host_hi) / 2, (dev_lo + dev_hi) / 2
    if host_mid <= 0 or dev_lo <= host_hi:
        return events, None
    ratio = dev_mid / host_mid
    span_ratio = (dev_hi - dev_lo) / max(host_hi - host_lo, 1)
    low, high = UNIT_RATIO_RANGE
    if not (low <= ratio <= high and span_ratio >= UNIT_SPAN_RATIO):
        return events, None
    rows = np.flatnonzero(device)
    new_start = start.copy()
    new_dur = columns.int64(events, "dur_ns").copy()
    new_start[rows] //= 1000
    new_dur[rows] //= 1000
    events = _with_times(events, new_start, new_dur)
    check = QualityCheck(
        DEVICE_TIME_UNIT,
        int(rows.size),
        f"{where}: device times read as ns where the host's are µs ({rows.size:,} device "
        "events stamped a thousand times too late and long); divided back",
        (STEP_TIME, UTILIZATION, TIME_ACCOUNT),
        repaired=True,
    )
    return events, check


def _outlying_events(events: pa.Table, where: str) -> tuple[pa.Table, QualityCheck | None]:
    dropped = 0
    for _ in range(3):  # a fault on each side, at most, and one more
        if events.num_rows < 2:
            break
        start = columns.int64(events, "start_ns")
        dur = columns.int64(events, "dur_ns")
        # the events come in start order (the canonical tables' rule): then one compiled
        # pass finds the widest gap, with no array made; sorted here only if not
        found = columns.widest_gap(start, dur)
        order = None
        if found is None:
            order = (
                None if bool((start[1:] >= start[:-1]).all()) else np.argsort(start, kind="stable")
            )
            found = _widest_gap(start, dur, order)
        del start, dur
        cut, gap, left_span, right_span = found
        if gap < OUTLIER_GAP_MIN_NS or gap < OUTLIER_GAP_RATIO * (left_span + right_span + 1):
            break
        left_count, right_count = cut + 1, events.num_rows - cut - 1
        side = slice(0, cut + 1) if left_count < right_count else slice(cut + 1, events.num_rows)
        outliers = np.arange(events.num_rows)[side] if order is None else order[side]
        if outliers.size > max(OUTLIER_MAX_SHARE * events.num_rows, OUTLIER_MAX_EVENTS):
            break
        keep = np.ones(events.num_rows, dtype=bool)
        keep[outliers] = False
        events = events.filter(pa.array(keep))
        dropped += int(outliers.size)
    if not dropped:
        return events, None
    check = QualityCheck(
        OUTLYING_EVENTS,
        dropped,
        f"{where}: {dropped:,} events stamped far from all the others (a clock fault) left out",
        (STEP_TIME, UTILIZATION, TIME_ACCOUNT),
        repaired=True,
    )
    return events, check


def _widest_gap(
    start: Int64Array, dur: Int64Array, order: Int64Array | None
) -> tuple[int, int, int, int]:
    """:func:`perfledger.analysis.columns.widest_gap` of the intervals in start order
    (``order``: the rows in that order, None where they already are), by numpy."""
    end = start + dur
    sorted_start = start if order is None else start[order]
    sorted_end = end if order is None else end[order]
    del end
    running_end = np.maximum.accumulate(sorted_end)
    gaps = sorted_start[1:] - running_end[:-1]
    cut = int(np.argmax(gaps))
    gap = int(gaps[cut])
    del gaps
    left_span = int(running_end[cut] - sorted_start[0])
    del running_end
    right_span = int(sorted_end[cut + 1 :].max() - sorted_start[cut + 1])
    return cut, gap, left_span, right_span


def _foreign_clock_marks(events: pa.Table, where: str) -> tuple[pa.Table, QualityCheck | None]:
    # the step marks alone (other annotations may be in the right clock), then every mark
    for kinds in ([schema.STEP], [schema.STEP, schema.ANNOTATION]):
        marks = columns.isin(events, "kind", kinds) & (columns.int64(events, "device") < 0)
        repaired, check = _foreign_marks(events, marks, where)
        if check is not None:
            return repaired, check
    return events, None


def _foreign_marks(
    events: pa.Table, marks: np.ndarray, where: str
) -> tuple[pa.Table, QualityCheck | None]:
    if not marks.any() or marks.all():
        return events, None
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    rest = ~marks
    mark_lo, mark_hi = _lowest(start, marks), _highest(end, marks)
    rest_lo, rest_hi = _lowest(start, rest), _highest(end, rest)
    distance = max(mark_lo - rest_hi, rest_lo - mark_hi)
    longest = max(mark_hi - mark_lo, rest_hi - rest_lo)
    if distance <= max(longest, 0):
        return events, None
    count = int(marks.sum())
    steps = int(columns.isin(events, "kind", [schema.STEP])[marks].sum())
    years = distance / (365 * 24 * 3600 * 1e9)
    apart = f"{years:.1f} years" if years >= 1 else f"{distance / 1e9:,.0f} s"
    what = f"{count:,} marks ({steps:,} of them step marks)" if steps else f"{count:,} marks"
    check = QualityCheck(
        CLOCK_DOMAINS,
        count,
        f"{where}: {what} are stamped {apart} away from every other event (another clock); "
        "no offset links the two clocks, so the marks are left out"
        + (
            " and the profile is one window"
            if steps == int(columns.isin(events, "kind", [schema.STEP]).sum()) and steps
            else ""
        ),
        (STEP_TIME, TIMELINE),
        repaired=True,
    )
    return events.filter(pa.array(~marks)), check


def _lowest(values: np.ndarray, where: np.ndarray) -> int:
    """The least of ``values`` where ``where`` holds (some row does), without a copy of them."""
    return int(np.min(values, where=where, initial=np.iinfo(np.int64).max))


def _highest(values: np.ndarray, where: np.ndarray) -> int:
    """The greatest of ``values`` where ``where`` holds (some row does), without a copy."""
    return int(np.max(values, where=where, initial=np.iinfo(np.int64).min))


def _with_times(events: pa.Table, start: np.ndarray, dur: np.ndarray) -> pa.Table:
    """The events with new start and duration columns, in start order again."""
    for name, values in (("start_ns", start), ("dur_ns", dur)):
        index = events.schema.get_field_index(name)
        events = events.set_column(index, events.schema.field(name), pa.array(values, pa.int64()))
    order = np.lexsort((-dur, start))
    return events.take(pa.array(order, pa.int64()))
