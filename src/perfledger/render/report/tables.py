"""The payload's tables, counters, time accounts and gap histogram, packed in columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.columns import dictionary_codes, unique_rows
from perfledger.model.accounts import IDLE_CAUSES, HostWindowAccount, WindowAccount
from perfledger.model.gaps import GapReport
from perfledger.render.report.budgets import (
    ACCOUNTING_STEPS,
    COUNTER_SERIES,
    TABLE_ROWS,
    PayloadLimits,
)
from perfledger.render.report.data import Headline
from perfledger.render.report.rows import Int64Array, PreparedRows, int64, take, take_ascending

# Table columns holding instants (absolute ns), shown from the profile start.
_INSTANT_COLUMNS: Final = frozenset({"start_ns", "end_ns", "launch_ns", "ts_ns", "launch_start_ns"})
_ACCOUNT_SERIES: Final = (
    ("compute", "compute_ns"),
    ("communication: waiting", "communication_wait_ns"),
    ("communication: transfer", "communication_transfer_ns"),
    ("memcpy", "memcpy_ns"),
    ("memset", "memset_ns"),
    *((f"idle: {cause}", f"idle_{cause}_ns") for cause in IDLE_CAUSES),
)
_HOST_SERIES: Final = (
    ("dataloader", "dataloader_ns"),
    ("forward", "forward_ns"),
    ("backward", "backward_ns"),
    ("optimizer", "optimizer_ns"),
    ("overhead", "overhead_ns"),
)


def payload_table(
    table: pa.Table, name: str, limits: PayloadLimits, origin_ns: int | None = None
) -> dict[str, Any]:
    """Columns of a result table, its first rows (the longest when it has ``dur_ns``).

    Instants (start_ns, end_ns, launch_ns ...) become ns from the profile start, exact
    (JavaScript numbers cannot hold epoch ns); unknown ones (-1) become null.
    """
    limit = max(20, int(TABLE_ROWS.get(name, 500) * limits.table_scale))
    total = table.num_rows
    if total > limit:
        if "dur_ns" in table.column_names:
            top = pc.select_k_unstable(table, limit, [("dur_ns", "descending")])
            table = take(table, np.asarray(top.to_numpy(), dtype=np.int64))
        else:
            table = table.slice(0, limit)
    columns = []
    for fld in table.schema:
        col = table.column(fld.name)
        if pa.types.is_dictionary(fld.type):
            col = pc.cast(col, pa.string())
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = _cut_column(col, limits.text_chars)
        elif pa.types.is_floating(col.type):
            col = pc.if_else(pc.is_finite(col), col, pa.scalar(None, col.type))
        kind = _column_type(fld)
        if fld.name in _INSTANT_COLUMNS and pa.types.is_integer(col.type):
            if origin_ns is None:
                kind = "int"
            else:
                known = pc.greater_equal(col, 0)
                col = pc.if_else(known, pc.subtract(col, origin_ns), pa.scalar(None, col.type))
                kind = "instant"
        columns.append({"name": fld.name, "type": kind, "values": col.to_pylist()})
    return {"total_rows": total, "shown_rows": table.num_rows, "columns": columns}


# Device tasks named per op-statistic row; the rest are counted.
_TASKS_NAMED: Final = 3


def _task_counts(op_summary: pa.Table) -> pa.Table:
    """The rows of op_summary counted by (op, kind, task): ``op`` the host operator, else the
    task's own name, ``task_count`` the rows of a task that has a name. Counted on the
    columns' dictionary codes: only the distinct triples are turned into text."""
    host, host_values = _codes(op_summary, "host_op")
    name, name_values = _codes(op_summary, "name")
    kind, kind_values = _codes(op_summary, "kind")
    # a task's own name as an operator: the host operators' code where one bears that name
    in_host = np.asarray(pc.index_in(name_values, value_set=host_values).fill_null(-1))
    as_op = np.where(in_host >= 0, in_host, np.arange(len(name_values)) + len(host_values))
    op = host.copy()  # -1 where both are null
    named = (host < 0) & (name >= 0)
    op[named] = as_op[name[named]]
    triples, inverse = unique_rows([op, kind, name])
    counts = np.bincount(inverse, minlength=len(triples))
    op_values = pa.concat_arrays([host_values, name_values])
    return pa.table(
        {
            "op": _decoded(triples[:, 0], op_values),
            "kind": _decoded(triples[:, 1], kind_values),
            "task": _decoded(triples[:, 2], name_values),
            "task_count": np.where(triples[:, 2] >= 0, counts, 0),
        }
    )


def _codes(table: pa.Table, column: str) -> tuple[Int64Array, pa.Array]:
    """:func:`dictionary_codes` with -1 for a null, the values as text."""
    codes, values = dictionary_codes(table, column, null=-1)
    return codes, pa.array(values, pa.string())


def _decoded(codes: Int64Array, values: pa.Array) -> pa.Array:
    """The values at ``codes`` (null at -1)."""
    return values.take(pa.array(codes, mask=codes < 0))


