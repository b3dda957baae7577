"""The report's section of the ranks: rank x step heat maps, the per-rank table, the slow
ranks and spreads, and the communication matrix with its slow links (fields of the cluster
pass, laid out)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.cluster.collectives import SLOW_LINK_PCT
from perfledger.render.report.budgets import (
    CLUSTER_CELLS,
    MATRIX_DST_RANKS,
    MATRIX_SLOW_LINKS,
    MATRIX_SRC_RANKS,
    PayloadLimits,
)
from perfledger.render.report.rows import distinct_rows, int64, take
from perfledger.render.report.tables import payload_table

if TYPE_CHECKING:
    from perfledger.model.cluster import ClusterReport


def cluster_section(report: ClusterReport | None, limits: PayloadLimits) -> dict[str, Any] | None:
    """Rank x step cells of step time, idle and compute (ms), the per-rank table, slow ranks."""
    if report is None:
        return None
    matrix = _matrix(report, limits)
    if report.steps.num_rows == 0 and matrix is None:
        return None
    table = report.steps
    rank, device, step = (int64(table, c) for c in ("rank", "device", "step"))
    lanes = distinct_rows(rank, device)
    steps = sorted(set(step.tolist()))
    one_device = len({r for r, _ in lanes}) == len(lanes)
    shown_lanes = lanes[: max(1, CLUSTER_CELLS // max(1, min(len(steps), 50)))]
    shown_steps = steps[: max(1, CLUSTER_CELLS // len(shown_lanes))]
    # cell coordinates: position of the row's step and (rank, device) among those shown
    lane_keys = np.array([(r << 16) + d + 1 for r, d in shown_lanes], dtype=np.int64)
    row_keys = (rank << 16) + device + 1
    y = np.minimum(np.searchsorted(lane_keys, row_keys), lane_keys.size - 1)
    step_keys = np.array(shown_steps, dtype=np.int64)
    x = np.minimum(np.searchsorted(step_keys, step), step_keys.size - 1)
    shown = (lane_keys[y] == row_keys) & (step_keys[x] == step)
    cells = {
        f"{name}_ms": np.stack(
            [x[shown], y[shown], int64(table, f"{name}_ns")[shown] / 1e6], axis=1
        ).tolist()
        for name in ("wall", "idle", "compute")
    }
    per_rank = pa.table(
        {
            "rank": [a.rank for a in report.per_rank],
            "windows": [a.windows for a in report.per_rank],
            **{
                f"{category}_ns": [round(a.per_window(category)) for a in report.per_rank]
                for category in ("wall", "compute", "communication", "memcpy", "idle")
            },
        }
    )
    return {
        "ranks": len(report.ranks),
        "basis": report.basis,
        "lanes": [f"rank {r}" if one_device else f"rank {r} device {d}" for r, d in shown_lanes],
        "steps": shown_steps,
        "total_lanes": len(lanes),
        "total_steps": len(steps),
        **cells,
        "slow_ranks": [s.rank for s in report.slow_ranks],
        "balance": [
            {
                "category": s.category,
                "spread_pct": round(s.spread_pct, 2),
                "min_rank": s.min_rank,
                "max_rank": s.max_rank,
            }
            for s in report.balance
        ],
        "per_rank": payload_table(per_rank, "cluster_ranks", limits),
        "matrix": matrix,
    }


def _matrix(report: ClusterReport, limits: PayloadLimits) -> dict[str, Any] | None:
    """The communication matrix's rows of the first source and destination ranks, packed in
    columns, its heat-map cells and the slowest links (None without rows).

    A cell is a (source, destination) pair: ``[x, y, gbps, row]`` where ``row`` is the pair's
    row carrying the most bytes (its main transport; the tooltip lists every transport of the
    pair). A rank's copies to itself (transport LOCAL) are cells of their own, kept out of the
    colour scale: their bandwidth is that of device memory, some 30 times a link's.
    """
    matrix = report.matrix
    if matrix.num_rows == 0:
        return None
    # Members are numbered within their communication group: one group's pairs per chart,
    # the group that moved the most bytes.
    groups = matrix.group_by("group").aggregate([("transit_bytes", "sum")]).to_pylist()
    groups.sort(key=lambda g: (-g["transit_bytes_sum"], g["group"] or ""))
    group = groups[0]["group"]
    matrix = matrix.filter(
        pc.is_null(matrix["group"]) if group is None else pc.equal(matrix["group"], group)
    )
    src_all = np.unique(int64(matrix, "src_rank"))
    dst_all = np.unique(int64(matrix, "dst_rank"))
    src_shown = src_all[:MATRIX_SRC_RANKS]
    dst_shown = dst_all[:MATRIX_DST_RANKS]
    src = int64(matrix, "src_rank")
    dst = int64(matrix, "dst_rank")
    rows = np.flatnonzero(np.isin(src, src_shown) & np.isin(dst, dst_shown))
    shown = take(matrix, rows)
    y = np.searchsorted(src_shown, src[rows])
    x = np.searchsorted(dst_shown, dst[rows])
    transit_bytes = int64(shown, "transit_bytes")
    gbps = np.asarray(shown.column("gbps").to_numpy(), dtype=np.float64)
    local = np.asarray(pc.equal(shown.column("transport"), "LOCAL").to_numpy(), dtype=bool)
    # per cell (and LOCAL apart), the row of most bytes among those with a bandwidth
    timed = np.flatnonzero(np.isfinite(gbps))
    order = timed[np.lexsort((-transit_bytes[timed], local[timed], x[timed], y[timed]))]
    key = np.stack([y[order], x[order], local[order]], axis=1)
    first = np.ones(order.size, dtype=bool)
    first[1:] = (key[1:] != key[:-1]).any(axis=1)
    main = order[first]
    columns = (
        "src_rank",
        "dst_rank",
        "transport",
        "steps",
        "transit_bytes",
        "transit_ns",
        "gbps",
        "vs_transport_median_pct",
    )
    packed: dict[str, list[Any]] = {c: shown.column(c).to_pylist() for c in columns}
    for c in ("gbps", "vs_transport_median_pct"):
        packed[c] = [v if v is not None and math.isfinite(v) else None for v in packed[c]]

    def cells(which: npt.NDArray[np.int64]) -> list[list[float]]:
        return [[int(x[i]), int(y[i]), float(gbps[i]), int(i)] for i in which]

    slow = report.slow_links
    slow_table = payload_table(slow.slice(0, MATRIX_SLOW_LINKS), "slow_links", limits)
    slow_table["total_rows"] = slow.num_rows  # the table says it holds the slowest of them
    return {
        "src_ranks": src_shown.tolist(),
        "dst_ranks": dst_shown.tolist(),
        "total_src_ranks": int(src_all.size),
        "total_dst_ranks": int(dst_all.size),
        "total_rows": matrix.num_rows,
        "group": group,
        "groups": len(groups),
        "rows": packed,
        "cells": cells(main[~local[main]]),
        "local_cells": cells(main[local[main]]),
        "slow_below_pct": SLOW_LINK_PCT,
        "slow_links_total": slow.num_rows,
        "slow_links": slow_table,
    }
