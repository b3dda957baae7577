"""The HTML report: one self-contained file (ECharts inlined, no network) under 5 MB.

The report lays out results computed elsewhere: every number it shows is a field of
:class:`ReportData` (accounting rows, gap report, op tables, findings, headline figures).
Building the payload only selects, samples and packs rows in columns: the longest operators,
a few steps of the timeline, evenly spaced counter samples.

Every string that came from a trace travels inside one JSON document in a
``<script type="application/json">`` block whose ``<``, ``>`` and ``&`` are escaped, and the
page writes it with ``textContent`` (or escapes it for chart tooltips), so an op named
``</script><img src=x onerror=alert(1)>`` is shown as text and runs nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import jinja2
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from markupsafe import Markup

from perfledger.analysis.cluster.collectives import SLOW_LINK_PCT, slow_links
from perfledger.errors import PerfledgerError
from perfledger.files import write_bytes
from perfledger.model import schema
from perfledger.model.accounts import (
    GAPS_SCHEMA,
    IDLE_CAUSES,
    HostWindowAccount,
    StepWindow,
    WindowAccount,
)
from perfledger.model.cluster import MATRIX_SCHEMA
from perfledger.model.gaps import GapReport
from perfledger.render.timeline import dictionary_codes
from perfledger.version import __version__

if TYPE_CHECKING:
    from perfledger.model.cluster import ClusterReport
    from perfledger.model.profile import ProfileAnalysis

Int64Array = npt.NDArray[np.int64]

REPORT_FORMAT_VERSION: Final = 1
MAX_REPORT_BYTES: Final = 5 * 1024 * 1024
# Payload budgets: together they keep the report far below MAX_REPORT_BYTES on any profile.
TIMELINE_STEPS: Final = 6
TIMELINE_EVENTS_PER_STEP: Final = 12_000
TABLE_ROWS: Final = {
    "op_statistic": 1_000,
    "op_summary": 1_500,
    "api_statistic": 500,
    "kernel_details": 1_000,
    "transfers": 100,
    "communication": 500,
    "worst_gaps": 50,
    "cluster_ranks": 1_000,
}
COUNTER_POINTS: Final = 1_200
# Table columns holding instants (absolute ns), shown from the profile start.
_INSTANT_COLUMNS: Final = frozenset({"start_ns", "end_ns", "launch_ns", "ts_ns", "launch_start_ns"})
# Strings of tables and timeline tooltips are cut at this length (the CSV files keep them).
TEXT_CHARS: Final = 300
# Room for the page around the scripts and the payload.
_PAGE_MARGIN: Final = 64 * 1024
COUNTER_SERIES: Final = 12
ACCOUNTING_STEPS: Final = 2_000
# Cells of each rank x step heat map (the first steps of the first devices beyond it).
CLUSTER_CELLS: Final = 40_000
# The communication matrix shows the pairs of its first source and destination ranks; its
# slow-link table lists the slowest links of the whole matrix.
MATRIX_SRC_RANKS: Final = 64
MATRIX_DST_RANKS: Final = 64
MATRIX_SLOW_LINKS: Final = 50

_ACCOUNT_SERIES: Final = (
    ("compute", "compute_ns"),
    ("communication", "communication_ns"),
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
_TEMPLATE_PACKAGE: Final = "perfledger.render"


@dataclass(frozen=True)
class Headline:
    """The figures at the top of the report (from summary.json; None when unknown)."""

    step_time_ms: float | None = None
    device_utilization_pct: float | None = None
    throughput: float | None = None
    throughput_unit: str | None = None
    profiler_overhead_pct: float | None = None
    step_count: int | None = None
    ranks: int | None = None
    loss: str | None = None
    # utilisation of each device over its span, labelled "rank r device d"
    device_utilization: tuple[tuple[str, float], ...] = ()


def headline_from_summary(summary: Mapping[str, Any]) -> Headline:
    """Read the headline figures of a summary.json document (no figure is derived here).

    Keys read: ``step_time_ms``, ``device_utilization_pct``, ``devices`` (each with ``rank``,
    ``device`` and ``utilization_pct``), ``throughput`` (a number, or ``{"value", "unit"}``),
    ``throughput_unit``, ``profiler_overhead_pct``, ``step_count``, ``ranks`` (a count or a
    list of rank ids) and ``loss``.
    """
    per_device = tuple(
        (f"rank {d.get('rank', 0)} device {d.get('device', 0)}", value)
        for d in summary.get("devices") or ()
        if isinstance(d, Mapping) and (value := _number(d.get("utilization_pct"))) is not None
    )
    utilization = _number(summary.get("device_utilization_pct"))
    if utilization is None and len(per_device) == 1:
        utilization = per_device[0][1]
    throughput = summary.get("throughput")
    unit = summary.get("throughput_unit")
    if isinstance(throughput, Mapping):
        unit = throughput.get("unit", unit)
        throughput = throughput.get("value")
    ranks = summary.get("ranks")
    if isinstance(ranks, Sequence) and not isinstance(ranks, str):
        ranks = len(ranks)
    return Headline(
        step_time_ms=_number(summary.get("step_time_ms")),
        device_utilization_pct=utilization,
        throughput=_number(throughput),
        throughput_unit=str(unit) if unit is not None else None,
        profiler_overhead_pct=_number(summary.get("profiler_overhead_pct")),
        step_count=int(summary["step_count"]) if summary.get("step_count") is not None else None,
        ranks=int(ranks) if isinstance(ranks, (int, float)) else None,
        loss=str(summary["loss"]) if summary.get("loss") else None,
        device_utilization=per_device,
    )


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, computed by the analyses.

    Attributes:
        title: the profile's name.
        events: canonical events (step assigned): the step timeline is drawn from them.
        windows: step windows of every rank.
        accounts: device accounting rows (per rank, device and step; step -1 is the span).
        host_accounts: host-only accounting rows (CPU runs).
        gaps: idle gaps (GAPS_SCHEMA), highlighted on the step timeline.
        gap_report: the gap histogram and the worst gaps.
        op_statistic, op_summary, api_statistic, kernel_details, transfers, communication:
            the analyses' tables, as written to the CSV files.
        counters: host and device counters (COUNTERS_SCHEMA).
        findings: ``{id, title, severity_ms, severity_pct, evidence, suggestion, verify}``,
            sorted by severity; an optional ``spans`` list of ``{rank, start_ns, end_ns}``
            gives the "show on timeline" links.
        headline: median step time, utilisation, throughput, profiler overhead.
        meta: run metadata shown in the header (source, versions, devices).
        cluster: the cluster pass of a profile of several ranks (rank x step heat maps).
    """

    title: str
    events: pa.Table = field(default_factory=schema.empty_events)
    windows: tuple[StepWindow, ...] = ()
    accounts: tuple[WindowAccount, ...] = ()
    host_accounts: tuple[HostWindowAccount, ...] = ()
    gaps: pa.Table | None = None
    gap_report: GapReport | None = None
    op_statistic: pa.Table | None = None
    op_summary: pa.Table | None = None
    api_statistic: pa.Table | None = None
    kernel_details: pa.Table | None = None
    transfers: pa.Table | None = None
    communication: pa.Table | None = None
    counters: pa.Table | None = None
    findings: tuple[Mapping[str, Any], ...] = ()
    headline: Headline = field(default_factory=Headline)
    meta: Mapping[str, Any] = field(default_factory=dict)
    cluster: ClusterReport | None = None


