"""summary.json: every headline figure of a profile in one stable, versioned document.

Keys, in this order (DESIGN.md's fixed keys first; add keys, never rename):
    format_version, tool_version, source {kind, files}, ranks, step_count,
    step_time_ms            -- median wall time of the step windows (null with no steps),
    device_utilization_pct  -- share of the accounted windows a device task ran in (null on
                               host-only profiles),
    device_compute_pct      -- share of the accounted windows a kernel ran in (null likewise),
    profiler_overhead_pct   -- how much slower the profiled steps ran than the unprofiled steps
                               around them (perfledger record), in %; may be negative; null
                               when unknown,
    profiler_overhead_noise_pct -- the half-width of its ~95 % interval from the steps' own
                               variation (an overhead within it is noise); null when unknown,
    unprofiled_step_ms      -- median wall time of the unprofiled steps around the profiled
                               ones (the program's step time without the profiler); null when
                               unknown,
    unread_input            -- what of the input could not be read (null when nothing),
    loss                    -- the same as unread_input, under its format-1 name (dropped in
                               format 3),
    quality                 -- {confidence: high|medium|low, checks: [{id, count, message,
                               affects, repaired}]}: what was repaired or is doubtful,
    findings                -- as given by the advisor (id, title, severity_ms, ..., whatif_ms),
    devices   -- per rank and device, the whole-span account (step -1 rows): span_ms,
                 busy_ms, utilization_pct (busy / span), each category in ms, idle by cause,
    host      -- per rank of a host-only run, the span account of the main thread,
    top_operators -- the first rows of op_statistic: name, kind, count, total_ms, avg_us,
                 max_us, ratio_pct,
    transfers -- per copy direction: count, bytes, time_ms, gbps, pageable, small and
                 unknown-size counts,
    gap_histogram -- count, total_ms and per duration bucket count, total_ms and by cause,
    critical_path -- the steps' replay (docs/whatif.md): replay_error_pct {median, worst},
                 bound_by_ms (the critical path's time per step by class, mean over the steps,
                 largest first; they sum to the step), bound_by_parts_ms (the parts of a
                 class, {"communication": {"wait": ms waiting for peers, "transfer": the
                 rest}}, adding up to its bound_by_ms), top_tasks (name, class, ms on the paths),
                 and per step rank, step, measured_ms, replayed_ms; null when nothing was
                 replayed,
    whatif_combined -- the advisor's top fixes (at most 3, by whatif_ms) replayed together:
                 {findings: [ids], gain_ms, baseline_ms, predicted_ms} per step (the gain of
                 the fixes together, not the sum of theirs); null when no fix gains.
Times are ms rounded to µs (3 decimals), percentages to 2 decimals; NaN is written as null.
The file is written under a temporary name and renamed.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from perfledger.files import json_text, write_json
from perfledger.model import schema
from perfledger.model.accounts import IDLE_CAUSES, HostWindowAccount, WindowAccount
from perfledger.model.gaps import GapReport
from perfledger.model.quality import QualityCheck, quality_document
from perfledger.model.schema import SPAN_STEP
from perfledger.model.whatif import ReplayReport, parts_ms
from perfledger.version import __version__

MS_DECIMALS: Final = 3
PCT_DECIMALS: Final = 2
TOP_OPERATORS: Final = 10
FINDING_KEYS: Final = (
    "id",
    "title",
    "severity_ms",
    "severity_pct",
    "evidence",
    "suggestion",
    "verify",
)


def summary_document(
    *,
    source_kind: str,
    source_files: Sequence[str | os.PathLike[str]],
    ranks: Sequence[int],
    step_count: int,
    step_time_ms: float | None = None,
    device_utilization_pct: float | None = None,
    device_compute_pct: float | None = None,
    windows: Sequence[WindowAccount] = (),
    host_windows: Sequence[HostWindowAccount] = (),
    op_statistic: pa.Table | None = None,
    transfers: pa.Table | None = None,
    gaps: GapReport | None = None,
    findings: Sequence[Any] = (),
    skipped_rules: Sequence[tuple[str, str]] = (),
    loss: str | None = None,
    quality: Sequence[QualityCheck] = (),
    profiler_overhead_pct: float | None = None,
    profiler_overhead_noise_pct: float | None = None,
    unprofiled_step_ms: float | None = None,
    top_operators: int = TOP_OPERATORS,
    replay: ReplayReport | None = None,
    whatif_combined: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary.json document of one profile, keys in their fixed order.

    Args:
        source_kind: importer kind, e.g. ``"kineto"``.
        source_files: the files the traces were read from.
        ranks: the ranks of the profile.
        step_count: annotated steps in the trace (0: no step annotation, so the single
            window is not a step and step_time_ms is null).
        step_time_ms: :func:`perfledger.analysis.figures.step_time_ms`.
        device_utilization_pct: :func:`perfledger.analysis.figures.utilization_pct`.
        device_compute_pct: :func:`perfledger.analysis.figures.compute_pct`.
        windows: device accounts of every rank (step rows and span rows).
        host_windows: host-only accounts of every rank.
        op_statistic: ``analysis.ops.op_statistic`` result (sorted by total).
        transfers: ``analysis.transfers.transfers`` result.
        gaps: ``analysis.gaps.gap_report`` result.
        findings: the advisor's findings (mappings or dataclasses), already sorted.
        skipped_rules: (rule id, reason) of advisor rules whose input data is absent.
        loss: what could not be read, or None.
        quality: the profile's quality checks (:mod:`perfledger.analysis.quality`).
        profiler_overhead_pct: measured profiler overhead, or None when unknown.
        profiler_overhead_noise_pct: its noise (half-width, %), or None when unknown.
        unprofiled_step_ms: the median unprofiled step compared with, or None when unknown.
        top_operators: how many op_statistic rows to keep.
        replay: the steps replayed (:func:`perfledger.analysis.critical_path.replay_profile`).
        whatif_combined: the advisor's top fixes replayed together
            (:meth:`perfledger.model.findings.CombinedFix.to_dict`), or None.
    """
    return {
        "format_version": schema.FORMAT_VERSION,
        "tool_version": __version__,
        "source": {"kind": source_kind, "files": [os.fspath(f) for f in source_files]},
        "ranks": sorted(int(r) for r in ranks),
        "step_count": int(step_count),
        "step_time_ms": _round(step_time_ms, MS_DECIMALS),
        "device_utilization_pct": _round(device_utilization_pct, PCT_DECIMALS),
        "device_compute_pct": _round(device_compute_pct, PCT_DECIMALS),
        "profiler_overhead_pct": _round(profiler_overhead_pct, PCT_DECIMALS),
        "profiler_overhead_noise_pct": _round(profiler_overhead_noise_pct, PCT_DECIMALS),
        "unprofiled_step_ms": _round(unprofiled_step_ms, MS_DECIMALS),
        "unread_input": loss,
        "loss": loss,
        "quality": quality_document(quality),
        "findings": [_finding(f) for f in findings],
        "advisor_skipped": [{"rule": rule, "reason": reason} for rule, reason in skipped_rules],
        "devices": [_device_headline(w) for w in _span_rows(windows)],
        "host": [_host_headline(w) for w in _span_rows(host_windows)],
        "top_operators": _top_operators(op_statistic, top_operators),
        "transfers": _transfers(transfers),
        "gap_histogram": _gap_histogram(gaps),
        "critical_path": _critical_path(replay),
        "whatif_combined": dict(whatif_combined) if whatif_combined is not None else None,
    }


