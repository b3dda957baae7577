"""Compare two runs: step time, time account, idle gaps, operators, copies, communication, findings.

``diff_runs(base, current, options) -> RunDiff`` compares the tables of two runs
(:class:`RunTables`, read from a profile directory or from traces analysed in memory) and
returns frozen results; ``evaluate_gates`` checks ``--fail-on`` thresholds against them, and
``diff_document`` lays everything out as diff.json (the terminal and the HTML show its fields).

Definitions (every figure is per step, so that runs with different step counts compare):
- Step samples are the step windows of the step_trace rows (one wall per rank and step; the
  span rows, step -1, are left out). Step time is their **median**; p90 and the spread (robust
  coefficient of variation, 1.4826 x MAD / median) describe the distribution. A run without step
  annotations has no step time.
- Categories (compute, communication, memcpy, memset, idle, each idle cause; the host phases of
  a CPU run) are the **mean** per step row (rank, device, step), so that they add up to the mean
  step, and their share is sum(category) / sum(wall) over the step rows, so that shares add up
  to 100 %. A run without step annotations contributes its single whole-trace window.
- Operators are the device tasks (host ops on CPU runs, by self time) that belong to a step,
  grouped by op type as in op_statistic (the launching host op when known, else the task name)
  and divided by the number of step windows (rank x step). Op classes come from
  :mod:`perfledger.analysis.opclass`. Transfers and communication are the profile's totals
  divided by the same number.
- Noise: a change is *within noise* when |current - base| is at most the noise band:
  max(z x SE, floor), where SE = sqrt(s_b^2 / n_b + s_c^2 / n_c) from the per-step samples
  (s = 1.2533 x 1.4826 x MAD for a median, the sample standard deviation for a mean). With a
  single sample on one side, that side borrows the other's spread; with one sample on both the
  band is the floor alone. The floor (1 % of the base for relative figures, 0.5 percentage
  point for shares by default) keeps identical steps from calling a 0.1 % change real.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import figures, opclass
from perfledger.analysis.gaps import GAP_BUCKETS
from perfledger.errors import PerfledgerError
from perfledger.model.accounts import IDLE_CAUSES
from perfledger.model.schema import SPAN_STEP
from perfledger.version import __version__

FloatArray = npt.NDArray[np.float64]

DIFF_FORMAT_VERSION: Final = 1
MAD_TO_SIGMA: Final = 1.4826  # MAD of a normal sample times this estimates its sigma
MEDIAN_EFFICIENCY: Final = 1.2533  # standard error of a median over that of a mean, normal data

DEVICE_CATEGORIES: Final = (
    "compute",
    "communication",
    "overlapped_communication",
    "memcpy",
    "memset",
    "idle",
    *(f"idle_{cause}" for cause in IDLE_CAUSES),
)
HOST_CATEGORIES: Final = (
    "dataloader",
    "forward",
    "backward",
    "optimizer",
    "operator",
    "overhead",
)


@dataclass(frozen=True)
class DiffOptions:
    """How strict the noise test is and how many rows the tables keep."""

    noise_z: float = 2.0
    noise_floor_pct: float = 1.0
    noise_floor_pp: float = 0.5
    top_movers: int = 15


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


@dataclass(frozen=True)
class RunInfo:
    """Who is compared: the run's name and how many samples it gives."""

    label: str
    path: str
    source_kind: str
    ranks: tuple[int, ...]
    step_count: int
    windows: int  # step windows (rank x step) the per-step figures divide by
    host_only: bool


@dataclass(frozen=True)
class Distribution:
    """Per-step samples of one figure in one run."""

    count: int
    median: float | None
    p90: float | None
    mean: float | None
    spread_pct: float | None  # 1.4826 x MAD / median, in %


@dataclass(frozen=True)
class Change:
    """One figure in both runs, in its own unit (ms, %, count ...).

    ``delta`` is current - base; ``change_pct`` is delta relative to base (None when base is
    0 or unknown); ``noise`` is the half-width of the noise band in the figure's unit;
    ``within_noise`` is None when either run lacks the figure.
    """

    base: float | None
    current: float | None
    delta: float | None
    change_pct: float | None
    noise: float | None
    within_noise: bool | None