def report_data_from_profile(
    analysis: ProfileAnalysis,
    summary: Mapping[str, Any],
    *,
    title: str,
    meta: Mapping[str, Any] | None = None,
) -> ReportData:
    """The report's inputs from a profile's analysis and its summary.json document.

    Findings come from ``summary["findings"]`` (with their ``spans``); the headline from
    :func:`headline_from_summary`.
    """
    return ReportData(
        title=title,
        events=analysis.events,
        windows=tuple(w for r in analysis.ranks for w in r.windows),
        accounts=tuple(a for r in analysis.ranks for a in r.accounting.windows),
        host_accounts=tuple(a for r in analysis.ranks for a in r.accounting.host),
        gaps=analysis.gaps,
        gap_report=analysis.gap_report,
        op_statistic=analysis.op_statistic,
        op_summary=analysis.op_summary,
        api_statistic=analysis.api_statistic,
        kernel_details=analysis.kernel_details,
        transfers=analysis.transfers,
        communication=analysis.communication,
        counters=analysis.counters,
        findings=tuple(summary.get("findings") or ()),
        headline=headline_from_summary(summary),
        meta=dict(meta) if meta is not None else {"source": summary.get("source")},
        cluster=analysis.cluster,
    )


def write_report(path: Path, data: ReportData) -> None:
    """Write the self-contained HTML report (temporary name, then renamed).

    Raises:
        PerfledgerError: the report would exceed MAX_REPORT_BYTES (a payload budget bug).
    """
    html = render_report(data)
    encoded = html.encode("utf-8")
    if len(encoded) > MAX_REPORT_BYTES:
        raise PerfledgerError(
            f"{path}: the report would be {len(encoded) / 1e6:.1f} MB, over the "
            f"{MAX_REPORT_BYTES / 1e6:.0f} MB limit"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, encoded)


