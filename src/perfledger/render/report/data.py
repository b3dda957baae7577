"""What the report shows: the analyses' results and the headline figures, gathered in one
frozen value (no figure is derived here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from perfledger.model import schema
from perfledger.model.accounts import HostWindowAccount, StepWindow, WindowAccount
from perfledger.model.gaps import GapReport
from perfledger.render.report.values import number

if TYPE_CHECKING:
    from perfledger.model.cluster import ClusterReport
    from perfledger.model.profile import ProfileAnalysis
    from perfledger.model.whatif import ReplayReport


@dataclass(frozen=True)
class Headline:
    """The figures at the top of the report (from summary.json; None when unknown)."""

    step_time_ms: float | None = None
    device_utilization_pct: float | None = None
    device_compute_pct: float | None = None
    throughput: float | None = None
    throughput_unit: str | None = None
    profiler_overhead_pct: float | None = None
    step_count: int | None = None
    ranks: int | None = None
    loss: str | None = None
    # utilisation of each device over its span, labelled "rank r device d"
    device_utilization: tuple[tuple[str, float], ...] = ()
    # the median step outside the profiled window (a recording), and the overhead's noise
    unprofiled_step_ms: float | None = None
    profiler_overhead_noise_pct: float | None = None


def headline_from_summary(summary: Mapping[str, Any]) -> Headline:
    """Read the headline figures of a summary.json document (no figure is derived here).

    Keys read: ``step_time_ms``, ``device_utilization_pct``, ``devices`` (each with ``rank``,
    ``device`` and ``utilization_pct``), ``throughput`` (a number, or ``{"value", "unit"}``),
    ``throughput_unit``, ``profiler_overhead_pct``, ``step_count``, ``ranks`` (a count or a
    list of rank ids), ``unread_input`` (what of the input could not be read; ``loss`` in
    summaries before format 2), ``unprofiled_step_ms`` and ``profiler_overhead_noise_pct``.
    """
    per_device = tuple(
        (f"rank {d.get('rank', 0)} device {d.get('device', 0)}", value)
        for d in summary.get("devices") or ()
        if isinstance(d, Mapping) and (value := number(d.get("utilization_pct"))) is not None
    )
    utilization = number(summary.get("device_utilization_pct"))
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
        step_time_ms=number(summary.get("step_time_ms")),
        device_utilization_pct=utilization,
        device_compute_pct=number(summary.get("device_compute_pct")),
        throughput=number(throughput),
        throughput_unit=str(unit) if unit is not None else None,
        profiler_overhead_pct=number(summary.get("profiler_overhead_pct")),
        step_count=int(summary["step_count"]) if summary.get("step_count") is not None else None,
        ranks=int(ranks) if isinstance(ranks, (int, float)) else None,
        loss=str(unread)
        if (unread := summary.get("unread_input") or summary.get("loss"))
        else None,
        device_utilization=per_device,
        unprofiled_step_ms=number(summary.get("unprofiled_step_ms")),
        profiler_overhead_noise_pct=number(summary.get("profiler_overhead_noise_pct")),
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
        quality: summary.json's quality report (confidence and checks), shown as a banner
            when the confidence is not high.
        critical_path: summary.json's ``critical_path`` (replay error, ``bound_by_ms``, top
            tasks, the steps replayed), the report's critical-path section.
        whatif_combined: summary.json's ``whatif_combined``: the replayed gain of the top
            fixes applied together, said in the verdict line when present.
        replay: every step replayed unchanged with its critical path (``bound_by`` per step
            and the path's spans on the measured trace): the critical-path chart and the
            timeline's critical-path row.
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
    quality: Mapping[str, Any] = field(default_factory=dict)
    critical_path: Mapping[str, Any] = field(default_factory=dict)
    whatif_combined: Mapping[str, Any] = field(default_factory=dict)
    replay: ReplayReport | None = None


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
        quality=summary.get("quality") or {},
        critical_path=_mapping(summary.get("critical_path")),
        whatif_combined=_mapping(summary.get("whatif_combined")),
        replay=analysis.replay,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
