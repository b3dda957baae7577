"""Text exports: torch_npu's ``ASCEND_PROFILER_OUTPUT`` and msprof's ``mindstudio_profiler_output``.

The timeline gives every host call and hardware task with their links; the kernel table
(``kernel_details.csv`` / ``op_summary*.csv``) adds what the timeline lacks: the core type of each
kernel (AI_CORE, AI_VECTOR_CORE, MIX_AIV ...), its operator type, shapes and hardware counters.
Either may be missing: a kernel table alone still gives the device side.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from perfledger.duck import duck
from perfledger.errors import TraceFormatError
from perfledger.model import vendors_ascend
from perfledger.sources import ascend_build as build
from perfledger.sources import ascend_csv, ascend_timeline


@dataclass(frozen=True)
class TextFiles:
    """The files of one rank's text export (any may be absent)."""

    timeline: tuple[Path, ...] = ()
    kernels: tuple[Path, ...] = ()
    memory: Path | None = None
    communication: Path | None = None
    matrix: Path | None = None  # communication_matrix.json
    summaries: dict[str, Path] = field(default_factory=dict)  # step_trace_time, op_statistic ...
    device_hints: tuple[Path, ...] = ()  # small files naming the device ("NPU:3"), best first

    @property
    def all_files(self) -> tuple[Path, ...]:
        files = [*self.timeline, *self.kernels, *self.summaries.values()]
        files += [p for p in (self.memory, self.communication, self.matrix) if p is not None]
        return tuple(sorted(set(files)))


_IS_HCCL = (
    f"(k.core_type = '{vendors_ascend.HCCL_CORE_TYPE}' "
    "OR (k.core_type IS NULL AND starts_with(k.name, 'hcom_')))"
)

_ENRICH_SQL = f"""
WITH
t AS (SELECT *, row_number() OVER () AS t_row FROM tasks),
k AS (SELECT *, row_number() OVER () AS k_row FROM kernels),
pairs AS (
    SELECT t.t_row, min(k.k_row) AS k_row
    FROM t JOIN k ON k.start_ns = t.start_ns AND k.name = t.name
        AND (k.stream IS NULL OR k.stream = t.stream)
    WHERE NOT {_IS_HCCL}
    GROUP BY t.t_row
),
matched AS (SELECT p.t_row, k.* FROM pairs p JOIN k USING (k_row))
SELECT t.name, t.hw_type, coalesce(m.core_type, t.core_type) AS core_type,
    coalesce(m.op_type, t.op_type) AS op_type, t.is_compute OR m.k_row IS NOT NULL AS is_compute,
    t.is_comm_subtask, t.device, t.stream, t.pid, t.start_ns, t.dur_ns, t.connection_id,
    t.bytes, coalesce(m.shapes, t.shapes) AS shapes, coalesce(m.dtypes, t.dtypes) AS dtypes,
    CASE WHEN m.args IS NULL THEN t.args
        ELSE json_merge_patch(coalesce(t.args, '{{}}'), m.args)::VARCHAR END AS args
FROM t LEFT JOIN matched m USING (t_row)
UNION ALL
SELECT k.name, coalesce(k.core_type, 'KERNEL') AS hw_type, k.core_type, k.op_type,
    true AS is_compute, false AS is_comm_subtask, k.device, coalesce(k.stream, -1) AS stream,
    NULL AS pid, k.start_ns, k.dur_ns, NULL AS connection_id, NULL AS bytes, k.shapes, k.dtypes,
    k.args
FROM k WHERE NOT {_IS_HCCL} AND k.k_row NOT IN (SELECT k_row FROM pairs)
"""

# Collectives from the kernel table, used only when the timeline recorded none.
_KERNEL_COMM_SQL = f"""
SELECT k.name, k.device, coalesce(k.stream, -1) AS stream, NULL AS pid, k.start_ns, k.dur_ns,
    NULL AS connection_id, NULL AS bytes, k.args
FROM kernels k WHERE {_IS_HCCL}
"""


# The operator type of a collective is only in the kernel table (hcom_allReduce_ ...).
_COMM_OP_TYPE_SQL = f"""
WITH types AS (
    SELECT k.name, min(k.op_type) AS op_type FROM kernels k
    WHERE {_IS_HCCL} AND k.op_type IS NOT NULL GROUP BY k.name
)
SELECT c.* EXCLUDE (args),
    CASE WHEN t.op_type IS NULL THEN c.args
        ELSE json_merge_patch(coalesce(c.args, '{{}}'), json_object('op_type', t.op_type))::VARCHAR
    END AS args
FROM comm c LEFT JOIN types t USING (name)
"""