@dataclass(frozen=True)
class StepTimeDiff:
    """Step time in ms: both distributions and the change of their median and p90."""

    base: Distribution
    current: Distribution
    median: Change
    p90: Change
    throughput: Change  # steps per second, 1000 / median step ms
    base_samples: tuple[float, ...] = ()  # step walls in ms, in step order
    current_samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class CategoryDiff:
    """One accounting category: mean ms per step, and share of the step in % (delta in pp)."""

    name: str
    ms: Change
    share: Change


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
class TransferDiff:
    """One copy direction per step: count, bytes, time; bandwidth over the whole profile."""

    direction: str
    count: Change
    bytes: Change
    time_ms: Change
    gbps: Change


@dataclass(frozen=True)
class CommunicationDiff:
    """Communication time per step: total, exposed (not under compute), and per operation."""

    total_ms: Change
    exposed_ms: Change
    overlapped_ms: Change
    operations: tuple[OpRow, ...]


@dataclass(frozen=True)
class FindingChange:
    """A finding present in both runs whose severity moved."""

    id: str
    title: str
    base_severity_ms: float | None
    current_severity_ms: float | None
    base_severity_pct: float | None
    current_severity_pct: float | None


@dataclass(frozen=True)
class FindingsDiff:
    """Findings resolved (base only), new (current only), changed and unchanged."""

    resolved: tuple[Mapping[str, Any], ...]
    new: tuple[Mapping[str, Any], ...]
    changed: tuple[FindingChange, ...]
    unchanged: tuple[str, ...]


@dataclass(frozen=True)
class RunDiff:
    """Everything ``perfledger diff`` reports."""

    base: RunInfo
    current: RunInfo
    step_time: StepTimeDiff
    categories: tuple[CategoryDiff, ...]
    utilization: Change  # device busy share of the step, % (delta in pp)
    gaps: GapsDiff
    ops: OpsDiff
    transfers: tuple[TransferDiff, ...]
    communication: CommunicationDiff
    findings: FindingsDiff
    verdict: str
    options: DiffOptions = field(default_factory=DiffOptions)

    def category(self, name: str) -> CategoryDiff | None:
        """The category called ``name`` (None when the runs do not share it)."""
        return next((c for c in self.categories if c.name == name), None)


# --------------------------------------------------------------------------------------------
# Noise


def distribution(samples: FloatArray) -> Distribution:
    """Median, p90, mean and robust spread of per-step samples."""
    if samples.size == 0:
        return Distribution(0, None, None, None, None)
    median = float(np.median(samples))
    mad = float(np.median(np.abs(samples - median)))
    spread = 100.0 * MAD_TO_SIGMA * mad / median if median > 0 else None
    return Distribution(
        count=int(samples.size),
        median=median,
        p90=float(np.percentile(samples, 90)),
        mean=float(samples.mean()),
        spread_pct=spread,
    )


def _sigma(samples: FloatArray, *, robust: bool) -> float | None:
    if samples.size < 2:
        return None
    if robust:
        median = np.median(samples)
        return float(MEDIAN_EFFICIENCY * MAD_TO_SIGMA * np.median(np.abs(samples - median)))
    return float(samples.std(ddof=1))


def noise_band(base: FloatArray, current: FloatArray, *, robust: bool, z: float) -> float | None:
    """z standard errors of the difference of the two estimates (None: no spread known)."""
    sigma_b, sigma_c = _sigma(base, robust=robust), _sigma(current, robust=robust)
    if sigma_b is None and sigma_c is None:
        return None
    sigma_b = sigma_c if sigma_b is None else sigma_b
    sigma_c = sigma_b if sigma_c is None else sigma_c
    assert sigma_b is not None and sigma_c is not None
    return z * math.sqrt(sigma_b**2 / base.size + sigma_c**2 / current.size)


def compare(
    base: float | None,
    current: float | None,
    *,
    band: float | None = None,
    floor: float = 0.0,
) -> Change:
    """Two figures compared; ``band`` is the statistical noise, ``floor`` its least width."""
    if base is None or current is None or not (math.isfinite(base) and math.isfinite(current)):
        return Change(base, current, None, None, None, None)
    delta = current - base
    change_pct = 100.0 * delta / base if base != 0 else None
    noise = max(band if band is not None else 0.0, floor)
    return Change(base, current, delta, change_pct, noise, abs(delta) <= noise)