def summary_json(document: Mapping[str, Any]) -> str:
    """The exact text :func:`write_summary` writes: indented JSON, key order kept, "\\n" end."""
    return json_text(document)


def write_summary(document: Mapping[str, Any], path: Path) -> None:
    """Write summary.json atomically (temporary name, then rename)."""
    write_json(path, document)


def _ms(ns: float) -> float:
    return round(ns / 1e6, MS_DECIMALS)


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, PCT_DECIMALS) if whole > 0 else None


def _round(value: float | None, decimals: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), decimals)


def _span_rows(accounts: Sequence[Any]) -> list[Any]:
    spans = [a for a in accounts if a.step == SPAN_STEP]
    return sorted(spans, key=lambda a: (a.rank, getattr(a, "device", -1)))


def _device_headline(w: WindowAccount) -> dict[str, Any]:
    return {
        "rank": w.rank,
        "device": w.device,
        "span_ms": _ms(w.wall_ns),
        "busy_ms": _ms(w.busy_ns),
        "utilization_pct": _pct(w.busy_ns, w.wall_ns),
        "compute_ms": _ms(w.compute_ns),
        "communication_ms": _ms(w.communication_ns),
        "communication_wait_ms": _ms(w.communication_wait_ns),
        "communication_transfer_ms": _ms(w.communication_transfer_ns),
        "overlapped_communication_ms": _ms(w.overlapped_communication_ns),
        "memcpy_ms": _ms(w.memcpy_ns),
        "memset_ms": _ms(w.memset_ns),
        "idle_ms": _ms(w.idle_ns),
        "idle_pct": _pct(w.idle_ns, w.wall_ns),
        "idle_by_cause_ms": {cause: _ms(getattr(w, f"idle_{cause}_ns")) for cause in IDLE_CAUSES},
    }


