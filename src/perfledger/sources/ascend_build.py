"""Staging tables shared by the Ascend readers and the one step that turns them into events.

Every Ascend input (torch_npu text, torch_npu database, msprof command-line output) is first read
into the same five staging tables below; :func:`build_events` then classifies and links them in
one place, so that the text and the database export of a run give the same canonical events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from perfledger.duck import duck
from perfledger.model import schema, vendors_ascend

# Framework host events (torch_npu's Python side): operators, Python functions, task queue.
HOST_SCHEMA: Final = pa.schema(
    [
        ("name", pa.string()),
        ("category", pa.string()),  # cpu_op, python_function, enqueue, dequeue, ...
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("op_key", pa.int64()),  # unique per row of this table, for LINK_SCHEMA
        ("shapes", pa.string()),
        ("dtypes", pa.string()),
        ("args", pa.string()),  # JSON object
    ]
)

# CANN API calls (AscendCL, runtime, node launch, HCCL, model).
CANN_SCHEMA: Final = pa.schema(
    [
        ("name", pa.string()),  # "<Level>@<api>" as the text timeline writes it
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("connection_id", pa.int64()),  # null when unknown
        ("args", pa.string()),
    ]
)

# Hardware tasks of the device streams.
TASK_SCHEMA: Final = pa.schema(
    [
        ("name", pa.string()),
        ("hw_type", pa.string()),  # the scheduler's task type
        ("core_type", pa.string()),  # AI_CORE, AI_VECTOR_CORE, MIX_AIV, ... when known
        ("op_type", pa.string()),
        ("is_compute", pa.bool_()),  # listed among compute tasks by the profiler
        ("is_comm_subtask", pa.bool_()),  # listed among the HCCL tasks of a collective
        ("device", pa.int16()),
        ("stream", pa.int64()),
        ("pid", pa.int64()),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("connection_id", pa.int64()),
        ("bytes", pa.int64()),
        ("shapes", pa.string()),
        ("dtypes", pa.string()),
        ("args", pa.string()),
    ]
)

# Collectives (one row per HCCL operation).
COMM_SCHEMA: Final = pa.schema(
    [
        ("name", pa.string()),
        ("device", pa.int16()),  # null when unknown: then the device of its tasks is used
        ("stream", pa.int64()),  # -1 when unknown: then the stream of its first task is used
        ("pid", pa.int64()),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("connection_id", pa.int64()),
        ("bytes", pa.int64()),
        ("args", pa.string()),
    ]
)

# Which host operator issued which device work (torch_to_npu flows, CONNECTION_IDS).
LINK_SCHEMA: Final = pa.schema([("op_key", pa.int64()), ("connection_id", pa.int64())])

# Counters before the rank is known.
STAGED_COUNTER_SCHEMA: Final = pa.schema(
    [("track", pa.string()), ("name", pa.string()), ("ts_ns", pa.int64()), ("value", pa.float64())]
)


@dataclass(frozen=True)
class Staged:
    """One rank's Ascend data in staging form (see the schemas of this module)."""

    host: pa.Table = field(default_factory=HOST_SCHEMA.empty_table)
    cann: pa.Table = field(default_factory=CANN_SCHEMA.empty_table)
    tasks: pa.Table = field(default_factory=TASK_SCHEMA.empty_table)
    comm: pa.Table = field(default_factory=COMM_SCHEMA.empty_table)
    links: pa.Table = field(default_factory=LINK_SCHEMA.empty_table)
    counters: pa.Table = field(default_factory=STAGED_COUNTER_SCHEMA.empty_table)
    losses: tuple[str, ...] = ()  # what could not be read (skipped rows ...), one line each