def _compare_samples(
    base: FloatArray,
    current: FloatArray,
    *,
    robust: bool,
    options: DiffOptions,
    floor_pp: bool = False,
    value_base: float | None = None,
    value_current: float | None = None,
) -> Change:
    """Compare the median (robust) or mean of two sample sets, with their noise band."""
    if base.size == 0 or current.size == 0:
        return Change(value_base, value_current, None, None, None, None)
    centre = np.median if robust else np.mean
    b = float(centre(base)) if value_base is None else value_base
    c = float(centre(current)) if value_current is None else value_current
    floor = options.noise_floor_pp if floor_pp else abs(b) * options.noise_floor_pct / 100.0
    band = noise_band(base, current, robust=robust, z=options.noise_z)
    return compare(b, c, band=band, floor=floor)


# --------------------------------------------------------------------------------------------
# Samples from the tables


def _column(table: pa.Table, name: str) -> FloatArray:
    return np.asarray(pc.fill_null(table.column(name), 0).to_numpy(zero_copy_only=False), float)


def _step_rows(run: RunTables) -> pa.Table:
    return figures.window_rows(run.step_trace)


def _host_only(run: RunTables) -> bool:
    return figures.is_host_only(run.step_trace)


def _windows(run: RunTables) -> int:
    """Step windows (rank x step) of the run: what per-step figures divide by."""
    rows = _step_rows(run)
    if rows.num_rows == 0:
        return 1
    pairs = {
        (r, s) for r, s in zip(rows["rank"].to_pylist(), rows["step"].to_pylist(), strict=True)
    }
    return max(len(pairs), 1)


def step_walls_ms(run: RunTables) -> FloatArray:
    """One wall time (ms) per rank and annotated step; empty without step annotations."""
    return figures.step_walls_ms(run.step_trace, run.step_count)


def _category_samples(run: RunTables, name: str) -> tuple[FloatArray, FloatArray]:
    """Per step row: the category in ms and its share of the window in %."""
    rows = _step_rows(run)
    column = f"{name}_ns"
    if rows.num_rows == 0 or column not in rows.column_names:
        return np.zeros(0), np.zeros(0)
    value = _column(rows, column)
    wall = _column(rows, "wall_ns")
    share = np.divide(100.0 * value, wall, out=np.zeros_like(value), where=wall > 0)
    return value / 1e6, share


def _share_of_total(run: RunTables, name: str) -> float | None:
    return figures.category_share_pct(run.step_trace, name)


# --------------------------------------------------------------------------------------------
# The comparisons


def _run_info(run: RunTables) -> RunInfo:
    ranks = (
        tuple(sorted({int(r) for r in run.step_trace.column("rank").to_pylist()}))
        if run.step_trace.num_rows
        else ()
    )
    return RunInfo(
        label=run.label,
        path=run.path,
        source_kind=run.source_kind,
        ranks=ranks,
        step_count=run.step_count,
        windows=_windows(run),
        host_only=_host_only(run),
    )


def _step_time(base: RunTables, current: RunTables, options: DiffOptions) -> StepTimeDiff:
    b, c = step_walls_ms(base), step_walls_ms(current)
    median = _compare_samples(b, c, robust=True, options=options)
    db, dc = distribution(b), distribution(c)
    p90 = compare(db.p90, dc.p90)
    if median.base and median.current:
        tb, tc = 1000.0 / median.base, 1000.0 / median.current
        # throughput is the inverse of the median step: the same samples, the same verdict
        throughput = Change(
            tb,
            tc,
            tc - tb,
            100.0 * (tc - tb) / tb,
            None if median.noise is None else tb * median.noise / median.base,
            median.within_noise,
        )
    else:
        throughput = Change(None, None, None, None, None, None)
    return StepTimeDiff(
        base=db,
        current=dc,
        median=median,
        p90=p90,
        throughput=throughput,
        base_samples=tuple(float(x) for x in b),
        current_samples=tuple(float(x) for x in c),
    )


def _categories(
    base: RunTables, current: RunTables, options: DiffOptions
) -> tuple[CategoryDiff, ...]:
    names = HOST_CATEGORIES if _host_only(base) and _host_only(current) else DEVICE_CATEGORIES
    if _host_only(base) != _host_only(current):
        return ()
    result = []
    for name in names:
        b_ms, b_share = _category_samples(base, name)
        c_ms, c_share = _category_samples(current, name)
        ms = _compare_samples(b_ms, c_ms, robust=False, options=options)
        share = _compare_samples(
            b_share,
            c_share,
            robust=False,
            options=options,
            floor_pp=True,
            value_base=_share_of_total(base, name),
            value_current=_share_of_total(current, name),
        )
        result.append(CategoryDiff(name=name, ms=ms, share=share))
    return tuple(result)