def render_report(data: ReportData) -> str:
    """The report as one HTML string, its payload shrunk until the page fits the size limit."""
    echarts = inline_asset("echarts.min.js")
    app_js = _template_text("report.js")
    css = _template_text("report.css")
    fixed = sum(len(t.encode("utf-8")) for t in (echarts, app_js, css)) + _PAGE_MARGIN
    limits = _Limits()
    # the shrunk payloads draw fewer steps and fewer events of each: a subset of these rows
    prepared = _prepare(data, _timeline_spans(data, limits), limits.timeline_events)
    payload = script_json(report_payload(data, limits, prepared))
    for _ in range(8):
        if fixed + len(payload.encode("utf-8")) <= MAX_REPORT_BYTES:
            break
        limits = limits.shrunk()
        payload = script_json(report_payload(data, limits, prepared))
    template = template_environment().get_template("report.html.j2")
    return template.render(
        title=data.title,
        echarts=Markup(echarts),
        echarts_version=inline_asset("echarts.VERSION").splitlines()[0],
        app_js=Markup(app_js),
        css=Markup(css),
        payload=Markup(payload),
        # only these two scripts may run: no inline handler, nothing fetched
        script_hashes=Markup(" ".join(f"'{csp_hash(text)}'" for text in (echarts, app_js))),
    )


def csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def script_json(value: Any) -> str:
    """JSON safe to place inside a ``<script>`` element: no ``<``, ``>``, ``&`` or U+2028/9."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a NaN somewhere: walk the document once to null it
        text = json.dumps(
            _finite(value), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# --------------------------------------------------------------------------------------------
# The payload: what the page draws, packed in columns.


@dataclass(frozen=True)
class _Limits:
    """How much of each table and timeline the payload holds; halved while it is too big."""

    timeline_steps: int = TIMELINE_STEPS
    timeline_events: int = TIMELINE_EVENTS_PER_STEP
    table_scale: float = 1.0
    counter_points: int = COUNTER_POINTS
    text_chars: int = TEXT_CHARS

    def shrunk(self) -> _Limits:
        return _Limits(
            timeline_steps=max(2, self.timeline_steps - 2),
            timeline_events=max(500, self.timeline_events // 2),
            table_scale=self.table_scale / 2,
            counter_points=max(100, self.counter_points // 2),
            text_chars=max(60, self.text_chars // 2),
        )


Span = tuple[int, int]


@dataclass(frozen=True)
class _Prepared:
    """The rows the step timelines can draw, as numpy arrays, strings as dictionary codes.

    Only the rows of ``spans`` that a timeline of at most ``limit`` events can show are held
    (every row of a span with at most ``limit`` rows, else its ``limit`` longest): the profile's
    other events stay where they are (memory-mapped for a profile of many ranks).
    """

    spans: frozenset[Span]  # the step hulls [start_ns, end_ns) whose rows are held
    limit: int  # events (and gaps) per span held
    events_total: Mapping[Span, int]  # events overlapping each span, held or not
    origin_ns: int | None  # the earliest event start of the whole profile
    rank: Int64Array
    device: Int64Array
    stream: Int64Array
    pid: Int64Array
    start: Int64Array
    dur: Int64Array
    kind: Int64Array
    name: Int64Array
    labels: list[str]  # event names, then "idle: <cause>" for every gap cause
    kinds: list[str]  # event kinds, then "idle: <cause>"
    step_kind: int  # code of the step kind, -1 when absent
    gap_rank: Int64Array
    gap_device: Int64Array
    gap_start: Int64Array
    gap_end: Int64Array
    gap_label: Int64Array  # into labels
    gap_kind: Int64Array  # into kinds

    def covers(self, spans: Sequence[Span], limit: int) -> bool:
        """Whether the timelines of these spans, ``limit`` events each, draw only held rows."""
        return limit <= self.limit and self.spans.issuperset(spans)


def _prepare(data: ReportData, spans: Sequence[Span], limit: int) -> _Prepared:
    """Read the rows of ``spans`` that timelines of at most ``limit`` events can draw.

    The codes of names, kinds and causes are those of the whole tables, so the payload is
    the same as if every row had been read.
    """
    events = data.events
    drawn = ["rank", "kind", "name", "device", "stream", "pid", "start_ns", "dur_ns"]
    held, totals = _held_rows(events.select(drawn), "start_ns", _event_end, spans, limit)
    kind, kinds = _codes(events, held, "kind")
    name, names = _codes(events, held, "name")
    gaps = data.gaps if data.gaps is not None else GAPS_SCHEMA.empty_table()
    gap_columns = ["rank", "device", "start_ns", "end_ns", "cause"]
    held_gaps, _ = _held_rows(gaps.select(gap_columns), "start_ns", _gap_end, spans, limit)
    cause, causes = _codes(gaps, held_gaps, "cause")
    cause_text = [f"idle: {c or 'other'}" for c in causes]
    kind_text = [k or "" for k in kinds]
    origin = pc.min(events.column("start_ns")).as_py() if events.num_rows else None
    return _Prepared(
        spans=frozenset(spans),
        limit=limit,
        events_total=totals,
        origin_ns=int(origin) if origin is not None else None,
        rank=_int64(held, "rank"),
        device=_int64(held, "device"),
        stream=_int64(held, "stream"),
        pid=_int64(held, "pid"),
        start=_int64(held, "start_ns"),
        dur=_int64(held, "dur_ns"),
        kind=kind,
        name=name,
        labels=[n or "" for n in names] + cause_text,
        kinds=kind_text + cause_text,
        step_kind=kind_text.index(schema.STEP) if schema.STEP in kind_text else -1,
        gap_rank=_int64(held_gaps, "rank"),
        gap_device=_int64(held_gaps, "device"),
        gap_start=_int64(held_gaps, "start_ns"),
        gap_end=_int64(held_gaps, "end_ns"),
        gap_label=cause + len(names),
        gap_kind=cause + len(kinds),
    )


def _event_end(batch: pa.RecordBatch, start: Int64Array) -> tuple[Int64Array, Int64Array]:
    """End of each event, and its rank among a step's events (longest first)."""
    dur = _batch_int64(batch, "dur_ns")
    return start + dur, -dur


