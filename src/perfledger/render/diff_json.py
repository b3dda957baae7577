"""diff.json: the layout of a run comparison, the document the terminal and diff.html show.

DESIGN.md's fixed keys come first (base, current, step_time_ms, categories, failed), then the
rest. Times in ms (3 decimals; op rows 4), shares in %, changes of shares in percentage points
(``change_pp``). The figures are :func:`perfledger.analysis.diff.diff_runs`'s; this module only
rounds and names them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from perfledger.analysis.diff import (
    BatchSize,
    Change,
    Distribution,
    GateCheck,
    OpRow,
    PerSampleDiff,
    RunDiff,
    RunInfo,
    Workload,
    WorkloadComparison,
    batch_note,
    finding_severity,
    quality_warning,
    workload_warning,
)
from perfledger.files import own_document, write_json
from perfledger.version import __version__

DIFF_FORMAT_VERSION: Final = 1


def is_diff_document(data: bytes) -> bool:
    """Whether ``data`` is a diff.json perfledger wrote: a JSON object with an integer
    ``format_version``, a ``tool_version``, a ``verdict`` and both runs."""
    document = own_document(data)
    return (
        document is not None
        and "verdict" in document
        and isinstance(document.get("base"), dict)
        and isinstance(document.get("current"), dict)
    )


def write_diff_json(path: Path, document: Mapping[str, Any]) -> None:
    """Write diff.json atomically and deterministically."""
    write_json(path, document)


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
        "severity_ms": _r(finding_severity(finding, "severity_ms")),
        "severity_pct": _r(finding_severity(finding, "severity_pct"), 2),
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
        "quality_confidence": info.confidence,
    }


def _side_json(workload: Workload, batch: BatchSize | None) -> dict[str, Any]:
    return {
        "program": workload.program,
        "vendor": workload.vendor,
        "device": workload.device,
        "op_types": len(workload.operators),
        "batch_size": None if batch is None else batch.samples,
        "batch_size_source": _batch_source(batch),
    }


def _batch_source(batch: BatchSize | None) -> str | None:
    """Where a batch size comes from: the operator and the steps that agree, or the option."""
    if batch is None:
        return None
    if batch.of_steps == 0:
        return batch.operator  # given, e.g. "--batch-size"
    return f"{batch.operator} ({batch.steps} of {batch.of_steps} steps)"


def _workload_json(comparison: WorkloadComparison | None, per_sample: bool) -> dict[str, Any]:
    if comparison is None:
        return {}
    return {
        "same": comparison.same,
        "differences": list(comparison.differences),
        "op_types_in_common_pct": None
        if comparison.operator_overlap is None
        else _r(100.0 * comparison.operator_overlap, 1),
        "kernels_in_common_pct": None
        if comparison.kernel_overlap is None
        else _r(100.0 * comparison.kernel_overlap, 1),
        "batch_sizes_differ": comparison.batches_differ,
        "batch_note": batch_note(comparison, per_sample),
        "base": _side_json(comparison.base, comparison.base_batch),
        "current": _side_json(comparison.current, comparison.current_batch),
    }


def _per_sample_json(change: PerSampleDiff | None) -> dict[str, Any] | None:
    if change is None:
        return None
    return {
        "base_batch_size": change.base_samples,
        "current_batch_size": change.current_samples,
        "time_ms": _change(change.time_ms, "ms", 5),
        "throughput_samples_per_s": _change(change.throughput, "per_s", 2),
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
    """diff.json of a comparison and its evaluated thresholds (``failed``: those crossed)."""
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
        "quality_warning": quality_warning(diff.base, diff.current),
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
        "workload_warning": None if diff.workload is None else workload_warning(diff.workload),
        "workload": _workload_json(diff.workload, diff.per_sample is not None),
        "per_sample": _per_sample_json(diff.per_sample),
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
