"""low_utilization_windows: stretches of the run where the device is mostly idle.

The device's span (first to last task, the span rows of the accounting) is cut into
``windows`` equal slices; a slice busy under ``busy_pct`` is a dip. Dips that stand out from a
run whose typical slice is busy point at periodic work off the device: checkpointing,
evaluation, logging, a slow step every N. (A run that is idle everywhere is the business of
host_dispatch_bound and dataloader_bound, not of this rule.)
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.intervals import union
from perfledger.model.findings import TOP_OFFENDERS as MAX_DIPS
from perfledger.model.findings import Finding, Skipped, Threshold, ms

ID: Final = "low_utilization_windows"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Slices busy under busy_pct while the median slice is busy at least busy_pct."""
    if not ctx.span_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    tasks = ctx.tasks
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    device = np.asarray(tasks["device"], dtype=np.int64)
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    end = start + np.asarray(tasks["dur_ns"], dtype=np.int64)
    count = int(p["windows"])
    if count < 2:
        return Skipped(ID, "windows must be at least 2")
    dips: list[dict[str, Any]] = []
    lost = 0.0
    per_device: list[dict[str, Any]] = []
    step_of = {(w.rank, w.step): w for w in ctx.step_windows}
    for span in ctx.span_windows:
        mine = (rank == span.rank) & (device == span.device)
        busy = union(start[mine], end[mine])
        edges = span.start_ns + (np.arange(count + 1) * span.wall_ns) // count
        lengths = np.diff(edges)
        if (lengths <= 0).any():
            continue
        busy_pct = 100.0 * busy.covered(edges[:-1], edges[1:]) / lengths
        median = float(np.median(busy_pct))
        low = np.flatnonzero(busy_pct < p["busy_pct"])
        per_device.append(
            {
                "rank": span.rank,
                "device": span.device,
                "window_ms": ms(float(lengths.mean())),
                "median_busy_pct": round(median, 2),
                "dips": int(low.size),
            }
        )
        if low.size == 0 or median < p["busy_pct"]:
            continue
        lost += float(((median - busy_pct[low]) / 100.0 * lengths[low]).sum())
        for i in low:
            step = _step_at(step_of, span.rank, int(edges[i]))
            dips.append(
                offender(
                    span.rank,
                    step,
                    edges[i],
                    edges[i + 1],
                    device=span.device,
                    window=int(i),
                    busy_pct=round(float(busy_pct[i]), 2),
                    below_median_pct=round(median - float(busy_pct[i]), 2),
                )
            )
    if not dips:
        return None
    dips.sort(key=lambda d: (-d["below_median_pct"], d["rank"], d["start_ns"]))
    severity_ms, severity_pct = ctx.severity(lost)
    evidence = {
        "steps": ctx.basis.describe(),
        "windows_per_device": count,
        "devices": per_device,
        "dip_count": len(dips),
        "periodicity": _periodicity(dips),
        "dips": dips[:MAX_DIPS],
    }
    return Finding(
        id=ID,
        title=(
            f"{len(dips)} slice(s) of 1/{count} of the profile have the device busy under "
            f"{p['busy_pct']:g}% while its typical slice is busier"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Find what runs in the dips (open the timeline at the listed times): periodic "
            "checkpointing, evaluation, logging or metric reduction, garbage collection, a "
            "data-loader stall. Make it asynchronous (background checkpoint writes), less "
            "frequent, or overlap it with training steps."
        ),
        verify=(
            "Re-profile over the same span: the dips must disappear or shrink, and the median "
            "slice busy share stay the same."
        ),
        estimate=(
            "For each dip, the busy time it lacks against the device's median slice; summed "
            "and divided by the step windows."
        ),
        spans=spans_of(dips[:MAX_DIPS]),
    )


def _step_at(step_of: dict[tuple[int, int], Any], rank: int, at_ns: int) -> int:
    for (r, step), w in step_of.items():
        if r == rank and w.start_ns <= at_ns < w.end_ns:
            return step
    return -1


def _periodicity(dips: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Median spacing of dip starts on the first device, and how regular it is."""
    if len(dips) < 3:
        return None
    first = (dips[0]["rank"], dips[0]["device"])
    starts = np.sort(
        np.array([d["start_ns"] for d in dips if (d["rank"], d["device"]) == first], np.int64)
    )
    if starts.size < 3:
        return None
    spacing = np.diff(starts)
    mean = float(spacing.mean())
    return {
        "median_spacing_ms": ms(float(np.median(spacing))),
        "regular": bool(mean > 0 and float(spacing.std()) / mean < 0.2),
    }


RULE: Final = Rule(
    id=ID,
    title="the device's busy share dips in parts of the run",
    checks="device busy share in equal slices of each device's span",
    thresholds=(
        Threshold(
            "windows",
            30.0,
            "count",
            "slices of the device's span",
            "nsys analyze gpu_time_util (30 chunks)",
        ),
        Threshold(
            "busy_pct",
            50.0,
            "%",
            "a slice busy under this is a dip",
            "nsys analyze gpu_time_util (50%)",
        ),
    ),
    check=check,
)