def _gap_end(batch: pa.RecordBatch, start: Int64Array) -> tuple[Int64Array, Int64Array]:
    """End of each gap, and its rank among a step's gaps (longest first)."""
    end = _batch_int64(batch, "end_ns")
    return end, start - end


def _held_rows(
    table: pa.Table,
    start_column: str,
    end_and_order: Callable[[pa.RecordBatch, Int64Array], tuple[Int64Array, Int64Array]],
    spans: Sequence[Span],
    limit: int,
) -> tuple[pa.Table, dict[Span, int]]:
    """The rows a step timeline of each span can draw, and how many rows overlap each span.

    A span's timeline draws its rows that overlap it, or when there are more than ``limit``
    of them the first ``limit`` in (order, row) order; a shorter limit draws a subset of
    those. Batch by batch, so memory holds one batch's columns and the chosen rows, never
    whole columns. The result keeps one chunk per batch with the batch's dictionaries, so
    its dictionary codes are those of ``table``.
    """
    spans = list(dict.fromkeys(spans))
    no_rows = np.zeros(0, dtype=np.int64)
    # per span: the candidate rows (index into table, ascending) and their order keys
    rows: list[Int64Array] = [no_rows] * len(spans)
    keys: list[Int64Array] = [no_rows] * len(spans)
    totals = [0] * len(spans)
    offset = 0
    for batch in table.to_batches():
        if spans and batch.num_rows:
            start = _batch_int64(batch, start_column)
            end, order = end_and_order(batch, start)
            for i, (lo, hi) in enumerate(spans):
                inside = np.flatnonzero((start < hi) & (end > lo))
                totals[i] += int(inside.size)
                r = np.concatenate([rows[i], inside + offset])
                k = np.concatenate([keys[i], order[inside]])
                if r.size > limit:
                    first = np.sort(np.lexsort((r, k))[:limit])
                    r, k = r[first], k[first]
                rows[i], keys[i] = r, k
        offset += batch.num_rows
    held = _take_ascending(table, np.unique(np.concatenate([no_rows, *rows])))
    return held, dict(zip(spans, totals, strict=True))


def _take_ascending(table: pa.Table, rows: Int64Array) -> pa.Table:
    """The rows (ascending) of ``table``, one chunk per batch, each with the batch's dictionaries.

    Batch by batch because Arrow's take of a chunked column first joins its chunks.
    """
    batches = table.to_batches()
    firsts = np.cumsum([0] + [b.num_rows for b in batches])
    bounds = np.searchsorted(rows, firsts)
    return pa.Table.from_batches(
        [
            b.take(pa.array(rows[bounds[j] : bounds[j + 1]] - firsts[j]))
            for j, b in enumerate(batches)
        ],
        schema=table.schema,
    )


def _take(table: pa.Table, rows: Int64Array) -> pa.Table:
    """``table.take(rows)`` without joining the chunks of ``table``."""
    order = np.argsort(rows, kind="stable")
    back = np.empty_like(order)
    back[order] = np.arange(order.size)
    return _take_ascending(table, rows[order]).take(pa.array(back))


def _codes(table: pa.Table, held: pa.Table, column: str) -> tuple[Int64Array, list[str | None]]:
    """:func:`dictionary_codes` of ``table`` at the rows ``held`` took from it."""
    if pa.types.is_dictionary(table.schema.field(column).type):
        # held has the chunk dictionaries of table, in order: they unify the same way
        return dictionary_codes(held, column)
    # plain strings are coded in order of first appearance over all rows: only the distinct
    # values are kept, then the held rows are looked up among them
    distinct = pc.unique(table.column(column)).drop_null()
    codes = pc.fill_null(pc.index_in(held.column(column), value_set=distinct), 0)
    return np.asarray(codes.to_numpy(), dtype=np.int64), distinct.to_pylist()