def enrich(staged: build.Staged, kernels: pa.Table) -> build.Staged:
    """Join the kernel table onto the timeline's hardware tasks (start time and name)."""
    con = duck(parallel=True)
    try:
        con.register("tasks", staged.tasks)
        con.register("kernels", kernels)
        tasks = con.sql(_ENRICH_SQL).to_arrow_table()
        comm = staged.comm
        if comm.num_rows == 0:
            comm = con.sql(_KERNEL_COMM_SQL).to_arrow_table()
        else:
            con.register("comm", comm)
            comm = con.sql(_COMM_OP_TYPE_SQL).to_arrow_table()
    finally:
        con.close()
    return build.Staged(
        host=staged.host,
        cann=staged.cann,
        tasks=tasks.select(build.TASK_SCHEMA.names).cast(build.TASK_SCHEMA),
        comm=comm.select(build.COMM_SCHEMA.names).cast(build.COMM_SCHEMA),
        links=staged.links,
        counters=staged.counters,
        losses=staged.losses,
    )


# --- communication.json ------------------------------------------------------------------------

_TIME_INFO_KEYS = {
    "Elapse Time(ms)": "elapse_ns",
    "Transit Time(ms)": "transit_ns",
    "Wait Time(ms)": "wait_ns",
    "Synchronization Time(ms)": "synchronization_ns",
    "Idle Time(ms)": "idle_ns",
}
_RATIO_KEYS = {
    "Wait Time Ratio": "wait_ratio",
    "Synchronization Time Ratio": "synchronization_ratio",
}


def _json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``; TraceFormatError("not a JSON <what>") otherwise."""
    try:
        document = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not a JSON {what} ({exc})") from exc
    if not isinstance(document, dict):
        raise TraceFormatError(f"{path}: not a JSON {what}")
    return document


def communication_info(path: Path) -> dict[str, dict[str, Any]]:
    """Per collective (name without its ``@group`` suffix): HCCL's time split and link use."""
    document = _json_object(path, "communication summary")
    info: dict[str, dict[str, Any]] = {}
    for step in document.values():
        if not isinstance(step, dict):
            continue
        for group in ("collective", "p2p"):
            ops = step.get(group)
            if not isinstance(ops, dict):
                continue
            for op_name, op in ops.items():
                if isinstance(op, dict):
                    info.setdefault(str(op_name).split("@")[0], _op_info(op))
    return info


def _op_info(op: dict[str, Any]) -> dict[str, Any]:
    time_info = op.get("Communication Time Info", {})
    record: dict[str, Any] = {}
    # a figure that is not a finite number is left out (a damaged file)
    if isinstance(time_info, dict):
        for key, canonical in _TIME_INFO_KEYS.items():
            if (ns := build.scaled(time_info.get(key), 1e6)) is not None:
                record[canonical] = ns
        for key, canonical in _RATIO_KEYS.items():
            if build.finite(time_info.get(key)) is not None:
                record[canonical] = time_info[key]
    links: dict[str, Any] = {}
    bandwidth = op.get("Communication Bandwidth Info", {})
    if isinstance(bandwidth, dict):
        for link, figures in bandwidth.items():
            if not isinstance(figures, dict):
                continue
            transit_bytes = build.scaled(figures.get("Transit Size(MB)"), 1e6)
            if not transit_bytes:
                continue
            links[str(link)] = {
                "transit_bytes": transit_bytes,
                "transit_ns": build.scaled(figures.get("Transit Time(ms)", 0), 1e6) or 0,
                "bandwidth_gb_s": build.finite(figures.get("Bandwidth(GB/s)", 0)) or 0.0,
            }
    if links:
        record["links"] = links
    return record


# --- communication_matrix.json -----------------------------------------------------------------

# msprof's matrix lists, per step and collective type, a few sample operators (top1, middle,
# bottom1, ...) and their sum ("total"); only the totals are read, so nothing counts twice.
# A key without such a suffix is one operator of its own.
_MATRIX_KEY = re.compile(r"^(?P<op>.+?)-(?P<sample>top\d+|middle|bottom\d+|total)$")
_PAIR = re.compile(r"^(\d+)-(\d+)$")


def communication_matrix(path: Path) -> list[dict[str, Any]]:
    """Rows of :data:`perfledger.model.schema.COMM_MATRIX_SCHEMA` (without ``rank``) from an
    Ascend communication_matrix.json: bytes and time per step, collective type, group and
    (source rank, destination rank) pair."""
    document = _json_object(path, "communication matrix")
    rows: list[dict[str, Any]] = []
    for step, kinds in document.items():
        if not isinstance(kinds, dict):
            continue
        for kind in ("collective", "p2p"):
            ops = kinds.get(kind)
            if isinstance(ops, dict):
                rows.extend(_matrix_rows(str(step), ops))
    return rows


