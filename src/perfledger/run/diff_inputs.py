"""The runs ``perfledger diff`` compares: a profile directory's tables, or traces in memory.

Either way the comparison gets the same tables (:class:`perfledger.analysis.diff.RunTables`):
a profile directory's files hold what an in-memory analysis returns. The run's workload
(program, device, op types) and batch size are read here too, from meta.json (or the traces'
metadata) and the shapes of op_summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from perfledger.analysis import figures
from perfledger.analysis.diff import RunTables, Workload
from perfledger.analysis.diff.workload import (
    batch_size,
    device_of,
    kernel_names,
    op_types,
    operator_digests,
    vendor_of,
)
from perfledger.errors import PerfledgerError
from perfledger.ledger import profile_workload
from perfledger.model.accounts import GAPS_SCHEMA
from perfledger.model.quality import confidence
from perfledger.model.tables import (
    COMMUNICATION_SCHEMA,
    HOST_OP_SUMMARY_SCHEMA,
    OP_SUMMARY_SCHEMA,
    TRANSFERS_SCHEMA,
)
from perfledger.profiledir import is_profile, load_profile
from perfledger.profiledir.layout import (
    COMMUNICATION_CSV,
    GAPS_TABLE,
    OP_SUMMARY_CSV,
    STEP_TRACE_CSV,
    TRANSFERS_CSV,
)

if TYPE_CHECKING:
    from perfledger.model.profile import ProfileAnalysis

_OP_SUMMARY_COLUMNS: Final = ("step", "kind", "name", "host_op", "dur_ns", "self_ns")
# read for the batch size only, then dropped
_SHAPE_COLUMNS: Final = ("start_ns", "shapes")


def load_run(path: Path) -> RunTables:
    """The tables of a profile directory, or of traces analysed in memory."""
    if not path.exists():
        raise PerfledgerError(f"{path}: no such profile directory or trace")
    if is_profile(path):
        return read_profile_run(path)
    return analyze_run(path)


def analyze_run(path: Path) -> RunTables:
    """Import and analyse traces in memory (nothing is written)."""
    from perfledger.analysis.advisor import advise
    from perfledger.analysis.profile import analyze_traces
    from perfledger.sources import load_traces

    traces = load_traces([path])
    if not traces:
        raise PerfledgerError(f"{path}: no trace found")
    analysis = analyze_traces(traces)
    findings = [f.to_dict() for f in advise(analysis)]
    meta = {"ranks": {str(t.rank): t.meta for t in traces}}
    return run_tables(analysis, label=path.name, path=str(path), findings=findings, meta=meta)


def run_tables(
    analysis: ProfileAnalysis,
    *,
    label: str,
    path: str,
    findings: Sequence[Mapping[str, Any]] = (),
    meta: Mapping[str, Any] | None = None,
) -> RunTables:
    """The compared tables of an in-memory analysis (the same tables a profile's files hold);
    ``meta`` as meta.json has it (the traces' metadata under ``ranks``) names the devices."""
    from perfledger.analysis.profile import step_trace

    steps = step_trace(analysis)
    host_only = figures.is_host_only(steps)
    workload = Workload(
        vendor=vendor_of(meta or {}, host_only=host_only),
        device=device_of(meta or {}, host_only=host_only),
        operators=operator_digests(op_types(analysis.op_summary)),
        kernels=operator_digests(kernel_names(analysis.op_summary)),
    )
    return RunTables(
        label=label,
        path=path,
        source_kind=analysis.source_kind,
        step_count=analysis.step_count,
        step_trace=steps,
        gaps=analysis.gaps,
        op_summary=analysis.op_summary,
        transfers=analysis.transfers,
        communication=analysis.communication,
        findings=tuple(_plain_finding(f) for f in findings),
        confidence=confidence(analysis.quality),
        workload=workload,
        batch=batch_size(analysis.op_summary),
    )


def _plain_finding(finding: Any) -> Mapping[str, Any]:
    """A finding as summary.json has it: a mapping, or the fields diff reads of an object."""
    if isinstance(finding, Mapping):
        return finding
    return {
        key: getattr(finding, key, None) for key in ("id", "title", "severity_ms", "severity_pct")
    }


def read_profile_run(path: Path) -> RunTables:
    """The compared tables of a profile directory (its CSVs, gaps table and summary.json)."""
    profile = load_profile(path)
    header = profile.csv_header(OP_SUMMARY_CSV)
    op_schema = HOST_OP_SUMMARY_SCHEMA if "self_ns" in header else OP_SUMMARY_SCHEMA
    op_columns = [c for c in _OP_SUMMARY_COLUMNS if c in op_schema.names]
    read_columns = [*op_columns, *(c for c in _SHAPE_COLUMNS if c in header)]
    # the names read as text (the analysis holds them as codes: one dictionary per table)
    fields = [op_schema.field(c) for c in read_columns]
    fields = [
        f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in fields
    ]
    op_summary = profile.read_csv(OP_SUMMARY_CSV, pa.schema(fields), read_columns)
    gaps = profile.read_table(GAPS_TABLE, columns=["dur_ns", "cause", "step"])
    assert gaps is not None
    steps = profile.read_csv(STEP_TRACE_CSV)
    return RunTables(
        label=profile.label,
        path=str(path),
        source_kind=profile.source_kind,
        step_count=profile.step_count,
        step_trace=steps,
        gaps=gaps.cast(pa.schema([GAPS_SCHEMA.field(n) for n in gaps.column_names])),
        op_summary=op_summary.select(op_columns),
        transfers=profile.read_csv(TRANSFERS_CSV, TRANSFERS_SCHEMA),
        communication=profile.read_csv(COMMUNICATION_CSV, COMMUNICATION_SCHEMA),
        findings=tuple(profile.findings),
        confidence=profile.confidence,
        workload=profile_workload(profile, steps, op_types(op_summary), kernel_names(op_summary)),
        batch=batch_size(op_summary),
    )