def _timeline_spans(data: ReportData, limits: _Limits) -> list[Span]:
    """The hulls [start_ns, end_ns) of the steps whose timelines the payload embeds."""
    steps = _step_choices(data)
    findings = [_finding(f, steps) for f in data.findings]
    chosen = _timeline_steps(steps, findings, limits.timeline_steps)
    return [(int(steps[k]["start_ns"]), int(steps[k]["end_ns"])) for k in chosen]


def report_payload(
    data: ReportData, limits: _Limits | None = None, prepared: _Prepared | None = None
) -> dict[str, Any]:
    """The JSON document the page reads (selected, sampled and packed results)."""
    limits = limits or _Limits()
    steps = _step_choices(data)
    findings = [_finding(f, steps) for f in data.findings]
    timeline_steps = _timeline_steps(steps, findings, limits.timeline_steps)
    spans = [(int(steps[k]["start_ns"]), int(steps[k]["end_ns"])) for k in timeline_steps]
    if prepared is None or not prepared.covers(spans, limits.timeline_events):
        prepared = _prepare(data, spans, limits.timeline_events)
    timelines = [_step_timeline(prepared, steps[k], limits.timeline_events) for k in timeline_steps]
    # one table of names and kinds shared by the steps; names cut for the tooltip only
    no_codes = np.zeros(0, dtype=np.int64)
    used_labels = np.unique(np.concatenate([no_codes] + [t["name"] for t in timelines]))
    used_kinds = np.unique(np.concatenate([no_codes] + [t["kind"] for t in timelines]))
    for t in timelines:
        t["name"] = np.searchsorted(used_labels, t["name"]).tolist()
        t["kind"] = np.searchsorted(used_kinds, t["kind"]).tolist()
    labels = [_cut(prepared.labels[int(c)], limits.text_chars) for c in used_labels]
    kinds = [prepared.kinds[int(c)] for c in used_kinds]
    # the profile start, as in the timeline: instants in tables are shown from it
    origin = prepared.origin_ns
    tables = (
        ("op_statistic", data.op_statistic),
        ("op_summary", data.op_summary),
        ("api_statistic", data.api_statistic),
        ("kernel_details", data.kernel_details),
        ("transfers", data.transfers),
        ("communication", data.communication),
        ("worst_gaps", data.gap_report.worst if data.gap_report else None),
    )
    return {
        "format_version": REPORT_FORMAT_VERSION,
        "generator": f"perfledger {__version__}",
        "origin_ns": origin,
        "title": data.title,
        "meta": _finite(_jsonable(dict(data.meta))),
        "headline": _headline(data.headline),
        "accounting": _accounting(data.accounts),
        "host_accounting": _host_accounting(data.host_accounts),
        "gap_histogram": _gap_histogram(data.gap_report),
        "findings": findings,
        "steps": [steps[k] for k in timeline_steps],
        "timeline_names": labels,
        "timeline_kinds": kinds,
        "timelines": {str(t["step"]): t for t in timelines},
        "tables": {
            name: _table(table, name, limits, origin)
            for name, table in tables
            if table is not None and table.num_rows
        },
        "counters": _counters(data.counters, prepared, limits.counter_points),
        "cluster": _cluster(data.cluster, limits),
    }


def _headline(h: Headline) -> dict[str, Any]:
    return {
        "step_time_ms": h.step_time_ms,
        "device_utilization_pct": h.device_utilization_pct,
        "throughput": h.throughput,
        "throughput_unit": h.throughput_unit,
        "profiler_overhead_pct": h.profiler_overhead_pct,
        "step_count": h.step_count,
        "ranks": h.ranks,
        "loss": h.loss,
        "device_utilization": [[label, value] for label, value in h.device_utilization],
    }


def _accounting(accounts: Sequence[WindowAccount]) -> list[dict[str, Any]]:
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


def _cluster(report: ClusterReport | None, limits: _Limits) -> dict[str, Any] | None:
    """Rank x step cells of step time, idle and compute (ms), the per-rank table, slow ranks."""
    if report is None:
        return None
    matrix = _matrix(report.matrix, limits)
    if report.steps.num_rows == 0 and matrix is None:
        return None
    table = report.steps
    rank, device, step = (_int64(table, c) for c in ("rank", "device", "step"))
    lanes = _distinct(rank, device)
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
            [x[shown], y[shown], _int64(table, f"{name}_ns")[shown] / 1e6], axis=1
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
        "per_rank": _table(per_rank, "cluster_ranks", limits),
        "matrix": matrix,
    }