def _matrix_rows(step: str, ops: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, pairs in ops.items():
        name, _, group = str(key).partition("@")
        sample = _MATRIX_KEY.match(name)
        if sample is not None and sample["sample"] != "total":
            continue
        if not isinstance(pairs, dict):
            continue
        for pair, figures in pairs.items():
            ends = _PAIR.match(str(pair))
            if ends is None or not isinstance(figures, dict):
                continue
            transit_bytes = build.scaled(figures.get("Transit Size(MB)"), 1e6)
            transit_ns = build.scaled(figures.get("Transit Time(ms)"), 1e6)
            if transit_bytes is None or transit_ns is None:
                continue
            rows.append(
                {
                    "step": step or None,
                    "op": sample["op"] if sample is not None else name,
                    "group": group or None,
                    "src_rank": int(ends[1]),
                    "dst_rank": int(ends[2]),
                    "transport": str(figures.get("Transport Type") or "unknown"),
                    "transit_bytes": transit_bytes,
                    "transit_ns": transit_ns,
                }
            )
    return rows


def with_communication_info(comm: pa.Table, info: dict[str, dict[str, Any]]) -> pa.Table:
    """Collectives with HCCL's own time split merged into their args (key ``hccl``)."""
    if not info or comm.num_rows == 0:
        return comm
    names = comm.column("name").to_pylist()
    extra = [msgspec.json.encode({"hccl": info[n]}).decode() if n in info else None for n in names]
    con = duck(parallel=True)
    try:
        con.register("comm", comm.append_column("extra", pa.array(extra, pa.string())))
        merged = con.sql(
            "SELECT * EXCLUDE (args, extra), CASE WHEN extra IS NULL THEN args "
            "ELSE json_merge_patch(coalesce(args, '{}'), extra)::VARCHAR END AS args FROM comm"
        ).to_arrow_table()
    finally:
        con.close()
    return merged.select(build.COMM_SCHEMA.names).cast(build.COMM_SCHEMA)


def read_text(files: TextFiles, default_device: int) -> build.Staged:
    """One rank's text export in staging form.

    The timeline and the kernel table each stand alone: when one of them cannot be read, the
    other is, and the damaged one is said in the losses; the rank is refused when neither can.
    """
    if not files.timeline and not files.kernels:
        raise TraceFormatError(
            f"{files.all_files[0] if files.all_files else 'input'}: "
            "no timeline and no kernel table to read"
        )
    staged = build.Staged()
    left_out: list[str] = []
    if files.timeline:
        try:
            staged = ascend_timeline.read_timeline(files.timeline, default_device)
        except TraceFormatError as exc:
            if not files.kernels:
                raise
            left_out.append(f"{exc}, left out")
    losses: tuple[str, ...] = ()
    if files.kernels:
        try:
            kernels, losses = ascend_csv.read_kernels(files.kernels, default_device)
            staged = enrich(staged, kernels)
        except TraceFormatError as exc:
            if left_out or not files.timeline:
                raise
            left_out.append(f"{exc}, left out")
    counters = [staged.counters]
    comm = staged.comm
    # memory and communication summaries are extras: a damaged one is reported, not fatal
    extras: list[str] = []
    if files.memory is not None:
        try:
            memory, memory_losses = ascend_csv.read_memory_counters(files.memory)
            counters.append(memory)
            extras.extend(memory_losses)
        except TraceFormatError as exc:
            extras.append(str(exc))
    if files.communication is not None:
        try:
            comm = with_communication_info(comm, communication_info(files.communication))
        except TraceFormatError as exc:
            extras.append(str(exc))
    return build.Staged(
        host=staged.host,
        cann=staged.cann,
        tasks=staged.tasks,
        comm=comm,
        links=staged.links,
        counters=pa.concat_tables(counters),
        losses=(*staged.losses, *left_out, *losses, *extras),
    )


def summaries(files: TextFiles) -> dict[str, list[dict[str, Any]]]:
    """The profiler's own small summary tables, kept in meta for comparison."""
    return {name: ascend_csv.read_records(path) for name, path in files.summaries.items()}


def kernel_files(paths: Sequence[Path]) -> tuple[Path, ...]:
    """Slices in order (``op_summary_slice_0_*``, ``op_summary_slice_1_*``, ...)."""

    def slice_index(path: Path) -> tuple[int, str]:
        parts = path.stem.split("_slice_")
        if len(parts) == 2 and parts[1].split("_")[0].isdigit():
            return int(parts[1].split("_")[0]), path.name
        return -1, path.name

    return tuple(sorted(paths, key=slice_index))