def _utilization(base: RunTables, current: RunTables, options: DiffOptions) -> Change:
    if _host_only(base) or _host_only(current):
        return Change(None, None, None, None, None, None)
    _, b_share = _category_samples(base, "idle")
    _, c_share = _category_samples(current, "idle")
    return _compare_samples(
        100.0 - b_share,
        100.0 - c_share,
        robust=False,
        options=options,
        floor_pp=True,
        value_base=figures.utilization_pct(base.step_trace),
        value_current=figures.utilization_pct(current.step_trace),
    )


def _gap_samples(run: RunTables) -> pa.Table:
    gaps = run.gaps
    if gaps.num_rows == 0:
        return gaps
    return gaps.filter(pc.greater(gaps.column("dur_ns"), 0))


def _gaps(base: RunTables, current: RunTables, options: DiffOptions) -> GapsDiff:
    gb, gc = _gap_samples(base), _gap_samples(current)
    wb, wc = _windows(base), _windows(current)
    db = _column(gb, "dur_ns") / 1e3 if gb.num_rows else np.zeros(0)
    dc = _column(gc, "dur_ns") / 1e3 if gc.num_rows else np.zeros(0)
    median = _compare_samples(db, dc, robust=True, options=options)
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


# Op statistics per step ------------------------------------------------------------------------


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


def _op_totals(run: RunTables) -> _OpTotals:
    """Op types of the tasks inside step windows: class, time and count."""
    table = run.op_summary
    if table.num_rows == 0:
        return _OpTotals((), (), (), ())
    table = table.filter(pc.not_equal(table.column("step"), SPAN_STEP))
    time_column = "self_ns" if "self_ns" in table.column_names else "dur_ns"
    name = pc.cast(table.column("name"), pa.string())
    host_op = (
        pc.cast(table.column("host_op"), pa.string())
        if "host_op" in table.column_names
        else pa.nulls(table.num_rows, pa.string())
    )
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
    table = run.op_summary
    if table.num_rows == 0:
        return {}
    table = table.filter(pc.not_equal(table.column("step"), SPAN_STEP))
    time_column = "self_ns" if "self_ns" in table.column_names else "dur_ns"
    host_op = (
        pc.cast(table.column("host_op"), pa.string())
        if "host_op" in table.column_names
        else pa.nulls(table.num_rows, pa.string())
    )
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


def _op_row(
    key: tuple[str, str],
    op_class: str,
    base: tuple[float, float],
    current: tuple[float, float],
    windows: tuple[int, int],
) -> OpRow:
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


def _ops(base: RunTables, current: RunTables, options: DiffOptions) -> OpsDiff:
    windows = (_windows(base), _windows(current))
    tb, tc = _op_totals(base).as_dict(), _op_totals(current).as_dict()
    rows = []
    for key in sorted(set(tb) | set(tc)):
        cls = (tc.get(key) or tb[key])[0]
        b = tb.get(key, (cls, 0.0, 0.0))
        c = tc.get(key, (cls, 0.0, 0.0))
        rows.append((key in tb, key in tc, _op_row(key, cls, b[1:], c[1:], windows)))
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
        classes=_classes(base, current, windows),
    )


def _classes(base: RunTables, current: RunTables, windows: tuple[int, int]) -> tuple[ClassRow, ...]:
    cb, cc = _class_totals(base), _class_totals(current)
    sum_b = sum(t for t, _ in cb.values())
    sum_c = sum(t for t, _ in cc.values())
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
                base_ms=b_t / 1e6 / windows[0],
                current_ms=c_t / 1e6 / windows[1],
                delta_ms=c_t / 1e6 / windows[1] - b_t / 1e6 / windows[0],
                base_share_pct=b_share,
                current_share_pct=c_share,
                delta_pp=None if b_share is None or c_share is None else c_share - b_share,
                base_count=b_n / windows[0],
                current_count=c_n / windows[1],
            )
        )
    return tuple(rows)


