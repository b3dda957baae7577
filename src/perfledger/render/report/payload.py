"""The JSON document the report page reads: the analyses' results selected, sampled and packed
in columns within the payload budgets."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from perfledger.render.report.budgets import COUNTER_STEP_MARKS, PayloadLimits
from perfledger.render.report.cluster import cluster_section
from perfledger.render.report.critical import critical_path_section, step_paths
from perfledger.render.report.data import ReportData
from perfledger.render.report.rows import PreparedRows, prepare_rows
from perfledger.render.report.steps import (
    HOST_PHASES,
    report_finding,
    step_choices,
    step_marks,
    step_timeline,
    timeline_steps,
)
from perfledger.render.report.tables import (
    counter_series,
    cut,
    device_accounting,
    gap_histogram,
    headline_figures,
    host_accounting,
    op_statistic_tasks,
    payload_table,
)
from perfledger.render.report.values import finite, jsonable
from perfledger.version import __version__

REPORT_FORMAT_VERSION: Final = 1


def report_payload(
    data: ReportData, limits: PayloadLimits | None = None, prepared: PreparedRows | None = None
) -> dict[str, Any]:
    """The JSON document the page reads (selected, sampled and packed results).

    ``prepared`` holds the rows read for a larger payload; it is used when it covers the
    timelines of this one (see :meth:`PreparedRows.covers`), else the rows are read again.
    """
    limits = limits or PayloadLimits()
    steps = step_choices(data)
    findings = [report_finding(f, steps) for f in data.findings]
    embedded = timeline_steps(steps, findings, limits.timeline_steps)
    spans = [(int(steps[k]["start_ns"]), int(steps[k]["end_ns"])) for k in embedded]
    if prepared is None or not prepared.covers(spans, limits.timeline_events):
        prepared = prepare_rows(data, spans, limits.timeline_events)
    paths = step_paths(data.replay)
    timelines = [
        step_timeline(
            prepared,
            steps[k],
            limits.timeline_events,
            paths.get(steps[k]["step"], ()),
            limits.text_chars,
        )
        for k in embedded
    ]
    # one table of names and kinds shared by the steps; names cut for the tooltip only
    no_codes = np.zeros(0, dtype=np.int64)
    used_labels = np.unique(np.concatenate([no_codes] + [t["name"] for t in timelines]))
    used_kinds = np.unique(np.concatenate([no_codes] + [t["kind"] for t in timelines]))
    for t in timelines:
        t["name"] = np.searchsorted(used_labels, t["name"]).tolist()
        t["kind"] = np.searchsorted(used_kinds, t["kind"]).tolist()
    labels = [cut(prepared.labels[int(c)], limits.text_chars) for c in used_labels]
    kinds = [prepared.kinds[int(c)] for c in used_kinds]
    # the profile start, as in the timeline: instants in tables are shown from it
    origin = prepared.origin_ns
    op_statistic = data.op_statistic
    if op_statistic is not None and op_statistic.num_rows:
        op_statistic = op_statistic_tasks(op_statistic, data.op_summary, limits.text_chars)
    tables = (
        ("op_statistic", op_statistic),
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
        "meta": finite(jsonable(dict(data.meta))),
        "headline": headline_figures(data.headline),
        "quality": jsonable(dict(data.quality)),
        "accounting": device_accounting(data.accounts),
        "host_accounting": host_accounting(data.host_accounts),
        "gap_histogram": gap_histogram(data.gap_report),
        "findings": findings,
        "steps": [steps[k] for k in embedded],
        "timeline_names": labels,
        "timeline_kinds": kinds,
        "timeline_phases": list(HOST_PHASES),
        "timelines": {str(t["step"]): t for t in timelines},
        "tables": {
            name: payload_table(table, name, limits, origin)
            for name, table in tables
            if table is not None and table.num_rows
        },
        "counters": counter_series(data.counters, prepared, limits.counter_points),
        "step_marks": step_marks(steps, origin, COUNTER_STEP_MARKS),
        "critical_path": critical_path_section(data.replay, data.critical_path, limits.text_chars),
        "whatif_combined": finite(jsonable(dict(data.whatif_combined))) or None,
        "cluster": cluster_section(data.cluster, limits),
    }
