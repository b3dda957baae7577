"""What the ledger keeps of a profile directory: read from its summary.json, meta.json and
step_trace.csv through :func:`perfledger.profiledir.load_profile` (figures are copied, never
recomputed from events)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfledger.analysis import figures
from perfledger.analysis.diff.workload import (
    Workload,
    batch_size,
    device_of,
    layer_rows,
    operator_digests,
    program_of,
    vendor_of,
)
from perfledger.ledger.locate import git_root
from perfledger.ledger.store import RunRecord
from perfledger.profiledir import StoredProfile, load_profile
from perfledger.profiledir.layout import (
    KERNEL_DETAILS_CSV,
    OP_STATISTIC_CSV,
    OP_SUMMARY_CSV,
    STEP_TRACE_CSV,
)
from perfledger.vcs import git_revision

DEVICE_SHARES: Final = (
    "compute",
    "communication",
    "memcpy",
    "memset",
    "idle_host_dispatch",
    "idle_sync",
    "idle_dataloader",
    "idle_launch_latency",
    "idle_other",
)
HOST_SHARES: Final = ("dataloader", "forward", "backward", "optimizer", "overhead")
# The rows of op_summary the batch size is read from: every step has its loss or first layer
# in far fewer, and registering must stay cheap next to a gigabyte profile.
BATCH_READ_ROWS: Final = 500_000
_BATCH_COLUMNS: Final = {
    "step": pa.int32(),
    "start_ns": pa.int64(),
    "name": pa.string(),
    "host_op": pa.string(),
    "shapes": pa.string(),
}
# options of a recording worth a column of the baseline table (the rest stays in meta.json)
_KEY_OPTIONS: Final = (
    "level",
    "steps",
    "wait",
    "warmup",
    "active",
    "repeat",
    "skip_first",
    "record_shapes",
    "with_stack",
    "profile_memory",
    "with_flops",
)


def run_record(
    profile: Path | StoredProfile,
    *,
    label: str | None = None,
    note: str | None = None,
    registered_ns: int | None = None,
    cwd: Path | None = None,
) -> RunRecord:
    """The ledger's record of a profile (its directory, or the profile as just written).

    Raises:
        PerfledgerError: the directory is not a readable profile.
    """
    stored = profile if isinstance(profile, StoredProfile) else load_profile(profile)
    summary, meta = stored.summary, stored.meta
    step_trace = stored.read_csv(STEP_TRACE_CSV)
    walls = figures.step_walls_ms(step_trace, stored.step_count)
    findings = summary.get("findings") or []
    top = findings[0] if findings and isinstance(findings[0], Mapping) else {}
    git = meta.get("git") if isinstance(meta.get("git"), Mapping) else None
    if git is None:
        git = _git(cwd or Path(str(meta.get("working_dir") or Path.cwd())))
    command = meta.get("command") or meta.get("command_line") or []
    return RunRecord(
        label=label or _str(meta.get("label")) or stored.path.resolve().name,
        registered_ns=registered_ns if registered_ns is not None else time.time_ns(),
        profile_created_ns=_int(meta.get("created_ns")),
        note=note,
        kind="record" if "recorder" in meta else "analyze",
        command=tuple(str(part) for part in command) if isinstance(command, list) else (),
        options=_key_options(meta),
        git_commit=_str(git.get("commit")) if git else None,
        git_branch=_str(git.get("branch")) if git else None,
        git_dirty=bool(git.get("dirty")) if git and git.get("dirty") is not None else None,
        device=device_of(meta, host_only=figures.is_host_only(step_trace)),
        source_kind=_source_kind(summary),
        profile_path=os.fspath(stored.path.resolve()),
        ranks=len(summary["ranks"]) if isinstance(summary.get("ranks"), list) else None,
        step_count=_int(summary.get("step_count")),
        step_median_ms=_float(summary.get("step_time_ms")),
        step_p90_ms=round(float(np.percentile(walls, 90)), 3) if walls.size else None,
        utilization_pct=_utilization(summary, step_trace),
        accounting=_category_shares(step_trace),
        top_finding=_str(top.get("id")),
        top_finding_title=_str(top.get("title")),
        top_finding_ms=_float(top.get("severity_ms")),
        workload=profile_workload(stored, step_trace).as_dict(),
        batch_size=profile_batch_size(stored),
    )


def profile_batch_size(stored: StoredProfile) -> int | None:
    """Samples per step (:func:`perfledger.analysis.diff.workload.batch_size`) of the first
    :data:`BATCH_READ_ROWS` rows of op_summary: those the profile holds in memory where it
    was just written (:attr:`StoredProfile.op_summary_head`), else those of op_summary.csv."""
    if stored.op_summary_head is not None:
        return batch_samples(stored.op_summary_head)
    path = stored.path / OP_SUMMARY_CSV
    if not path.is_file():
        return None
    header = stored.csv_header(OP_SUMMARY_CSV)
    columns = [c for c in _BATCH_COLUMNS if c in header]
    try:
        reader = pacsv.open_csv(
            path,
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={c: _BATCH_COLUMNS[c] for c in columns},
                include_columns=columns,
                strings_can_be_null=True,
            ),
        )
        batches, read = [], 0
        for batch in reader:
            batches.append(batch)
            read += batch.num_rows
            if read >= BATCH_READ_ROWS:
                break
    except (OSError, pa.ArrowInvalid):
        return None  # the batch size is a hint: an unreadable table only loses it
    if not batches:
        return None
    return batch_samples(pa.Table.from_batches(batches))


def batch_samples(op_summary: pa.Table) -> int | None:
    """The batch size of the first :data:`BATCH_READ_ROWS` rows of ``op_summary`` (its
    columns as op_summary.csv reads back: plain types, no text empty but null)."""
    head = op_summary.slice(0, BATCH_READ_ROWS)
    if "shapes" in head.column_names and "step" in head.column_names:
        # only the rows batch_size reads (shapes recorded, in a step): the names of the
        # others (long kernel names, half a million of them) are never cast to text
        shapes = head.column("shapes")
        if not (pa.types.is_string(shapes.type) or pa.types.is_large_string(shapes.type)):
            shapes = shapes.cast(pa.string())
        head = head.filter(layer_rows(shapes, head.column("step")))
    columns = {}
    for name, kind in _BATCH_COLUMNS.items():
        if name in head.column_names:
            column = head.column(name).cast(kind)
            if pa.types.is_string(kind):  # the CSV reads an empty cell as null
                column = pc.if_else(pc.equal(column, ""), pa.scalar(None, kind), column)
            columns[name] = column
    found = batch_size(pa.table(columns))
    return None if found is None else found.samples


def profile_workload(
    stored: StoredProfile,
    step_trace: pa.Table | None = None,
    operators: Sequence[str] | None = None,
    kernels: Sequence[str] | None = None,
) -> Workload:
    """The workload of a profile: the recorded program (record runs), the devices, and the
    op types of op_statistic.csv (host operators that launched the device tasks, else the
    tasks' names; the host operators of a CPU run) unless ``operators`` gives them, and
    the kernels' names of kernel_details.csv unless ``kernels`` gives them."""
    meta = stored.meta
    program = None
    command = meta.get("command")
    if "recorder" in meta and isinstance(command, list):
        working = meta.get("working_dir")
        program = program_of([str(word) for word in command], Path(str(working or ".")))
        # A script is named relative to the root of the repository holding it: the same
        # script launched from any folder (or by another path) is one program.
        # (a script that is a link to a file elsewhere: the repository of the file itself)
        script = Path(program).resolve() if program and program.endswith(".py") else None
        root = git_root(script.parent) if script and script.parent.is_dir() else None
        if script is not None and root is not None:  # root: a resolved parent of script
            program = script.relative_to(root).as_posix()
    if step_trace is None:
        step_trace = stored.read_csv(STEP_TRACE_CSV)
    host_only = figures.is_host_only(step_trace)
    return Workload(
        program=program,
        vendor=vendor_of(meta, host_only=host_only),
        device=device_of(meta, host_only=host_only),
        operators=operator_digests(_op_types(stored) if operators is None else operators),
        kernels=operator_digests(_kernel_names(stored) if kernels is None else kernels),
    )


def _kernel_names(stored: StoredProfile) -> list[str]:
    if stored.kernel_names is not None:
        return list(stored.kernel_names)
    if not (stored.path / KERNEL_DETAILS_CSV).is_file():
        return []
    table = stored.read_csv(KERNEL_DETAILS_CSV, pa.schema([("name", pa.string())]), ["name"])
    return sorted({str(name) for name in table.column("name").to_pylist() if name})


def _op_types(stored: StoredProfile) -> list[str | None]:
    if not (stored.path / OP_STATISTIC_CSV).is_file():
        return []
    table = stored.read_csv(OP_STATISTIC_CSV, pa.schema([("name", pa.string())]), ["name"])
    return [str(name) for name in table.column("name").to_pylist() if name]


def _category_shares(step_trace: pa.Table) -> dict[str, float]:
    """Each category's share of the accounted windows in %, as ``perfledger diff`` has them."""
    names = HOST_SHARES if figures.is_host_only(step_trace) else DEVICE_SHARES
    shares = {name: figures.category_share_pct(step_trace, name) for name in names}
    return {name: round(share, 2) for name, share in shares.items() if share is not None}


def _key_options(meta: Mapping[str, Any]) -> dict[str, Any]:
    options = meta.get("options")
    if not isinstance(options, Mapping):
        return {}
    return {k: options[k] for k in _KEY_OPTIONS if k in options and options[k] is not None}


def _utilization(summary: Mapping[str, Any], step_trace: pa.Table) -> float | None:
    """The profile's device utilisation: summary.json's, else (profiles written before it
    held one) the same figure from its step_trace."""
    value = summary.get("device_utilization_pct")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    utilization = figures.utilization_pct(step_trace)
    return round(utilization, 2) if utilization is not None else None


def _source_kind(summary: Mapping[str, Any]) -> str | None:
    source = summary.get("source")
    if isinstance(source, Mapping) and source.get("kind") is not None:
        kind = source["kind"]
        return "+".join(map(str, kind)) if isinstance(kind, list) else str(kind)
    return None


def _git(directory: Path) -> dict[str, Any] | None:

    return git_revision(directory) if directory.is_dir() else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