def _matrix(matrix: pa.Table, limits: _Limits) -> dict[str, Any] | None:
    """The communication matrix's rows of the first source and destination ranks, packed in
    columns, its heat-map cells and the slowest links (None without rows).

    A cell is a (source, destination) pair: ``[x, y, gbps, row]`` where ``row`` is the pair's
    row carrying the most bytes (its main transport; the tooltip lists every transport of the
    pair). A rank's copies to itself (transport LOCAL) are cells of their own, kept out of the
    colour scale: their bandwidth is that of device memory, some 30 times a link's.
    """
    if matrix.num_rows == 0:
        return None
    slow = slow_links(matrix)
    # Members are numbered within their communication group: one group's pairs per chart,
    # the group that moved the most bytes.
    groups = matrix.group_by("group").aggregate([("transit_bytes", "sum")]).to_pylist()
    groups.sort(key=lambda g: (-g["transit_bytes_sum"], g["group"] or ""))
    group = groups[0]["group"]
    matrix = matrix.filter(
        pc.is_null(matrix["group"]) if group is None else pc.equal(matrix["group"], group)
    )
    src_all = np.unique(_int64(matrix, "src_rank"))
    dst_all = np.unique(_int64(matrix, "dst_rank"))
    src_shown = src_all[:MATRIX_SRC_RANKS]
    dst_shown = dst_all[:MATRIX_DST_RANKS]
    src = _int64(matrix, "src_rank")
    dst = _int64(matrix, "dst_rank")
    rows = np.flatnonzero(np.isin(src, src_shown) & np.isin(dst, dst_shown))
    shown = _take(matrix, rows)
    y = np.searchsorted(src_shown, src[rows])
    x = np.searchsorted(dst_shown, dst[rows])
    transit_bytes = _int64(shown, "transit_bytes")
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

    slow_table = _table(
        pa.Table.from_pylist(slow[:MATRIX_SLOW_LINKS], schema=MATRIX_SCHEMA), "slow_links", limits
    )
    slow_table["total_rows"] = len(slow)  # the table says it holds the slowest of them
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
        "slow_links_total": len(slow),
        "slow_links": slow_table,
    }


def _account_row(a: WindowAccount) -> dict[str, Any]:
    row = {name: getattr(a, attr) / 1e6 for name, attr in _ACCOUNT_SERIES}
    row["wall"] = a.wall_ns / 1e6
    row["overlapped communication"] = a.overlapped_communication_ns / 1e6
    return row


def _host_accounting(accounts: Sequence[HostWindowAccount]) -> list[dict[str, Any]]:
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


def _gap_histogram(report: GapReport | None) -> dict[str, Any] | None:
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