def _transfers(base: RunTables, current: RunTables) -> tuple[TransferDiff, ...]:
    wb, wc = _windows(base), _windows(current)

    def by_direction(table: pa.Table) -> dict[str, dict[str, Any]]:
        return {str(r["direction"]): r for r in table.to_pylist()}

    rb, rc = by_direction(base.transfers), by_direction(current.transfers)
    order = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "unknown")
    directions = [d for d in order if d in rb or d in rc]
    directions += sorted((set(rb) | set(rc)) - set(order))
    empty = {"count": 0, "bytes": 0, "time_ns": 0, "gbps": None}
    result = []
    for direction in directions:
        b, c = rb.get(direction, empty), rc.get(direction, empty)
        result.append(
            TransferDiff(
                direction=direction,
                count=compare(float(b["count"]) / wb, float(c["count"]) / wc),
                bytes=compare(float(b["bytes"] or 0) / wb, float(c["bytes"] or 0) / wc),
                time_ms=compare(float(b["time_ns"]) / 1e6 / wb, float(c["time_ns"]) / 1e6 / wc),
                gbps=compare(_finite(b["gbps"]), _finite(c["gbps"])),
            )
        )
    return tuple(result)


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _communication(base: RunTables, current: RunTables, options: DiffOptions) -> CommunicationDiff:
    wb, wc = _windows(base), _windows(current)

    def totals(table: pa.Table, column: str) -> float:
        return float(_column(table, column).sum()) / 1e6 if table.num_rows else 0.0

    def per_name(table: pa.Table) -> dict[tuple[str, str], tuple[float, float]]:
        result: dict[tuple[str, str], tuple[float, float]] = {}
        for row in table.to_pylist():
            key = (str(row["name"]), "comm")
            t, n = result.get(key, (0.0, 0.0))
            result[key] = (t + float(row["total_ns"]), n + float(row["count"]))
        return result

    has = base.communication.num_rows > 0 or current.communication.num_rows > 0
    names_b, names_c = per_name(base.communication), per_name(current.communication)
    rows = [
        _op_row(
            key,
            opclass.COMMUNICATION,
            names_b.get(key, (0.0, 0.0)),
            names_c.get(key, (0.0, 0.0)),
            (wb, wc),
        )
        for key in sorted(set(names_b) | set(names_c))
    ]
    rows.sort(key=lambda r: (-abs(r.delta_ms), r.name))

    def change(column: str) -> Change:
        if not has:
            return Change(None, None, None, None, None, None)
        return compare(
            totals(base.communication, column) / wb, totals(current.communication, column) / wc
        )

    return CommunicationDiff(
        total_ms=change("total_ns"),
        exposed_ms=change("exposed_ns"),
        overlapped_ms=change("overlapped_ns"),
        operations=tuple(rows[: options.top_movers]),
    )


def _severity(finding: Mapping[str, Any], key: str) -> float | None:
    value = finding.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def findings_diff(
    base: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]
) -> FindingsDiff:
    """Match findings by id: resolved, new, changed (severity moved) and unchanged."""
    by_b = {str(f.get("id")): f for f in base}
    by_c = {str(f.get("id")): f for f in current}
    resolved = tuple(f for i, f in by_b.items() if i not in by_c)
    new = tuple(f for i, f in by_c.items() if i not in by_b)
    changed: list[FindingChange] = []
    unchanged: list[str] = []
    for finding_id, b in by_b.items():
        c = by_c.get(finding_id)
        if c is None:
            continue
        severity = (
            _severity(b, "severity_ms"),
            _severity(c, "severity_ms"),
            _severity(b, "severity_pct"),
            _severity(c, "severity_pct"),
        )
        if severity[0] == severity[1] and severity[2] == severity[3]:
            unchanged.append(finding_id)
            continue
        changed.append(
            FindingChange(
                id=finding_id,
                title=str(c.get("title") or b.get("title") or finding_id),
                base_severity_ms=severity[0],
                current_severity_ms=severity[1],
                base_severity_pct=severity[2],
                current_severity_pct=severity[3],
            )
        )
    return FindingsDiff(resolved, new, tuple(changed), tuple(unchanged))


def _verdict(step: StepTimeDiff, base: RunInfo, current: RunInfo) -> str:
    change = step.median
    if change.base is None or change.current is None:
        missing = [r.label for r in (base, current) if r.step_count <= 0]
        who = " and ".join(missing) if missing else "one run"
        return f"step time not compared: {who} has no step annotation"
    assert change.change_pct is not None and change.noise is not None
    direction = "slower" if change.delta and change.delta > 0 else "faster"
    noise_pct = 100.0 * change.noise / change.base if change.base else 0.0
    figures = (
        f"step time {change.base:.3f} ms -> {change.current:.3f} ms "
        f"({change.change_pct:+.1f}%, noise ±{noise_pct:.1f}%)"
    )
    if change.within_noise:
        return f"{figures}: within noise"
    return f"{figures}: {direction}, beyond run-to-run noise"