def _host_headline(w: HostWindowAccount) -> dict[str, Any]:
    return {
        "rank": w.rank,
        "span_ms": _ms(w.wall_ns),
        "dataloader_ms": _ms(w.dataloader_ns),
        "forward_ms": _ms(w.forward_ns),
        "backward_ms": _ms(w.backward_ns),
        "optimizer_ms": _ms(w.optimizer_ns),
        "operator_ms": _ms(w.operator_ns),
        "overhead_ms": _ms(w.overhead_ns),
        "overhead_pct": _pct(w.overhead_ns, w.wall_ns),
    }


def _top_operators(table: pa.Table | None, limit: int) -> list[dict[str, Any]]:
    if table is None:
        return []
    return [
        {
            "name": row["name"],
            "kind": row["kind"],
            "count": row["count"],
            "total_ms": _ms(row["total_ns"]),
            "avg_us": _round(row["avg_ns"] / 1e3, MS_DECIMALS),
            "max_us": _round(row["max_ns"] / 1e3, MS_DECIMALS),
            "ratio_pct": _round(100.0 * row["ratio"], PCT_DECIMALS),
        }
        for row in table.slice(0, limit).to_pylist()
    ]


def _transfers(table: pa.Table | None) -> list[dict[str, Any]]:
    if table is None:
        return []
    return [
        {
            "direction": row["direction"],
            "count": row["count"],
            "bytes": row["bytes"],
            "time_ms": _ms(row["time_ns"]),
            "gbps": _round(row["gbps"], MS_DECIMALS),
            "pageable_count": row["pageable_count"],
            "small_count": row["small_count"],
            "unknown_bytes_count": row["unknown_bytes_count"],
        }
        for row in table.to_pylist()
    ]


def _gap_histogram(report: GapReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {
        "count": report.count,
        "total_ms": _ms(report.total_ns),
        "buckets": [
            {
                "label": bucket.label,
                "lower_ns": bucket.lower_ns,
                "upper_ns": bucket.upper_ns,
                "count": bucket.count,
                "total_ms": _ms(bucket.total_ns),
                "by_cause": {
                    share.cause: {"count": share.count, "total_ms": _ms(share.total_ns)}
                    for share in bucket.by_cause
                },
            }
            for bucket in report.buckets
        ],
    }


def _critical_path(report: ReplayReport | None) -> dict[str, Any] | None:
    if report is None or not report.steps:
        return None
    return {
        "replay_error_pct": {
            "median": _round(report.median_error_pct, PCT_DECIMALS),
            "worst": _round(report.worst_error_pct, PCT_DECIMALS),
        },
        "bound_by_ms": {k: _ms(v) for k, v in report.mean_bound_by_ns().items()},
        "bound_by_parts_ms": parts_ms(report.mean_bound_by_parts_ns()),
        "top_tasks": [
            {"name": name, "class": klass, "ms": _ms(ns)}
            for name, klass, ns in report.top_path_tasks
        ],
        "steps": [
            {
                "rank": s.rank,
                "step": s.step,
                "measured_ms": _ms(s.measured_ns),
                "replayed_ms": _ms(s.baseline_ns),
            }
            for s in report.steps
        ],
    }


def _finding(finding: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(finding) and not isinstance(finding, type):
        fields = dataclasses.asdict(finding)
    elif isinstance(finding, Mapping):
        fields = dict(finding)
    else:
        raise TypeError(f"a finding must be a mapping or a dataclass, not {type(finding)}")
    ordered: dict[str, Any] = {key: fields.pop(key) for key in FINDING_KEYS if key in fields}
    ordered.update(fields)
    return {key: _jsonable(value) for key, value in ordered.items()}


def _jsonable(value: Any) -> Any:
    """Plain JSON values: tuples as lists, NaN as null, floats rounded to 6 decimals."""
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return os.fspath(value)
    return value