def finite(value: Any) -> float | None:
    """A number read from a profiler's JSON or database, None when it is not a finite one
    (text, a blob, a boolean, NaN or an infinity, which ``1e400`` in JSON decodes to)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value) if isinstance(value, float) or abs(value) < 1 << 1000 else math.inf
    return number if math.isfinite(number) else None


def scaled(value: Any, factor: float) -> int | None:
    """``value`` times ``factor`` rounded to an integer (ms to ns ...), None when it is not a
    finite number or the result does not fit 64 bits (damage, not a duration or a size)."""
    number = finite(value)
    if number is None or not abs(number * factor) < 2.0**63:
        return None
    return round(number * factor)


def unplaced_rows(staged: Staged) -> int:
    """Rows :func:`build_events` leaves out for want of a start time or a name."""
    tables = (staged.host, staged.cann, staged.tasks, staged.comm)
    return sum(
        table.num_rows
        - (
            pc.sum(
                pc.and_(pc.is_valid(table.column("start_ns")), pc.is_valid(table.column("name")))
            ).as_py()
            or 0
        )
        for table in tables
        if table.num_rows
    )


def sql_list(values: frozenset[str] | tuple[str, ...]) -> str:
    """A SQL list literal of strings (vendor names contain no quotes, but escape anyway)."""
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))
    return f"({quoted})"


def _host_kind_sql() -> str:
    cases = " ".join(
        f"WHEN category = '{cat}' THEN '{kind}'"
        for cat, kind in vendors_ascend.HOST_CATEGORY_KIND.items()
    )
    return (
        f"CASE WHEN starts_with(name, '{vendors_ascend.STEP_PREFIX}') THEN '{schema.STEP}' "
        f"WHEN starts_with(name, '{vendors_ascend.DATALOADER_PREFIX}') "
        f"THEN '{schema.DATALOADER}' {cases} ELSE '{schema.ANNOTATION}' END"
    )


_BUILD_SQL = """
WITH
launch_ids AS (
    SELECT DISTINCT connection_id FROM cann WHERE connection_id IS NOT NULL
),
issued_ids AS (
    SELECT connection_id FROM tasks WHERE connection_id IS NOT NULL
    UNION SELECT connection_id FROM comm WHERE connection_id IS NOT NULL
),
-- the innermost operator that issued a connection's work: the latest to start, the shortest
-- of those starting together
op_of_connection AS (
    SELECT connection_id, op_key FROM (
        SELECT l.connection_id, l.op_key, row_number() OVER (
            PARTITION BY l.connection_id ORDER BY h.start_ns DESC, h.dur_ns, l.op_key
        ) AS rank_in_connection
        FROM links l JOIN host h USING (op_key)
    ) WHERE rank_in_connection = 1
),
linked_ops AS (SELECT DISTINCT op_key FROM op_of_connection),
comm_ids AS (SELECT DISTINCT connection_id FROM comm WHERE connection_id IS NOT NULL),
comm_stream AS (
    SELECT connection_id, min(stream) AS stream, min(device) AS device FROM tasks
    WHERE connection_id IS NOT NULL GROUP BY connection_id
),
host_rows AS (
    SELECT {host_kind} AS kind, h.name, -1 AS device, h.tid AS stream, h.pid,
        h.start_ns, h.dur_ns, -1 AS correlation,
        CASE WHEN lo.op_key IS NULL THEN -1 ELSE h.op_key END AS external_id,
        -1 AS bytes, h.shapes, h.dtypes, h.args
    FROM host h LEFT JOIN linked_ops lo USING (op_key)
),
cann_rows AS (
    SELECT
        CASE WHEN split_part(c.name, '@', -1) IN {sync_apis} THEN '{sync}' ELSE '{runtime}' END
            AS kind,
        c.name, -1 AS device, c.tid AS stream, c.pid, c.start_ns, c.dur_ns,
        CASE WHEN i.connection_id IS NULL THEN -1 ELSE c.connection_id END AS correlation,
        coalesce(oc.op_key, -1) AS external_id, -1 AS bytes, NULL AS shapes, NULL AS dtypes,
        c.args
    FROM cann c
    LEFT JOIN (SELECT DISTINCT connection_id FROM issued_ids) i USING (connection_id)
    LEFT JOIN op_of_connection oc USING (connection_id)
),
comm_rows AS (
    SELECT '{comm}' AS kind, m.name, coalesce(m.device, cs.device, 0) AS device,
        CASE WHEN m.stream >= 0 THEN m.stream ELSE coalesce(cs.stream, -1) END AS stream,
        m.pid, m.start_ns, m.dur_ns,
        CASE WHEN li.connection_id IS NULL THEN -1 ELSE m.connection_id END AS correlation,
        coalesce(oc.op_key, -1) AS external_id, m.bytes, NULL AS shapes, NULL AS dtypes,
        json_merge_patch(coalesce(m.args, '{{}}'),
            json_object('task_type', '{hccl}', 'connection_id', m.connection_id)) AS args
    FROM comm m
    LEFT JOIN comm_stream cs USING (connection_id)
    LEFT JOIN launch_ids li USING (connection_id)
    LEFT JOIN op_of_connection oc USING (connection_id)
),
task_rows AS (
    SELECT
        CASE
            WHEN t.is_compute THEN '{kernel}'
            -- issued by the launch of a recorded collective: a piece of that collective
            WHEN ci.connection_id IS NOT NULL THEN '{dev_annotation}'
            WHEN t.is_comm_subtask OR t.hw_type IN {subtask_types} THEN '{comm}'
            -- when the profiler lists its compute tasks, a kernel-type task it does not list
            -- is the envelope of a listed one (FFTS+/MIX parent task around its context)
            WHEN t.hw_type IN {kernel_types} AND (SELECT bool_or(is_compute) FROM tasks)
                THEN '{dev_annotation}'
            WHEN t.hw_type IN {kernel_types} THEN '{kernel}'
            WHEN t.hw_type IN {memcpy_types} THEN '{memcpy}'
            WHEN t.hw_type IN {memset_types} THEN '{memset}'
            ELSE '{dev_annotation}'
        END AS kind,
        t.name, t.device, t.stream, t.pid, t.start_ns, t.dur_ns,
        CASE WHEN li.connection_id IS NULL THEN -1 ELSE t.connection_id END AS correlation,
        coalesce(oc.op_key, -1) AS external_id, t.bytes, t.shapes, t.dtypes,
        json_merge_patch(coalesce(t.args, '{{}}'), json_object(
            'task_type', coalesce(t.core_type, core_map[t.hw_type], t.hw_type),
            'hw_task_type', t.hw_type,
            'op_type', t.op_type,
            'connection_id', t.connection_id)) AS args
    FROM tasks t
    LEFT JOIN comm_ids ci USING (connection_id)
    LEFT JOIN launch_ids li USING (connection_id)
    LEFT JOIN op_of_connection oc USING (connection_id)

)
SELECT * FROM host_rows
UNION ALL SELECT * FROM cann_rows
UNION ALL SELECT * FROM comm_rows
UNION ALL SELECT * FROM task_rows
"""


def _build_sql() -> str:
    core_map = (
        "MAP {"
        + ", ".join(f"'{k}': '{v}'" for k, v in vendors_ascend.CORE_TYPE_OF_TASK_TYPE.items())
        + "}"
    )
    sql = _BUILD_SQL.format(
        host_kind=_host_kind_sql(),
        sync_apis=sql_list(vendors_ascend.CANN_SYNC_APIS),
        sync=schema.SYNC,
        runtime=schema.RUNTIME,
        comm=schema.COMM,
        kernel=schema.KERNEL,
        memcpy=schema.MEMCPY,
        memset=schema.MEMSET,
        dev_annotation=schema.DEVICE_ANNOTATION,
        hccl=vendors_ascend.HCCL_CORE_TYPE,
        subtask_types=sql_list(vendors_ascend.COMM_SUBTASK_TYPES),
        kernel_types=sql_list(vendors_ascend.KERNEL_TASK_TYPES),
        memcpy_types=sql_list(vendors_ascend.MEMCPY_TASK_TYPES),
        memset_types=sql_list(vendors_ascend.MEMSET_TASK_TYPES),
    )
    return sql.replace("core_map[", f"{core_map}[")


def build_events(staged: Staged, rank: int) -> pa.Table:
    """The canonical events of one rank, sorted by start (then kind, stream, name)."""
    con = duck(parallel=True)
    try:
        con.register("host", staged.host)
        con.register("cann", staged.cann)
        con.register("tasks", staged.tasks)
        con.register("comm", staged.comm)
        con.register("links", staged.links)
        rows = con.sql(
            f"SELECT {rank}::INTEGER AS rank, kind, name, "
            "coalesce(device, -1)::SMALLINT AS device, "
            "coalesce(stream, -1)::BIGINT AS stream, coalesce(pid, 0)::BIGINT AS pid, "
            "start_ns::BIGINT AS start_ns, greatest(dur_ns, 0)::BIGINT AS dur_ns, "
            "coalesce(correlation, -1)::BIGINT AS correlation, "
            "coalesce(external_id, -1)::BIGINT AS external_id, "
            f"{schema.NO_STEP}::INTEGER AS step, coalesce(bytes, -1)::BIGINT AS bytes, "
            "'NaN'::DOUBLE AS flops, shapes::VARCHAR AS shapes, dtypes::VARCHAR AS dtypes, "
            "args::VARCHAR AS args "
            f"FROM ({_build_sql()}) "
            "WHERE start_ns IS NOT NULL AND kind IS NOT NULL AND name IS NOT NULL "
            "ORDER BY start_ns, kind, device, stream, name, dur_ns, correlation"
        ).to_arrow_table()
    finally:
        con.close()
    return schema.conform_events(rows)


def build_counters(staged: Staged, rank: int) -> pa.Table:
    """The canonical counters of one rank, sorted by track, name and time."""
    table = staged.counters
    if table.num_rows == 0:
        return schema.empty_counters()
    con = duck(parallel=True)
    try:
        con.register("counters", table)
        rows = con.sql(
            f"SELECT {rank}::INTEGER AS rank, track, name, ts_ns, value FROM counters "
            "WHERE ts_ns IS NOT NULL AND value IS NOT NULL AND NOT isnan(value) "
            "ORDER BY track, name, ts_ns, value"
        ).to_arrow_table()
    finally:
        con.close()
    return rows.cast(schema.COUNTERS_SCHEMA)