def diff_runs(base: RunTables, current: RunTables, options: DiffOptions | None = None) -> RunDiff:
    """Compare ``current`` against ``base``."""
    options = options or DiffOptions()
    info_b, info_c = _run_info(base), _run_info(current)
    step_time = _step_time(base, current, options)
    return RunDiff(
        base=info_b,
        current=info_c,
        step_time=step_time,
        categories=_categories(base, current, options),
        utilization=_utilization(base, current, options),
        gaps=_gaps(base, current, options),
        ops=_ops(base, current, options),
        transfers=_transfers(base, current),
        communication=_communication(base, current, options),
        findings=findings_diff(base.findings, current.findings),
        verdict=_verdict(step_time, info_b, info_c),
        options=options,
    )


# --------------------------------------------------------------------------------------------
# The CI gate: --fail-on "step_time>+5%" --fail-on "idle>+2pp"

GATE_UNITS: Final = ("%", "pp", "ms")
_GATE: Final = re.compile(
    r"^\s*(?P<metric>[a-z_]+)\s*(?P<op>>=|<=|>|<)\s*(?P<value>[+-]?\d+(?:\.\d+)?)\s*"
    r"(?P<unit>%|pp|ms)\s*$"
)
# metric -> the units it accepts
GATE_METRICS: Final = {
    "step_time": ("%", "ms"),
    "step_time_p90": ("%", "ms"),
    "throughput": ("%",),
    "utilization": ("pp",),
    "gap": ("%", "ms"),
    **dict.fromkeys((*DEVICE_CATEGORIES, *HOST_CATEGORIES), ("%", "ms", "pp")),
}
CROSSED: Final = "crossed"
WITHIN_NOISE: Final = "within_noise"
PASSED: Final = "ok"
UNKNOWN: Final = "unknown"


@dataclass(frozen=True)
class Threshold:
    """One ``--fail-on`` expression: fail when ``metric``'s change ``op`` ``limit`` ``unit``."""

    expression: str
    metric: str
    op: str
    limit: float
    unit: str


@dataclass(frozen=True)
class GateCheck:
    """A threshold evaluated: the change it looked at and whether it was crossed."""

    threshold: Threshold
    value: float | None  # the change, in the threshold's unit
    base: float | None
    current: float | None
    noise: float | None  # noise band in the threshold's unit
    within_noise: bool | None
    status: str  # crossed, within_noise, ok, unknown

    @property
    def crossed(self) -> bool:
        return self.status == CROSSED


def parse_threshold(expression: str) -> Threshold:
    """Parse ``METRIC OP VALUE UNIT`` (e.g. ``step_time>+5%``, ``idle>+2pp``, ``compute<-3ms``)."""
    match = _GATE.match(expression)
    if match is None:
        raise PerfledgerError(
            f"--fail-on {expression!r}: expected METRIC>VALUE or METRIC<VALUE with a unit "
            f"(% change, pp of the step, ms), e.g. 'step_time>+5%' or 'idle>+2pp'"
        )
    metric, unit = match["metric"], match["unit"]
    accepted = GATE_METRICS.get(metric)
    if accepted is None:
        raise PerfledgerError(
            f"--fail-on {expression!r}: unknown metric {metric!r}; one of "
            + ", ".join(sorted(GATE_METRICS))
        )
    if unit not in accepted:
        raise PerfledgerError(
            f"--fail-on {expression!r}: {metric} takes {' or '.join(accepted)}, not {unit}"
        )
    return Threshold(expression.strip(), metric, match["op"], float(match["value"]), unit)


def _gate_change(diff: RunDiff, metric: str, unit: str) -> tuple[Change, float | None]:
    """The change a metric's threshold looks at, and its value in the threshold's unit."""
    empty = Change(None, None, None, None, None, None)
    if metric == "step_time":
        change = diff.step_time.median
    elif metric == "step_time_p90":
        median = diff.step_time.median
        p90 = diff.step_time.p90
        # p90 has no noise estimate of its own: it borrows the median's relative band
        noise = (
            None
            if median.noise is None or not median.base or p90.base is None
            else p90.base * median.noise / median.base
        )
        change = compare(p90.base, p90.current, band=noise)
    elif metric == "throughput":
        change = diff.step_time.throughput
    elif metric == "utilization":
        change = diff.utilization
    elif metric == "gap":
        gap = diff.gaps.duration_us
        change = Change(
            None if gap.base is None else gap.base / 1e3,
            None if gap.current is None else gap.current / 1e3,
            None if gap.delta is None else gap.delta / 1e3,
            gap.change_pct,
            None if gap.noise is None else gap.noise / 1e3,
            gap.within_noise,
        )
    else:
        category = diff.category(metric)
        if category is None:
            return empty, None
        change = category.share if unit == "pp" else category.ms
    if unit == "%":
        return change, change.change_pct
    return change, change.delta


