"""The tables a run is compared by, and the per-step samples drawn from them.

Step samples are the step windows of the step_trace rows (one wall per rank and step; the span
rows, step -1, are left out): :mod:`perfledger.analysis.figures` defines them, and step time,
utilisation and category shares, once for every output. Per-step figures divide by the number of
step windows (rank x step); a run without step annotations has its single whole-trace window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import figures
from perfledger.analysis.diff.noise import FloatArray
from perfledger.analysis.diff.workload import BatchSize, Workload


@dataclass(frozen=True)
class RunTables:
    """What is compared of one run.

    Attributes:
        label: the name shown for the run (profile directory or trace name).
        path: where it was read from.
        source_kind: importer kind, e.g. ``"kineto"`` or ``"torch_npu_text"``.
        step_count: annotated steps (0: none; the single window is the whole trace).
        step_trace: step_trace.csv's table (device layout, or the host layout of CPU runs).
        gaps: idle gaps (:data:`perfledger.model.accounts.GAPS_SCHEMA`).
        op_summary: ``analysis.ops.op_summary`` (device tasks, or host ops of CPU runs).
        transfers: ``analysis.transfers.transfers``.
        communication: ``analysis.communication.communication``.
        findings: summary.json's findings ({id, title, severity_ms, severity_pct, ...}).
        confidence: the run's data quality (summary.json's quality.confidence), None when
            the profile predates the quality report.
        workload: what the run computes (program, device, op types), to tell whether the two
            compared runs are the same workload.
        batch: samples per step read from the trace (None: unknown), or given by the user.
    """

    label: str
    path: str
    source_kind: str
    step_count: int
    step_trace: pa.Table
    gaps: pa.Table
    op_summary: pa.Table
    transfers: pa.Table
    communication: pa.Table
    findings: tuple[Mapping[str, Any], ...] = ()
    confidence: str | None = None
    workload: Workload = field(default_factory=Workload)
    batch: BatchSize | None = None


def column_values(table: pa.Table, name: str) -> FloatArray:
    """A numeric column as floats, nulls as 0."""
    return np.asarray(pc.fill_null(table.column(name), 0).to_numpy(zero_copy_only=False), float)


def host_only(run: RunTables) -> bool:
    """Whether the run is a CPU run (host phases instead of device categories)."""
    return figures.is_host_only(run.step_trace)


def windows(run: RunTables) -> int:
    """Step windows (rank x step) of the run: what per-step figures divide by."""
    rows = figures.window_rows(run.step_trace)
    if rows.num_rows == 0:
        return 1
    pairs = {
        (r, s) for r, s in zip(rows["rank"].to_pylist(), rows["step"].to_pylist(), strict=True)
    }
    return max(len(pairs), 1)


def step_walls_ms(run: RunTables) -> FloatArray:
    """One wall time (ms) per rank and annotated step; empty without step annotations."""
    return figures.step_walls_ms(run.step_trace, run.step_count)


def category_samples(run: RunTables, name: str) -> tuple[FloatArray, FloatArray]:
    """Per step row: the category in ms and its share of the window in %."""
    rows = figures.window_rows(run.step_trace)
    column = f"{name}_ns"
    if rows.num_rows == 0 or column not in rows.column_names:
        return np.zeros(0), np.zeros(0)
    value = column_values(rows, column)
    wall = column_values(rows, "wall_ns")
    share = np.divide(100.0 * value, wall, out=np.zeros_like(value), where=wall > 0)
    return value / 1e6, share