def op_statistic_tasks(op_statistic: pa.Table, op_summary: pa.Table | None, chars: int) -> pa.Table:
    """The op statistic with ``device_tasks``: the distinct device tasks each row's operator
    ran, most frequent first (``a · b · c · +N more``), so that the table's filter finds an
    operator by its kernels (``nccl`` finds ``record_param_comms``).

    Rows are grouped as :func:`perfledger.analysis.ops.op_statistic` groups them (by the host
    operator, else the task's own name); a row whose only task bears its own name gets null.
    Without such rows (per-operator summaries, as Ascend's) the table is returned unchanged.
    """
    if (
        op_summary is None
        or op_summary.num_rows == 0
        or "self_ns" in op_summary.column_names
        or not {"host_op", "name", "kind"} <= set(op_summary.column_names)
    ):
        return op_statistic
    counted = _task_counts(op_summary).sort_by(
        [
            ("op", "ascending"),
            ("kind", "ascending"),
            ("task_count", "descending"),
            ("task", "ascending"),
        ]
    )
    tasks: dict[tuple[str | None, str | None], list[str]] = {}
    for op, kind, task in zip(  # a loop over distinct (operator, kind, task) names
        *(counted.column(c).to_pylist() for c in ("op", "kind", "task")), strict=True
    ):
        if task is not None:
            tasks.setdefault((op, kind), []).append(task)
    names = op_statistic.column("name").to_pylist()
    kinds = pc.cast(op_statistic.column("kind"), pa.string()).to_pylist()
    cells: list[str | None] = []
    for name, kind in zip(names, kinds, strict=True):  # a loop over op-statistic rows
        mine = tasks.get((name, kind), [])
        if not mine or mine == [name]:
            cells.append(None)
            continue
        text = " · ".join(mine[:_TASKS_NAMED])
        if len(mine) > _TASKS_NAMED:
            text += f" · +{len(mine) - _TASKS_NAMED} more"
        cells.append(cut(text, chars))
    if not any(cells):
        return op_statistic
    return op_statistic.append_column("device_tasks", pa.array(cells, pa.string()))