def evaluate_gates(
    diff: RunDiff, thresholds: Sequence[Threshold], *, ignore_noise: bool = False
) -> tuple[GateCheck, ...]:
    """Evaluate every threshold; a change within noise never fails unless ``ignore_noise``."""
    checks = []
    for threshold in thresholds:
        change, value = _gate_change(diff, threshold.metric, threshold.unit)
        noise = change.noise
        if threshold.unit == "%" and noise is not None and change.base:
            noise = 100.0 * noise / abs(change.base)
        if value is None:
            status = UNKNOWN
        else:
            beyond = {
                ">": value > threshold.limit,
                ">=": value >= threshold.limit,
                "<": value < threshold.limit,
                "<=": value <= threshold.limit,
            }[threshold.op]
            if not beyond:
                status = PASSED
            elif change.within_noise and not ignore_noise:
                status = WITHIN_NOISE
            else:
                status = CROSSED
        checks.append(
            GateCheck(
                threshold=threshold,
                value=value,
                base=change.base,
                current=change.current,
                noise=noise,
                within_noise=change.within_noise,
                status=status,
            )
        )
    return tuple(checks)


# --------------------------------------------------------------------------------------------
# diff.json


def _r(value: float | None, decimals: int = 3) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), decimals)


def _change(change: Change, unit: str, decimals: int = 3) -> dict[str, Any]:
    return {
        "base": _r(change.base, decimals),
        "current": _r(change.current, decimals),
        f"change_{unit}": _r(change.delta, decimals),
        "change_pct": _r(change.change_pct, 2),
        "noise": _r(change.noise, decimals),
        "within_noise": change.within_noise,
    }


def _distribution(d: Distribution) -> dict[str, Any]:
    return {
        "steps": d.count,
        "median": _r(d.median),
        "p90": _r(d.p90),
        "mean": _r(d.mean),
        "spread_pct": _r(d.spread_pct, 2),
    }


def _op_row_json(row: OpRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "kind": row.kind,
        "class": row.op_class,
        "base_ms": _r(row.base_ms, 4),
        "current_ms": _r(row.current_ms, 4),
        "change_ms": _r(row.delta_ms, 4),
        "change_pct": _r(row.change_pct, 2),
        "base_count": _r(row.base_count, 3),
        "current_count": _r(row.current_count, 3),
        "change_count": _r(row.delta_count, 3),
    }


def _finding_json(finding: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": finding.get("id"),
        "title": finding.get("title"),
        "severity_ms": _r(_severity(finding, "severity_ms")),
        "severity_pct": _r(_severity(finding, "severity_pct"), 2),
    }


def _run_json(info: RunInfo) -> dict[str, Any]:
    return {
        "label": info.label,
        "path": info.path,
        "source_kind": info.source_kind,
        "ranks": list(info.ranks),
        "step_count": info.step_count,
        "windows": info.windows,
        "host_only": info.host_only,
    }


def check_json(check: GateCheck) -> dict[str, Any]:
    """One evaluated threshold as diff.json writes it."""
    return {
        "threshold": check.threshold.expression,
        "metric": check.threshold.metric,
        "unit": check.threshold.unit,
        "limit": check.threshold.limit,
        "value": _r(check.value, 3),
        "base": _r(check.base, 3),
        "current": _r(check.current, 3),
        "noise": _r(check.noise, 3),
        "within_noise": check.within_noise,
        "status": check.status,
    }


