"""Operators and op classes of two runs, compared per step.

Operators are the device tasks (host ops on CPU runs, by self time) that belong to a step,
grouped by op type as in op_statistic (the launching host op when known, else the task name)
and divided by the number of step windows (rank x step). Op classes come from
:mod:`perfledger.analysis.opclass`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import opclass
from perfledger.analysis.diff.noise import DiffOptions
from perfledger.analysis.diff.tables import RunTables, windows
from perfledger.model.schema import SPAN_STEP


@dataclass(frozen=True)
class OpRow:
    """One op type (or op class) in both runs: ms and count per step."""

    name: str
    kind: str
    op_class: str
    base_ms: float
    current_ms: float
    delta_ms: float
    base_count: float
    current_count: float
    delta_count: float
    change_pct: float | None


@dataclass(frozen=True)
class ClassRow:
    """One op class: ms per step, share of the device time of all classes (pp), count."""

    op_class: str
    base_ms: float
    current_ms: float
    delta_ms: float
    base_share_pct: float | None
    current_share_pct: float | None
    delta_pp: float | None
    base_count: float
    current_count: float


@dataclass(frozen=True)
class OpsDiff:
    """Op types that moved most (by time and by count), appeared or vanished; op classes."""

    movers_by_time: tuple[OpRow, ...]
    movers_by_count: tuple[OpRow, ...]
    new: tuple[OpRow, ...]
    vanished: tuple[OpRow, ...]
    classes: tuple[ClassRow, ...]


@dataclass(frozen=True)
class _OpTotals:
    """Per op type (name, kind): class, total ns and count over the step windows."""

    keys: tuple[tuple[str, str], ...]
    classes: tuple[str, ...]
    total_ns: tuple[float, ...]
    count: tuple[float, ...]

    def as_dict(self) -> dict[tuple[str, str], tuple[str, float, float]]:
        return {
            k: (cls, t, n)
            for k, cls, t, n in zip(self.keys, self.classes, self.total_ns, self.count, strict=True)
        }


def _step_tasks(run: RunTables) -> tuple[pa.Table, str, pa.ChunkedArray | pa.Array]:
    """The op_summary rows inside step windows, their time column and their host ops."""
    table = run.op_summary
    table = table.filter(pc.not_equal(table.column("step"), SPAN_STEP))
    time_column = "self_ns" if "self_ns" in table.column_names else "dur_ns"
    host_op = (
        pc.cast(table.column("host_op"), pa.string())
        if "host_op" in table.column_names
        else pa.nulls(table.num_rows, pa.string())
    )
    return table, time_column, host_op


def _op_totals(run: RunTables) -> _OpTotals:
    """Op types of the tasks inside step windows: class, time and count."""
    if run.op_summary.num_rows == 0:
        return _OpTotals((), (), (), ())
    table, time_column, host_op = _step_tasks(run)
    name = pc.cast(table.column("name"), pa.string())
    # op type as in op_statistic: the launching host op when known, else the task name
    op_type = pc.coalesce(host_op, name)
    grouped = (
        pa.table(
            {
                "op_type": op_type,
                "kind": pc.cast(table.column("kind"), pa.string()),
                "name": name,
                "host_op": host_op,
                "time": table.column(time_column),
            }
        )
        .group_by(["op_type", "kind", "name", "host_op"], use_threads=False)
        .aggregate([("time", "sum"), ("time", "count")])
    )
    classes = opclass.op_classes(
        grouped["name"].to_pylist(), grouped["kind"].to_pylist(), grouped["host_op"].to_pylist()
    )
    totals: dict[tuple[str, str], tuple[float, float]] = {}
    heaviest: dict[tuple[str, str], tuple[float, str]] = {}
    for op_type_, kind, cls, total, count in zip(
        grouped["op_type"].to_pylist(),
        grouped["kind"].to_pylist(),
        classes,
        grouped["time_sum"].to_pylist(),
        grouped["time_count"].to_pylist(),
        strict=True,
    ):
        key = (str(op_type_), str(kind))
        t, n = totals.get(key, (0.0, 0.0))
        totals[key] = (t + float(total or 0), n + float(count))
        # an op type takes the class of its tasks with the most time
        if key not in heaviest or float(total or 0) > heaviest[key][0]:
            heaviest[key] = (float(total or 0), str(cls))
    keys = tuple(sorted(totals))
    return _OpTotals(
        keys=keys,
        classes=tuple(heaviest[k][1] for k in keys),
        total_ns=tuple(totals[k][0] for k in keys),
        count=tuple(totals[k][1] for k in keys),
    )


def _class_totals(run: RunTables) -> dict[str, tuple[float, float]]:
    """Per op class: total ns and count of the tasks inside step windows (each task by its own
    class, not its op type's)."""
    if run.op_summary.num_rows == 0:
        return {}
    table, time_column, host_op = _step_tasks(run)
    grouped = (
        pa.table(
            {
                "kind": pc.cast(table.column("kind"), pa.string()),
                "name": pc.cast(table.column("name"), pa.string()),
                "host_op": host_op,
                "time": table.column(time_column),
            }
        )
        .group_by(["kind", "name", "host_op"], use_threads=False)
        .aggregate([("time", "sum"), ("time", "count")])
    )
    classes = opclass.op_classes(
        grouped["name"].to_pylist(), grouped["kind"].to_pylist(), grouped["host_op"].to_pylist()
    )
    result: dict[str, tuple[float, float]] = {}
    for cls, total, count in zip(
        classes, grouped["time_sum"].to_pylist(), grouped["time_count"].to_pylist(), strict=True
    ):
        t, n = result.get(str(cls), (0.0, 0.0))
        result[str(cls)] = (t + float(total or 0), n + float(count))
    return result


def op_row(
    key: tuple[str, str],
    op_class: str,
    base: tuple[float, float],
    current: tuple[float, float],
    windows: tuple[int, int],
) -> OpRow:
    """One (name, kind) from its (total ns, count) in both runs, divided by their windows."""
    b_ms, c_ms = base[0] / 1e6 / windows[0], current[0] / 1e6 / windows[1]
    b_n, c_n = base[1] / windows[0], current[1] / windows[1]
    return OpRow(
        name=key[0],
        kind=key[1],
        op_class=op_class,
        base_ms=b_ms,
        current_ms=c_ms,
        delta_ms=c_ms - b_ms,
        base_count=b_n,
        current_count=c_n,
        delta_count=c_n - b_n,
        change_pct=100.0 * (c_ms - b_ms) / b_ms if b_ms > 0 else None,
    )


def ops_diff(base: RunTables, current: RunTables, options: DiffOptions) -> OpsDiff:
    """The op types that moved most, appeared or vanished (``top_movers`` each); op classes."""
    step_windows = (windows(base), windows(current))
    tb, tc = _op_totals(base).as_dict(), _op_totals(current).as_dict()
    rows = []
    for key in sorted(set(tb) | set(tc)):
        cls = (tc.get(key) or tb[key])[0]
        b = tb.get(key, (cls, 0.0, 0.0))
        c = tc.get(key, (cls, 0.0, 0.0))
        rows.append((key in tb, key in tc, op_row(key, cls, b[1:], c[1:], step_windows)))
    both = [r for in_b, in_c, r in rows if in_b and in_c]
    top = options.top_movers
    by_time = sorted(both, key=lambda r: (-abs(r.delta_ms), r.name, r.kind))
    by_count = sorted(both, key=lambda r: (-abs(r.delta_count), r.name, r.kind))
    new = sorted((r for in_b, _, r in rows if not in_b), key=lambda r: (-r.current_ms, r.name))
    vanished = sorted((r for _, in_c, r in rows if not in_c), key=lambda r: (-r.base_ms, r.name))
    return OpsDiff(
        movers_by_time=tuple(r for r in by_time[:top] if r.delta_ms != 0),
        movers_by_count=tuple(r for r in by_count[:top] if r.delta_count != 0),
        new=tuple(new[:top]),
        vanished=tuple(vanished[:top]),
        classes=_classes(base, current, step_windows),
    )


def _classes(
    base: RunTables, current: RunTables, step_windows: tuple[int, int]
) -> tuple[ClassRow, ...]:
    """Every op class either run has, in :data:`perfledger.analysis.opclass.OP_CLASSES` order."""
    cb, cc = _class_totals(base), _class_totals(current)
    sum_b = sum(t for t, _ in cb.values())
    sum_c = sum(t for t, _ in cc.values())
    wb, wc = step_windows
    rows = []
    for cls in opclass.OP_CLASSES:
        if cls not in cb and cls not in cc:
            continue
        b_t, b_n = cb.get(cls, (0.0, 0.0))
        c_t, c_n = cc.get(cls, (0.0, 0.0))
        b_share = 100.0 * b_t / sum_b if sum_b > 0 else None
        c_share = 100.0 * c_t / sum_c if sum_c > 0 else None
        rows.append(
            ClassRow(
                op_class=cls,
                base_ms=b_t / 1e6 / wb,
                current_ms=c_t / 1e6 / wc,
                delta_ms=c_t / 1e6 / wc - b_t / 1e6 / wb,
                base_share_pct=b_share,
                current_share_pct=c_share,
                delta_pp=None if b_share is None or c_share is None else c_share - b_share,
                base_count=b_n / wb,
                current_count=c_n / wc,
            )
        )
    return tuple(rows)