def cut(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters, ending with an ellipsis when it was longer."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _cut_column(col: pa.ChunkedArray, chars: int) -> pa.ChunkedArray:
    """Strings longer than ``chars`` end with an ellipsis (the CSV keeps them whole)."""
    long = pc.fill_null(pc.greater(pc.utf8_length(col), chars), False)
    shortened = pc.binary_join_element_wise(pc.utf8_slice_codeunits(col, 0, chars - 1), "…", "")
    return pc.if_else(long, shortened, col)


def _column_type(fld: pa.Field) -> str:
    name = fld.name
    if name.endswith("_ns"):
        return "ns"
    if name == "bytes" or name.endswith("_bytes"):
        return "bytes"
    if name == "ratio":
        return "ratio"
    if name.endswith("_pct"):
        return "pct"
    t = fld.type
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    return "str"


def counter_series(counters: pa.Table | None, p: PreparedRows, points: int) -> list[dict[str, Any]]:
    """Each counter series, evenly sampled to at most ``points`` points, time in s;
    ``constant`` when every sample has the same value (then only the first and last are kept).

    The series' rows are found in one pass over the key columns, batch by batch, and only
    their times and values taken: the counters of many ranks are never read into whole columns.
    """
    if counters is None or counters.num_rows == 0:
        return []
    origin = p.origin_ns
    if origin is None:
        origin = int(pc.min(counters.column("ts_ns")).as_py())
    keys = counters.select(["rank", "track", "name"]).group_by(["rank", "track", "name"])
    series = sorted(
        (int(r), t, n) for r, t, n in zip(*keys.aggregate([]).to_pydict().values(), strict=True)
    )[:COUNTER_SERIES]
    out = []
    for (r, t, n), at in zip(series, _series_rows(counters, series), strict=True):
        mine = take_ascending(counters.select(["ts_ns", "value"]), at)
        ts = int64(mine, "ts_ns")
        value = np.asarray(mine.column("value").to_numpy(), dtype=np.float64)
        rows = np.flatnonzero(np.isfinite(value))
        rows = rows[np.argsort(ts[rows], kind="stable")]
        # a series that never changes is said in words, not drawn: its first and last points
        constant = bool(rows.size) and bool(value[rows].min() == value[rows].max())
        if constant and rows.size > 2:
            rows = rows[[0, -1]]
        if rows.size > points:
            rows = rows[np.linspace(0, rows.size - 1, points).round().astype(np.int64)]
        out.append(
            {
                "rank": r,
                "track": t,
                "name": n,
                "t_s": np.round((ts[rows] - origin) / 1e9, 6).tolist(),
                "value": value[rows].tolist(),
                "samples": mine.num_rows,
                "constant": constant,
            }
        )
    return out


def _series_rows(counters: pa.Table, series: Sequence[tuple[int, str, str]]) -> list[Int64Array]:
    """The rows of each of ``series`` (rank, track, name) in ``counters``, ascending: batch by
    batch, each row's key numbered on the batch's codes (a pass over the keys, not one per
    series; no key column of many ranks held whole)."""
    wanted = {key: i for i, key in enumerate(series)}
    found: list[list[Int64Array]] = [[] for _ in series]
    offset = 0
    for batch in counters.select(["rank", "track", "name"]).to_batches():
        table = pa.Table.from_batches([batch])
        rank = np.asarray(batch.column(0), dtype=np.int64)
        track, tracks = dictionary_codes(table, "track")
        name, names = dictionary_codes(table, "name")
        keys, inverse = unique_rows([rank, track, name])
        for code, (r, t, n) in enumerate(keys.tolist()):
            at = wanted.get((r, tracks[t], names[n]))
            if at is not None:
                found[at].append(np.flatnonzero(inverse == code) + offset)
        offset += batch.num_rows
    return [np.concatenate(rows) if rows else np.zeros(0, np.int64) for rows in found]


def headline_figures(h: Headline) -> dict[str, Any]:
    """The headline figures as the page reads them."""
    return {
        "step_time_ms": h.step_time_ms,
        "device_utilization_pct": h.device_utilization_pct,
        "device_compute_pct": h.device_compute_pct,
        "throughput": h.throughput,
        "throughput_unit": h.throughput_unit,
        "profiler_overhead_pct": h.profiler_overhead_pct,
        "step_count": h.step_count,
        "ranks": h.ranks,
        "loss": h.loss,
        "device_utilization": [[label, value] for label, value in h.device_utilization],
        "unprofiled_step_ms": h.unprofiled_step_ms,
        "profiler_overhead_noise_pct": h.profiler_overhead_noise_pct,
    }


def device_accounting(accounts: Sequence[WindowAccount]) -> list[dict[str, Any]]:
    """Per (rank, device): the categories of every step in ms, plus the span row."""
    by_device: dict[tuple[int, int], list[WindowAccount]] = {}
    for a in accounts:
        by_device.setdefault((a.rank, a.device), []).append(a)
    out = []
    for (rank, device), rows in sorted(by_device.items()):
        steps = sorted((a for a in rows if a.step >= 0), key=lambda a: a.step)
        if len(steps) > ACCOUNTING_STEPS:  # evenly spaced steps of very long profiles
            pick = np.linspace(0, len(steps) - 1, ACCOUNTING_STEPS).round().astype(int)
            steps = [steps[i] for i in sorted(set(pick.tolist()))]
        span = [a for a in rows if a.step < 0]
        out.append(
            {
                "label": f"rank {rank} device {device}",
                "rank": rank,
                "device": device,
                "steps": [a.step for a in steps],
                "wall_ms": [a.wall_ns / 1e6 for a in steps],
                "overlapped_communication_ms": [a.overlapped_communication_ns / 1e6 for a in steps],
                "series": [
                    {"name": name, "ms": [getattr(a, attr) / 1e6 for a in steps]}
                    for name, attr in _ACCOUNT_SERIES
                ],
                "span": _account_row(span[0]) if span else None,
            }
        )
    return out


def _account_row(a: WindowAccount) -> dict[str, Any]:
    row = {name: getattr(a, attr) / 1e6 for name, attr in _ACCOUNT_SERIES}
    row["wall"] = a.wall_ns / 1e6
    row["overlapped communication"] = a.overlapped_communication_ns / 1e6
    return row


def host_accounting(accounts: Sequence[HostWindowAccount]) -> list[dict[str, Any]]:
    """Per rank: the main thread's categories of every step in ms (host-only profiles)."""
    by_rank: dict[int, list[HostWindowAccount]] = {}
    for a in accounts:
        by_rank.setdefault(a.rank, []).append(a)
    out = []
    for rank, rows in sorted(by_rank.items()):
        steps = sorted((a for a in rows if a.step >= 0), key=lambda a: a.step)[:ACCOUNTING_STEPS]
        out.append(
            {
                "label": f"rank {rank} main thread",
                "rank": rank,
                "steps": [a.step for a in steps],
                "wall_ms": [a.wall_ns / 1e6 for a in steps],
                "series": [
                    {"name": name, "ms": [getattr(a, attr) / 1e6 for a in steps]}
                    for name, attr in _HOST_SERIES
                ],
            }
        )
    return out


def gap_histogram(report: GapReport | None) -> dict[str, Any] | None:
    """The gap report's buckets, counts and total ms by cause; None without gaps."""
    if report is None or not report.buckets:
        return None
    causes = [c.cause for c in report.buckets[0].by_cause]
    return {
        "buckets": [b.label for b in report.buckets],
        "causes": causes,
        "count": [[c.count for c in b.by_cause] for b in report.buckets],
        "total_ms": [[c.total_ns / 1e6 for c in b.by_cause] for b in report.buckets],
        "gaps": report.count,
        "gaps_total_ms": report.total_ns / 1e6,
    }