def diff_document(diff: RunDiff, checks: Sequence[GateCheck] = ()) -> dict[str, Any]:
    """diff.json: DESIGN.md's fixed keys first (base, current, step_time_ms, categories,
    failed), then the rest. Times in ms (3 decimals; op rows 4), shares in %, changes of shares
    in percentage points (``change_pp``)."""
    step = diff.step_time
    categories = {
        c.name: {
            "base_ms": _r(c.ms.base),
            "current_ms": _r(c.ms.current),
            "change_ms": _r(c.ms.delta),
            "change_pct": _r(c.ms.change_pct, 2),
            "within_noise": c.ms.within_noise,
            "base_pct": _r(c.share.base, 2),
            "current_pct": _r(c.share.current, 2),
            "change_pp": _r(c.share.delta, 2),
            "noise_pp": _r(c.share.noise, 2),
            "within_noise_pp": c.share.within_noise,
        }
        for c in diff.categories
    }
    gaps = diff.gaps
    return {
        "format_version": DIFF_FORMAT_VERSION,
        "tool_version": __version__,
        "base": _run_json(diff.base),
        "current": _run_json(diff.current),
        "verdict": diff.verdict,
        "step_time_ms": {
            "base": _r(step.median.base),
            "current": _r(step.median.current),
            "change_pct": _r(step.median.change_pct, 2),
            "within_noise": step.median.within_noise,
            "change_ms": _r(step.median.delta),
            "noise_ms": _r(step.median.noise),
            "base_p90": _r(step.base.p90),
            "current_p90": _r(step.current.p90),
            "p90_change_pct": _r(step.p90.change_pct, 2),
            "base_spread_pct": _r(step.base.spread_pct, 2),
            "current_spread_pct": _r(step.current.spread_pct, 2),
            "base_distribution": _distribution(step.base),
            "current_distribution": _distribution(step.current),
            "base_samples": [_r(x) for x in step.base_samples],
            "current_samples": [_r(x) for x in step.current_samples],
        },
        "throughput_steps_per_s": _change(step.throughput, "per_s"),
        "utilization_pct": _change(diff.utilization, "pp", 2),
        "categories": categories,
        "failed": [check_json(c) for c in checks if c.crossed],
        "checks": [check_json(c) for c in checks],
        "gaps": {
            "median_us": _change(gaps.duration_us, "us"),
            "mean_us": _change(gaps.mean_us, "us"),
            "p90_us": _change(gaps.p90_us, "us"),
            "count_per_step": _change(gaps.count_per_step, "count"),
            "idle_ms_per_step": _change(gaps.idle_ms_per_step, "ms"),
            "buckets": [
                {
                    "label": b.label,
                    "base_count": _r(b.base_count),
                    "current_count": _r(b.current_count),
                    "base_ms": _r(b.base_ms),
                    "current_ms": _r(b.current_ms),
                }
                for b in gaps.buckets
            ],
            "by_cause_ms": {cause: _change(c, "ms") for cause, c in gaps.by_cause_ms},
        },
        "ops": {
            "movers_by_time": [_op_row_json(r) for r in diff.ops.movers_by_time],
            "movers_by_count": [_op_row_json(r) for r in diff.ops.movers_by_count],
            "new": [_op_row_json(r) for r in diff.ops.new],
            "vanished": [_op_row_json(r) for r in diff.ops.vanished],
        },
        "op_classes": [
            {
                "class": r.op_class,
                "base_ms": _r(r.base_ms),
                "current_ms": _r(r.current_ms),
                "change_ms": _r(r.delta_ms),
                "base_share_pct": _r(r.base_share_pct, 2),
                "current_share_pct": _r(r.current_share_pct, 2),
                "change_pp": _r(r.delta_pp, 2),
                "base_count": _r(r.base_count),
                "current_count": _r(r.current_count),
            }
            for r in diff.ops.classes
        ],
        "transfers": [
            {
                "direction": t.direction,
                "count": _change(t.count, "count"),
                "bytes": _change(t.bytes, "bytes", 1),
                "time_ms": _change(t.time_ms, "ms"),
                "gbps": _change(t.gbps, "gbps"),
            }
            for t in diff.transfers
        ],
        "communication": {
            "total_ms": _change(diff.communication.total_ms, "ms"),
            "exposed_ms": _change(diff.communication.exposed_ms, "ms"),
            "overlapped_ms": _change(diff.communication.overlapped_ms, "ms"),
            "operations": [_op_row_json(r) for r in diff.communication.operations],
        },
        "findings": {
            "resolved": [_finding_json(f) for f in diff.findings.resolved],
            "new": [_finding_json(f) for f in diff.findings.new],
            "changed": [
                {
                    "id": f.id,
                    "title": f.title,
                    "base_severity_ms": _r(f.base_severity_ms),
                    "current_severity_ms": _r(f.current_severity_ms),
                    "base_severity_pct": _r(f.base_severity_pct, 2),
                    "current_severity_pct": _r(f.current_severity_pct, 2),
                }
                for f in diff.findings.changed
            ],
            "unchanged": list(diff.findings.unchanged),
        },
        "noise_options": {
            "z": diff.options.noise_z,
            "floor_pct": diff.options.noise_floor_pct,
            "floor_pp": diff.options.noise_floor_pp,
        },
    }
