"""Idle gaps of two runs, compared: their length, count and time per step, by bucket and cause."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.diff.noise import Change, DiffOptions, compare, compare_samples
from perfledger.analysis.diff.tables import RunTables, column_values, windows
from perfledger.analysis.gaps import GAP_BUCKETS
from perfledger.model.accounts import IDLE_CAUSES


@dataclass(frozen=True)
class GapBucketDiff:
    """Gaps of one duration bucket, per step."""

    label: str
    base_count: float
    current_count: float
    base_ms: float
    current_ms: float


@dataclass(frozen=True)
class GapsDiff:
    """How the idle gaps moved: their length (µs), count and time per step, by bucket and cause."""

    duration_us: Change  # median gap length; noise from the gap samples
    mean_us: Change
    p90_us: Change
    count_per_step: Change
    idle_ms_per_step: Change
    buckets: tuple[GapBucketDiff, ...]
    by_cause_ms: tuple[tuple[str, Change], ...]  # per step


def _gap_samples(run: RunTables) -> pa.Table:
    """The run's idle gaps of positive length (a zero-length gap is no sample)."""
    gaps = run.gaps
    if gaps.num_rows == 0:
        return gaps
    return gaps.filter(pc.greater(gaps.column("dur_ns"), 0))


def gaps_diff(base: RunTables, current: RunTables, options: DiffOptions) -> GapsDiff:
    """The gaps' median length (with its noise band), mean, p90, and per-step totals."""
    gb, gc = _gap_samples(base), _gap_samples(current)
    wb, wc = windows(base), windows(current)
    db = column_values(gb, "dur_ns") / 1e3 if gb.num_rows else np.zeros(0)
    dc = column_values(gc, "dur_ns") / 1e3 if gc.num_rows else np.zeros(0)
    median = compare_samples(db, dc, robust=True, options=options)
    mean = compare(float(db.mean()) if db.size else None, float(dc.mean()) if dc.size else None)
    p90 = compare(
        float(np.percentile(db, 90)) if db.size else None,
        float(np.percentile(dc, 90)) if dc.size else None,
    )
    edges = np.array([lower for _, lower, _ in GAP_BUCKETS[1:]], dtype=np.float64) / 1e3
    ib = np.searchsorted(edges, db, side="right")
    ic = np.searchsorted(edges, dc, side="right")
    buckets = tuple(
        GapBucketDiff(
            label=label,
            base_count=float((ib == i).sum()) / wb,
            current_count=float((ic == i).sum()) / wc,
            base_ms=float(db[ib == i].sum()) / 1e3 / wb,
            current_ms=float(dc[ic == i].sum()) / 1e3 / wc,
        )
        for i, (label, _, _) in enumerate(GAP_BUCKETS)
    )
    causes_b = _cause_totals(gb)
    causes_c = _cause_totals(gc)
    by_cause = tuple(
        (
            cause,
            compare(causes_b.get(cause, 0.0) / 1e6 / wb, causes_c.get(cause, 0.0) / 1e6 / wc),
        )
        for cause in (*IDLE_CAUSES, *sorted((set(causes_b) | set(causes_c)) - set(IDLE_CAUSES)))
    )
    return GapsDiff(
        duration_us=median,
        mean_us=mean,
        p90_us=p90,
        count_per_step=compare(db.size / wb, dc.size / wc),
        idle_ms_per_step=compare(float(db.sum()) / 1e3 / wb, float(dc.sum()) / 1e3 / wc),
        buckets=buckets,
        by_cause_ms=by_cause,
    )


def _cause_totals(gaps: pa.Table) -> dict[str, float]:
    """Total gap ns per cause (a gap without a cause counts as ``other``)."""
    if gaps.num_rows == 0:
        return {}
    cause = pc.fill_null(pc.cast(gaps.column("cause"), pa.string()), "other")
    table = pa.table({"cause": cause, "dur_ns": gaps.column("dur_ns")})
    grouped = table.group_by("cause").aggregate([("dur_ns", "sum")])
    return {
        str(c): float(t)
        for c, t in zip(
            grouped["cause"].to_pylist(), grouped["dur_ns_sum"].to_pylist(), strict=True
        )
    }