def _step_choices(data: ReportData) -> list[dict[str, Any]]:
    """Every step (hull of its windows over ranks), labelled median / slowest / fastest."""
    hulls: dict[int, list[int]] = {}
    for w in data.windows:
        lo_hi = hulls.setdefault(w.step, [w.start_ns, w.end_ns])
        lo_hi[0] = min(lo_hi[0], w.start_ns)
        lo_hi[1] = max(lo_hi[1], w.end_ns)
    if not hulls and data.events.num_rows:
        start = int(pc.min(data.events.column("start_ns")).as_py())
        # batch by batch: the ends of all events at once would be a whole column
        ends = (
            pc.max(pc.add(b.column("start_ns"), b.column("dur_ns"))).as_py()
            for b in data.events.to_batches()
        )
        hulls[0] = [start, max(e for e in ends if e is not None)]
    steps: list[dict[str, Any]] = [
        {"step": s, "start_ns": lo, "end_ns": hi, "wall_ms": (hi - lo) / 1e6, "labels": []}
        for s, (lo, hi) in sorted(hulls.items())
    ]
    if steps:
        by_wall = sorted(range(len(steps)), key=lambda i: (steps[i]["wall_ms"], steps[i]["step"]))
        # the lower median: a step that exists, never an average of two
        steps[by_wall[(len(by_wall) - 1) // 2]]["labels"].append("median")
        steps[by_wall[-1]]["labels"].append("slowest")
        steps[by_wall[0]]["labels"].append("fastest")
    return steps


def _timeline_steps(
    steps: list[dict[str, Any]], findings: list[dict[str, Any]], limit: int
) -> list[int]:
    """Which steps the report embeds: median first, slowest, fastest, those of findings."""
    chosen: list[int] = []
    for label in ("median", "slowest", "fastest"):
        chosen += [i for i, s in enumerate(steps) if label in s["labels"] and i not in chosen]
    index = {s["step"]: i for i, s in enumerate(steps)}
    for f in findings:
        for target in f["targets"]:
            i = index.get(target["step"])
            if i is not None and i not in chosen:
                chosen.append(i)
    for i in range(len(steps)):  # then the first steps, while the budget lasts
        if i not in chosen:
            chosen.append(i)
    return chosen[:limit]


def _finding(finding: Mapping[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    targets: list[dict[str, Any]] = []
    for span in finding.get("spans") or ():
        try:
            lo, hi = int(span["start_ns"]), int(span["end_ns"])
        except (KeyError, TypeError, ValueError):
            continue
        home = next((s for s in steps if s["start_ns"] <= lo < s["end_ns"]), None)
        if home is None:
            home = next((s for s in steps if lo < s["end_ns"] and hi > s["start_ns"]), None)
        if home is not None and all(t["step"] != home["step"] for t in targets):
            # one link per step: the first (most severe) span of the finding in it
            targets.append(
                {
                    "step": home["step"],
                    "start_us": (lo - home["start_ns"]) / 1e3,
                    "end_us": (hi - home["start_ns"]) / 1e3,
                }
            )
    return {
        "id": str(finding.get("id", "")),
        "title": str(finding.get("title", "")),
        "severity_ms": _number(finding.get("severity_ms")),
        "severity_pct": _number(finding.get("severity_pct")),
        "evidence": _finite(_jsonable(finding.get("evidence"))),
        "suggestion": _finite(_jsonable(finding.get("suggestion"))),
        "verify": _finite(_jsonable(finding.get("verify"))),
        "targets": targets,
    }


def _step_timeline(p: _Prepared, step: dict[str, Any], limit: int) -> dict[str, Any]:
    """Host threads above the device streams, one step; gaps on a row of their device."""
    lo, hi = int(step["start_ns"]), int(step["end_ns"])
    rows_in = np.flatnonzero((p.start < hi) & (p.start + p.dur > lo))
    total = p.events_total[(lo, hi)]
    if rows_in.size > limit:
        # the longest events: the short ones are below a pixel at step scale anyway
        keep = np.argsort(-p.dur[rows_in], kind="stable")[:limit]
        rows_in = np.sort(rows_in[keep])
    rank = p.rank[rows_in]
    device = p.device[rows_in]
    stream = p.stream[rows_in]
    pid = p.pid[rows_in]
    start = p.start[rows_in]
    dur = p.dur[rows_in]
    g_rows = np.flatnonzero((p.gap_start < hi) & (p.gap_end > lo))
    if g_rows.size > limit:  # many ranks: the longest gaps, as for the events
        keep = np.argsort(p.gap_start[g_rows] - p.gap_end[g_rows], kind="stable")[:limit]
        g_rows = np.sort(g_rows[keep])
    g_rank = p.gap_rank[g_rows]
    g_device = p.gap_device[g_rows]

    # rows: host threads first (the one holding the step marks first), then per device a row
    # of idle gaps above its streams
    host = device < 0
    is_step = p.kind[rows_in] == p.step_kind
    row_keys: dict[tuple[int, ...], str] = {}
    threads = _distinct(rank[host], pid[host], stream[host])
    several_pids = len({(r, q) for r, q, _t in threads}) > len({r for r, _q, _t in threads})
    for r, q, t in threads:
        main = 0 if is_step[host & (rank == r) & (pid == q) & (stream == t)].any() else 1
        where = f"rank {r} pid {q}" if several_pids else f"rank {r}"
        row_keys[(r, 0, main, q, t)] = f"{where} {'thread' if main else 'main thread'} {t}"
    devices = sorted(set(_distinct(rank[~host], device[~host])) | set(_distinct(g_rank, g_device)))
    for r, d in devices:
        row_keys[(r, 1, d, -1, -1)] = f"rank {r} device {d} idle"
        for (t,) in _distinct(stream[~host & (rank == r) & (device == d)]):
            row_keys[(r, 1, d, 0, t)] = f"rank {r} device {d} stream {t}"
    ordered = sorted(row_keys)
    row = np.zeros(rows_in.size, dtype=np.int64)
    g_row = np.zeros(g_rows.size, dtype=np.int64)
    band_end = np.zeros(g_rows.size, dtype=np.int64)
    for i, (r, cat, a, b, c) in enumerate(ordered):
        if cat == 0:
            row[host & (rank == r) & (pid == b) & (stream == c)] = i
        elif b == -1:
            g_row[(g_rank == r) & (g_device == a)] = i
        else:
            row[~host & (rank == r) & (device == a) & (stream == c)] = i
            # a gap's band spans its device's rows, down to the last stream
            band_end[(g_rank == r) & (g_device == a)] = i
    depth = _nesting_depth(row, start, start + dur)
    g_start = p.gap_start[g_rows]
    return {
        "step": step["step"],
        "start_ns": lo,
        "wall_us": (hi - lo) / 1e3,
        "rows": [row_keys[k] for k in ordered],
        "row_is_gap": [k[1] == 1 and k[3] == -1 for k in ordered],
        "row_is_device": [k[1] == 1 for k in ordered],
        "row": np.concatenate([row, g_row]).tolist(),
        "start_us": np.round((np.concatenate([start, g_start]) - lo) / 1e3, 3).tolist(),
        "dur_us": np.round(np.concatenate([dur, p.gap_end[g_rows] - g_start]) / 1e3, 3).tolist(),
        "depth": np.concatenate([depth, np.zeros(g_rows.size, np.int64)]).tolist(),
        # codes into the profile's names and kinds, renumbered once all steps are chosen
        "name": np.concatenate([p.name[rows_in], p.gap_label[g_rows]]),
        "kind": np.concatenate([p.kind[rows_in], p.gap_kind[g_rows]]),
        "gap_band_end": band_end.tolist(),
        "events_total": total,
        "events_shown": int(rows_in.size),
    }


def _nesting_depth(group: Int64Array, start: Int64Array, end: Int64Array) -> Int64Array:
    """Nesting depth of each interval inside its group (0: outermost), for drawing only."""
    depth = np.zeros(start.size, dtype=np.int64)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        order = rows[np.lexsort((-(end[rows] - start[rows]), start[rows]))]
        s = start[order]
        closed = np.searchsorted(np.sort(end[order]), s, side="right")
        depth[order] = np.arange(order.size) - closed
    return np.clip(depth, 0, 7)


def _table(
    table: pa.Table, name: str, limits: _Limits, origin_ns: int | None = None
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
            table = _take(table, np.asarray(top.to_numpy(), dtype=np.int64))
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


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _cut_column(col: pa.ChunkedArray, chars: int) -> pa.ChunkedArray:
    """Strings longer than ``chars`` end with an ellipsis (the CSV keeps them whole)."""
    long = pc.fill_null(pc.greater(pc.utf8_length(col), chars), False)
    cut = pc.binary_join_element_wise(pc.utf8_slice_codeunits(col, 0, chars - 1), "…", "")
    return pc.if_else(long, cut, col)


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


def _counters(counters: pa.Table | None, p: _Prepared, points: int) -> list[dict[str, Any]]:
    """Each counter series, evenly sampled to at most ``points`` points, time in s.

    Series by series: the counters of many ranks are never read into whole columns.
    """
    if counters is None or counters.num_rows == 0:
        return []
    origin = p.origin_ns
    if origin is None:
        origin = int(pc.min(counters.column("ts_ns")).as_py())
    keys = counters.select(["rank", "track", "name"]).group_by(["rank", "track", "name"])
    series = sorted(
        (int(r), t, n) for r, t, n in zip(*keys.aggregate([]).to_pydict().values(), strict=True)
    )
    out = []
    for r, t, n in series[:COUNTER_SERIES]:
        mine = counters.filter(
            (pc.field("rank") == r) & (pc.field("track") == t) & (pc.field("name") == n)
        )
        ts = _int64(mine, "ts_ns")
        value = np.asarray(mine.column("value").to_numpy(), dtype=np.float64)
        rows = np.flatnonzero(np.isfinite(value))
        rows = rows[np.argsort(ts[rows], kind="stable")]
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
            }
        )
    return out


def _distinct(*columns: Int64Array) -> list[tuple[int, ...]]:
    """Distinct rows of integer columns, sorted."""
    if columns[0].size == 0:
        return []
    order = np.lexsort(columns[::-1])
    stacked = np.stack([np.asarray(c)[order] for c in columns], axis=1)
    first = np.ones(order.size, dtype=bool)
    first[1:] = (stacked[1:] != stacked[:-1]).any(axis=1)
    return [tuple(int(v) for v in row) for row in stacked[first]]


# --------------------------------------------------------------------------------------------
# Helpers.


def _int64(table: pa.Table, column: str) -> Int64Array:
    return np.asarray(table.column(column).to_numpy(), dtype=np.int64)


def _batch_int64(batch: pa.RecordBatch, column: str) -> Int64Array:
    return np.asarray(batch.column(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _jsonable(value: Any) -> Any:
    """Any value as plain JSON types (unknown objects become their text)."""
    return json.loads(json.dumps(value, default=str, allow_nan=True))


def _finite(value: Any) -> Any:
    """NaN and infinities become null (JSON.parse rejects them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@cache
def inline_asset(name: str) -> str:
    text = resources.files(_TEMPLATE_PACKAGE).joinpath("assets").joinpath(name).read_text("utf-8")
    if name.endswith(".js") and "</script" in text.lower():
        raise PerfledgerError(f"asset {name} cannot be inlined: it contains </script")
    return text


@cache
def _template_text(name: str) -> str:
    return (
        resources.files(_TEMPLATE_PACKAGE).joinpath("templates").joinpath(name).read_text("utf-8")
    )


@cache
def template_environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: _template_text(name)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
