"""Read the Ascend SQLite exports: torch_npu's ``ascend_pytorch_profiler_{rank}.db`` and msprof's
``msprof_*.db``.

Both store times as integer ns and every text as an id into ``STRING_IDS``; the tables present
depend on the profiler level and version (and GUIs add their own), so each query is built from
the tables and columns actually found. SQLite only hands over the raw columns (it has no index
for most joins and builds JSON slowly); the joins, the string lookups and the args run in one
DuckDB pass, and the shared :func:`perfledger.sources.ascend_build.build_events` classifies.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import duckdb
import pyarrow as pa

from perfledger.duck import duck
from perfledger.errors import TraceFormatError
from perfledger.model import vendors_ascend
from perfledger.sources import ascend_build as build

_MASK32 = 0xFFFFFFFF
# Rows of a table read from SQLite at a time (each value a Python object until made a column).
FETCH_ROWS: Final = 65_536


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection that never writes a journal next to the file."""
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as exc:
        raise TraceFormatError(f"{path}: cannot open as SQLite ({exc})") from exc
    try:
        yield con
    finally:
        con.close()


def _tables(con: sqlite3.Connection, path: Path) -> dict[str, set[str]]:
    """Table name → its column names."""
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: {r[1] for r in con.execute(f'PRAGMA table_info("{name}")')} for name in names}
    except sqlite3.Error as exc:
        raise TraceFormatError(f"{path}: not a profiler database ({exc})") from exc


# The raw columns read from each table, with their types; a column absent from a file reads as
# null, so that the DuckDB queries below can name every column.
_RAW: dict[str, list[tuple[str, pa.DataType]]] = {
    "STRING_IDS": [("id", pa.int64()), ("value", pa.string())],
    "ENUM_API_TYPE": [("id", pa.int64()), ("name", pa.string())],
    "ENUM_HCCL_DATA_TYPE": [("id", pa.int64()), ("name", pa.string())],
    "ENUM_HCCL_LINK_TYPE": [("id", pa.int64()), ("name", pa.string())],
    "ENUM_HCCL_TRANSPORT_TYPE": [("id", pa.int64()), ("name", pa.string())],
    "ENUM_MSTX_EVENT_TYPE": [("id", pa.int64()), ("name", pa.string())],
    "PYTORCH_API": [
        ("rowid", pa.int64()),
        ("startNs", pa.int64()),
        ("endNs", pa.int64()),
        ("globalTid", pa.int64()),
        ("connectionId", pa.int64()),
        ("name", pa.int64()),
        ("sequenceNumber", pa.int64()),
        ("fwdThreadId", pa.int64()),
        ("inputShapes", pa.int64()),
        ("inputDtypes", pa.int64()),
        ("callchainId", pa.int64()),
        ("type", pa.int64()),
    ],
    "PYTORCH_CALLCHAINS": [("id", pa.int64()), ("stack", pa.int64()), ("stackDepth", pa.int64())],
    "CONNECTION_IDS": [("id", pa.int64()), ("connectionId", pa.int64())],
    "CANN_API": [
        ("startNs", pa.int64()),
        ("endNs", pa.int64()),
        ("type", pa.int64()),
        ("globalTid", pa.int64()),
        ("connectionId", pa.int64()),
        ("name", pa.int64()),
    ],
    "TASK": [
        ("startNs", pa.int64()),
        ("endNs", pa.int64()),
        ("deviceId", pa.int64()),
        ("connectionId", pa.int64()),
        ("globalTaskId", pa.int64()),
        ("globalPid", pa.int64()),
        ("taskType", pa.int64()),
        ("contextId", pa.int64()),
        ("streamId", pa.int64()),
        ("taskId", pa.int64()),
        ("modelId", pa.int64()),
    ],
    "COMPUTE_TASK_INFO": [
        ("globalTaskId", pa.int64()),
        ("name", pa.int64()),
        ("blockDim", pa.int64()),
        ("block_dim", pa.int64()),
        ("mixBlockDim", pa.int64()),
        ("taskType", pa.int64()),
        ("opType", pa.int64()),
        ("inputFormats", pa.int64()),
        ("inputDataTypes", pa.int64()),
        ("inputShapes", pa.int64()),
        ("outputFormats", pa.int64()),
        ("outputDataTypes", pa.int64()),
        ("outputShapes", pa.int64()),
        ("waitNs", pa.int64()),
    ],
    "COMMUNICATION_TASK_INFO": [
        ("globalTaskId", pa.int64()),
        ("name", pa.int64()),
        ("taskType", pa.int64()),
        ("planeId", pa.int64()),
        ("srcRank", pa.int64()),
        ("dstRank", pa.int64()),
        ("size", pa.int64()),
        ("transportType", pa.int64()),
        ("linkType", pa.int64()),
        ("dataType", pa.int64()),
        ("notifyId", pa.int64()),
    ],
    "COMMUNICATION_OP": [
        ("opName", pa.int64()),
        ("startNs", pa.int64()),
        ("endNs", pa.int64()),
        ("connectionId", pa.int64()),
        ("groupName", pa.int64()),
        ("relay", pa.int64()),
        ("retry", pa.int64()),
        ("dataType", pa.int64()),
        ("algType", pa.int64()),
        ("count", pa.float64()),
        ("opType", pa.int64()),
    ],
    "TASK_PMU_INFO": [
        ("rowid", pa.int64()),
        ("globalTaskId", pa.int64()),
        ("name", pa.int64()),
        ("value", pa.float64()),
    ],
    "MSTX_EVENTS": [
        ("rowid", pa.int64()),
        ("startNs", pa.int64()),
        ("endNs", pa.int64()),
        ("eventType", pa.int64()),
        ("message", pa.int64()),
        ("globalTid", pa.int64()),
    ],
    "MEMORY_RECORD": [
        ("component", pa.int64()),
        ("timestamp", pa.int64()),
        ("totalAllocated", pa.float64()),
        ("totalReserved", pa.float64()),
        ("totalActive", pa.float64()),
    ],
    "NPU_MEM": [
        ("type", pa.int64()),
        ("ddr", pa.float64()),
        ("hbm", pa.float64()),
        ("timestampNs", pa.int64()),
    ],
    "AICORE_FREQ": [("timestampNs", pa.int64()), ("freq", pa.float64())],
}


def _fetch(
    con: sqlite3.Connection, path: Path, table: str, tables: dict[str, set[str]]
) -> pa.Table:
    """The raw columns of one table (``_RAW``), empty when the file lacks the table."""
    wanted = _RAW[table]
    schema = pa.schema(wanted)
    present = tables.get(table)
    if present is None:
        return schema.empty_table()
    # SQLite's loose typing: a TEXT timestamp (PYTORCH_API written by some versions) casts here
    selects = [
        (f'CAST("{name}" AS INTEGER)' if pa.types.is_integer(kind) else f'"{name}"')
        if name in present or name == "rowid"
        else "NULL"
        for name, kind in wanted
    ]
    # a batch of rows at a time: SQLite hands over a Python object per value, which a whole
    # table of a large export would hold at once (bench/README.md, "Growth": 0.78x the
    # import of a 209 MB export)
    batches: list[pa.RecordBatch] = []
    try:
        cursor = con.execute(f'SELECT {", ".join(selects)} FROM "{table}"')
        while rows := cursor.fetchmany(FETCH_ROWS):
            columns = zip(*rows, strict=True)
            del rows
            arrays = [
                pa.array(column, type=kind)
                for column, (_, kind) in zip(columns, wanted, strict=True)
            ]
            batches.append(pa.record_batch(arrays, schema=schema))
    except sqlite3.Error as exc:
        raise TraceFormatError(f"{path}: unexpected content in {table} ({exc})") from exc
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise TraceFormatError(f"{path}: unexpected values in {table} ({exc})") from exc
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches, schema=schema)


_HOST_CATEGORY = " ".join(
    f"WHEN '{k}' THEN '{v}'" for k, v in vendors_ascend.DB_HOST_TYPE_CATEGORY.items()
)
_DTYPE_BYTES = (
    "MAP {" + ", ".join(f"'{k}': {v}" for k, v in vendors_ascend.HCCL_DTYPE_BYTES.items()) + "}"
)
_LEVEL_PREFIX = (
    "MAP {" + ", ".join(f"'{k}': '{v}'" for k, v in vendors_ascend.CANN_LEVEL_PREFIX.items()) + "}"
)
_PMU_ALIASES = (
    "MAP {" + ", ".join(f"'{k}': '{v}'" for k, v in vendors_ascend.PMU_NAME_ALIASES.items()) + "}"
)
_MASK = f"{_MASK32}"

# Some torch_npu versions store shapes under inputDtypes and types under inputShapes: shapes
# are digits and separators, types are words, so the content decides (on a sample).
_SWAPPED_SQL = """
SELECT coalesce(sum(CASE WHEN regexp_matches(sh.value, '[A-Za-z]') THEN 1 ELSE 0 END), 0)
    > coalesce(sum(CASE WHEN regexp_matches(dt.value, '[A-Za-z]') THEN 1 ELSE 0 END), 0)
FROM (SELECT * FROM pytorch_api WHERE inputShapes IS NOT NULL LIMIT 2000) p
LEFT JOIN string_ids sh ON sh.id = p.inputShapes
LEFT JOIN string_ids dt ON dt.id = p.inputDtypes
"""

_HOST_SQL = f"""
WITH stacks AS (
    SELECT c.id, string_agg(s.value, ';' || chr(13) || chr(10) ORDER BY c.stackDepth) AS stack
    FROM pytorch_callchains c LEFT JOIN string_ids s ON s.id = c.stack GROUP BY c.id
),
queue_ids AS (SELECT id, min(connectionId) AS connection_id FROM connection_ids GROUP BY id),
typed AS (
    SELECT p.*, n.value AS op_name, e.name AS type_name FROM pytorch_api p
    LEFT JOIN string_ids n ON n.id = p.name
    LEFT JOIN enum_api_type e ON e.id = p.type
)
SELECT p.op_name AS name,
    CASE WHEN p.type_name = 'queue' THEN
        CASE WHEN p.op_name = 'Enqueue' THEN 'enqueue' ELSE 'dequeue' END
    ELSE CASE p.type_name {_HOST_CATEGORY} ELSE coalesce(p.type_name, 'cpu_op') END END
        AS category,
    p.globalTid >> 32 AS pid, p.globalTid & {_MASK} AS tid, p.startNs AS start_ns,
    p.endNs - p.startNs AS dur_ns, p.rowid AS op_key,
    replace(sh.value, chr(13) || chr(10), '') AS shapes,
    replace(dt.value, chr(13) || chr(10), '') AS dtypes,
    json_merge_patch('{{}}', json_object('Sequence number', p.sequenceNumber,
        'Fwd thread id', p.fwdThreadId, 'Call stack', st.stack,
        'correlation_id', CASE WHEN p.type_name = 'queue' THEN q.connection_id END))::VARCHAR
        AS args
FROM typed p
LEFT JOIN string_ids sh ON sh.id = $shapes
LEFT JOIN string_ids dt ON dt.id = $dtypes
LEFT JOIN stacks st ON st.id = p.callchainId
LEFT JOIN queue_ids q ON q.id = p.connectionId
UNION ALL
SELECT coalesce(s.value, 'mstx'), 'mstx', m.globalTid >> 32, m.globalTid & {_MASK}, m.startNs,
    greatest(m.endNs - m.startNs, 0), -1 - m.rowid, NULL, NULL,
    json_merge_patch('{{}}', json_object('event_type', e.name))::VARCHAR
FROM mstx_events m
LEFT JOIN string_ids s ON s.id = m.message
LEFT JOIN enum_mstx_event_type e ON e.id = m.eventType
"""

_LINKS_SQL = """
SELECT DISTINCT p.rowid AS op_key, ci.connectionId AS connection_id
FROM pytorch_api p
JOIN connection_ids ci ON ci.id = p.connectionId
LEFT JOIN enum_api_type e ON e.id = p.type
WHERE coalesce(e.name, 'op') = 'op'
"""

_CANN_SQL = f"""
SELECT coalesce({_LEVEL_PREFIX}[e.name], coalesce(e.name, 'CANN')) || '@' || coalesce(s.value, '')
        AS name,
    c.globalTid >> 32 AS pid, c.globalTid & {_MASK} AS tid, c.startNs AS start_ns,
    c.endNs - c.startNs AS dur_ns, c.connectionId AS connection_id,
    json_merge_patch('{{}}', json_object('Thread Id', c.globalTid & {_MASK}, 'level', e.name,
        'connection_id', c.connectionId))::VARCHAR AS args
FROM cann_api c
LEFT JOIN string_ids s ON s.id = c.name
LEFT JOIN enum_api_type e ON e.id = c.type
"""

_TASKS_SQL = f"""
WITH
pmu AS (
    SELECT p.rowid AS seq, p.globalTaskId,
        coalesce({_PMU_ALIASES}[s.value], s.value) AS metric, p.value
    FROM task_pmu_info p LEFT JOIN string_ids s ON s.id = p.name
),
-- the database keeps times in ns; the CSVs (and our args) in us. A task's metrics as one
-- JSON object (what json_group_object makes), in the database's order whatever order the
-- join's threads hand its rows over in (json_group_object takes no ORDER BY)
metrics AS (
    SELECT seq, globalTaskId,
        CASE WHEN ends_with(metric, '_time') THEN metric || '_us' ELSE metric END AS name,
        CASE WHEN ends_with(metric, '_time') THEN value / 1000 ELSE value END AS value
    FROM pmu WHERE metric IS NOT NULL
),
counters AS (
    SELECT globalTaskId, CAST('{{' || string_agg(
        to_json(name) || ':' || CASE WHEN value IS NULL THEN 'null'::JSON ELSE to_json(value) END,
        ',' ORDER BY seq) || '}}' AS JSON) AS counters
    FROM metrics GROUP BY globalTaskId
),
compute AS (
    SELECT c.globalTaskId, n.value AS name, nullif(tt.value, 'N/A') AS core_type,
        nullif(ot.value, 'N/A') AS op_type, coalesce(c.blockDim, c.block_dim) AS block_dim,
        c.mixBlockDim AS mix_block_dim, c.waitNs / 1000.0 AS wait_us,
        nullif(nullif(trim(ish.value, '"'), 'N/A'), '') AS shapes,
        nullif(idt.value, 'N/A') AS dtypes, nullif(ifm.value, 'N/A') AS input_formats,
        nullif(nullif(trim(osh.value, '"'), 'N/A'), '') AS output_shapes,
        nullif(odt.value, 'N/A') AS output_dtypes, nullif(ofm.value, 'N/A') AS output_formats
    FROM compute_task_info c
    LEFT JOIN string_ids n ON n.id = c.name
    LEFT JOIN string_ids tt ON tt.id = c.taskType
    LEFT JOIN string_ids ot ON ot.id = c.opType
    LEFT JOIN string_ids ish ON ish.id = c.inputShapes
    LEFT JOIN string_ids idt ON idt.id = c.inputDataTypes
    LEFT JOIN string_ids ifm ON ifm.id = c.inputFormats
    LEFT JOIN string_ids osh ON osh.id = c.outputShapes
    LEFT JOIN string_ids odt ON odt.id = c.outputDataTypes
    LEFT JOIN string_ids ofm ON ofm.id = c.outputFormats
),
hccl AS (
    SELECT m.globalTaskId, n.value AS op_name,
        json_object('op_name', n.value, 'hccl_task_type', tt.value, 'plane_id', m.planeId,
        'src_rank', m.srcRank, 'dst_rank', m.dstRank, 'size', m.size,
        'transport_type', tr.name, 'link_type', lk.name, 'data_type', dt.name,
        'notify_id', m.notifyId) AS detail
    FROM communication_task_info m
    LEFT JOIN string_ids n ON n.id = m.name
    LEFT JOIN string_ids tt ON tt.id = m.taskType
    LEFT JOIN enum_hccl_transport_type tr ON tr.id = m.transportType
    LEFT JOIN enum_hccl_link_type lk ON lk.id = m.linkType
    LEFT JOIN enum_hccl_data_type dt ON dt.id = m.dataType
)
-- an HCCL sub-task keeps its hardware task type as name (Notify Wait, as the text exports show
-- it); where the db's type is not one (msprof's string table can give aclnn... for it) it is
-- named after the collective it belongs to (hcom_allGather_...)
SELECT coalesce(c.name,
        CASE WHEN hw.value IN {build.sql_list(vendors_ascend.COMM_SUBTASK_TYPES)} THEN hw.value
        ELSE h.op_name END, hw.value) AS name, hw.value AS hw_type, c.core_type, c.op_type,
    c.globalTaskId IS NOT NULL AS is_compute, h.globalTaskId IS NOT NULL AS is_comm_subtask,
    t.deviceId AS device, t.streamId AS stream, t.globalPid AS pid, t.startNs AS start_ns,
    t.endNs - t.startNs AS dur_ns, t.connectionId AS connection_id, NULL::BIGINT AS bytes,
    c.shapes, c.dtypes,
    json_merge_patch('{{}}', json_merge_patch(json_merge_patch(json_object(
        'task_id', t.taskId, 'context_id', t.contextId, 'model_id', t.modelId,
        'global_task_id', t.globalTaskId, 'block_dim', c.block_dim,
        'mix_block_dim', c.mix_block_dim, 'wait_us', c.wait_us,
        'input_formats', c.input_formats, 'output_shapes', c.output_shapes,
        'output_dtypes', c.output_dtypes, 'output_formats', c.output_formats),
        coalesce(h.detail, '{{}}')), coalesce(k.counters, '{{}}')))::VARCHAR AS args
FROM task t
LEFT JOIN string_ids hw ON hw.id = t.taskType
LEFT JOIN compute c ON c.globalTaskId = t.globalTaskId
LEFT JOIN hccl h ON h.globalTaskId = t.globalTaskId
LEFT JOIN counters k ON k.globalTaskId = t.globalTaskId
"""

# the device and stream of a collective are those of its tasks: set when building
_COMM_SQL = f"""
SELECT n.value AS name, NULL::SMALLINT AS device, -1 AS stream, NULL::BIGINT AS pid,
    o.startNs AS start_ns, o.endNs - o.startNs AS dur_ns, o.connectionId AS connection_id,
    CAST(o.count * {_DTYPE_BYTES}[dt.name] AS BIGINT) AS bytes,
    json_merge_patch('{{}}', json_object('data_type', dt.name, 'alg_type', alg.value,
        'count', CASE WHEN o.count = floor(o.count) THEN to_json(o.count::BIGINT)
            ELSE to_json(o.count) END,
        'group_name', grp.value, 'op_type', ot.value, 'relay', o.relay, 'retry', o.retry))::VARCHAR
        AS args
FROM communication_op o
LEFT JOIN string_ids n ON n.id = o.opName
LEFT JOIN enum_hccl_data_type dt ON dt.id = o.dataType
LEFT JOIN string_ids alg ON alg.id = o.algType
LEFT JOIN string_ids grp ON grp.id = o.groupName
LEFT JOIN string_ids ot ON ot.id = o.opType
"""

_COUNTERS_SQL = """
WITH memory AS (
    SELECT lower(coalesce(s.value, 'app')) AS component, m.* FROM memory_record m
    LEFT JOIN string_ids s ON s.id = m.component
),
npu AS (
    SELECT upper(coalesce(s.value, 'APP')) AS kind, m.* FROM npu_mem m
    LEFT JOIN string_ids s ON s.id = m.type
)
SELECT 'npu_memory' AS track, component || '/allocated_bytes' AS name, timestamp AS ts_ns,
    totalAllocated AS value FROM memory
UNION ALL SELECT 'npu_memory', component || '/reserved_bytes', timestamp, totalReserved
    FROM memory
UNION ALL SELECT 'npu_memory', component || '/active_bytes', timestamp, totalActive FROM memory
UNION ALL SELECT 'NPU MEM', kind || '/DDR/bytes', timestampNs, ddr FROM npu
UNION ALL SELECT 'NPU MEM', kind || '/HBM/bytes', timestampNs, hbm FROM npu
UNION ALL SELECT 'AI Core Freq', 'AI Core Freq/MHz', timestampNs, freq FROM aicore_freq
"""


def _staged(duck: duckdb.DuckDBPyConnection, sql: str, target: pa.Schema) -> pa.Table:
    return duck.sql(sql).to_arrow_table().select(target.names).cast(target)


def read_db(path: Path) -> tuple[build.Staged, dict[str, Any]]:
    """One rank's database in staging form, and the run facts it records (meta)."""
    try:
        return _read_db(path)
    except sqlite3.Error as exc:
        raise TraceFormatError(f"{path}: damaged or unexpected database ({exc})") from exc
    except duckdb.Error as exc:
        raise TraceFormatError(f"{path}: unexpected database content ({exc})") from exc


def _read_db(path: Path) -> tuple[build.Staged, dict[str, Any]]:
    with connect(path) as con:
        tables = _tables(con, path)
        if "TASK" not in tables and "PYTORCH_API" not in tables:
            raise TraceFormatError(
                f"{path}: not an Ascend profiler database (no TASK or PYTORCH_API table)"
            )
        raw = {name: _fetch(con, path, name, tables) for name in _RAW}
        facts = _facts(con, tables)
    cursor = duck(parallel=True)
    try:
        for name, table in raw.items():
            cursor.register(name.lower(), table)
        swapped = bool(cursor.execute(_SWAPPED_SQL).fetchall()[0][0])
        shapes, dtypes = (
            ("p.inputDtypes", "p.inputShapes")
            if swapped
            else (
                "p.inputShapes",
                "p.inputDtypes",
            )
        )
        host_sql = _HOST_SQL.replace("$shapes", shapes).replace("$dtypes", dtypes)
        staged = build.Staged(
            host=_staged(cursor, host_sql, build.HOST_SCHEMA),
            cann=_staged(cursor, _CANN_SQL, build.CANN_SCHEMA),
            tasks=_staged(cursor, _TASKS_SQL, build.TASK_SCHEMA),
            comm=_staged(cursor, _COMM_SQL, build.COMM_SCHEMA),
            links=_staged(cursor, _LINKS_SQL, build.LINK_SCHEMA),
            counters=_staged(
                cursor,
                f"SELECT * FROM ({_COUNTERS_SQL}) WHERE value IS NOT NULL",
                build.STAGED_COUNTER_SCHEMA,
            ),
        )
    finally:
        cursor.close()
    unplaced = build.unplaced_rows(staged)
    if unplaced:
        note = f"{path}: skipped {unplaced} rows without a name or a start time"
        staged = replace(staged, losses=(*staged.losses, note))
    return staged, facts


def _plain(value: Any) -> Any:
    """A database value as meta.json can hold it: a blob or a non-finite number is no value."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, int | float | str) or value is None else None


def _facts(con: sqlite3.Connection, tables: dict[str, set[str]]) -> dict[str, Any]:
    facts: dict[str, Any] = {}

    def rows(sql: str) -> list[list[Any]]:
        return [[_plain(v) for v in row] for row in con.execute(sql)]

    if "RANK_DEVICE_MAP" in tables:
        found = rows("SELECT rankId, deviceId FROM RANK_DEVICE_MAP LIMIT 1")
        if found:
            facts["rank"], facts["device"] = found[0]
    if "NPU_INFO" in tables:
        facts["npu"] = {
            str(i): str(name)
            for i, name in rows("SELECT id, name FROM NPU_INFO")
            if name is not None
        }
    if "HOST_INFO" in tables:
        found = rows("SELECT hostUid, hostName FROM HOST_INFO LIMIT 1")
        if found:
            facts["host"] = {"uid": found[0][0], "name": found[0][1]}
    if "META_DATA" in tables:
        facts["db_meta"] = {str(k): v for k, v in rows("SELECT name, value FROM META_DATA")}
    if "SESSION_TIME_INFO" in tables:
        found = rows("SELECT * FROM SESSION_TIME_INFO LIMIT 1")
        if found:
            facts["session_ns"] = found[0]
    if "COMMUNICATION_TASK_INFO" in tables and "dstRank" in tables["COMMUNICATION_TASK_INFO"]:
        found = rows(
            "SELECT max(r) FROM (SELECT srcRank AS r FROM COMMUNICATION_TASK_INFO "
            "UNION ALL SELECT dstRank FROM COMMUNICATION_TASK_INFO) "
            "WHERE typeof(r) = 'integer' AND r >= 0 AND r < 65536"
        )
        if found and found[0][0] is not None:
            facts["hccl_ranks"] = int(found[0][0]) + 1
    if "STEP_TIME" in tables:
        facts["step_time_ns"] = rows("SELECT * FROM STEP_TIME")
    return facts


def analysis_summaries(path: Path) -> dict[str, list[dict[str, Any]]]:
    """torch_npu's own step split from ``analysis.db`` (StepTraceTime), kept for comparison."""
    try:
        return _analysis_summaries(path)
    except sqlite3.Error as exc:
        raise TraceFormatError(f"{path}: damaged or unexpected database ({exc})") from exc


def _analysis_summaries(path: Path) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    with connect(path) as con:
        tables = _tables(con, path)
        for table, key in (("StepTraceTime", "step_trace_time"),):
            if table in tables:
                cursor = con.execute(f'SELECT * FROM "{table}"')
                names = [d[0] for d in cursor.description]
                result[key] = [
                    {name: _plain(value) for name, value in zip(names, row, strict=True)}
                    for row in cursor.fetchall()
                ]
    return result


# CommAnalyzerTime's columns (ms) -> the keys of the text export's communication info (ns).
_COMM_TIME_COLUMNS: Final = {
    "elapse_time": "elapse_ns",
    "transit_time": "transit_ns",
    "wait_time": "wait_ns",
    "synchronization_time": "synchronization_ns",
    "idle_time": "idle_ns",
}


def communication_info(path: Path) -> dict[str, dict[str, Any]]:
    """HCCL's time split per collective from ``analysis.db`` (CommAnalyzerTime): the same
    figures as the text export's communication.json, keyed by the op name."""
    try:
        with connect(path) as con:
            if "CommAnalyzerTime" not in _tables(con, path):
                return {}
            cursor = con.execute('SELECT * FROM "CommAnalyzerTime"')
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    except sqlite3.Error as exc:
        raise TraceFormatError(f"{path}: damaged or unexpected database ({exc})") from exc
    info: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = row.get("hccl_op_name")
        if not isinstance(name, str):
            continue
        scaled = {
            key: build.scaled(row.get(column), 1e6) for column, key in _COMM_TIME_COLUMNS.items()
        }
        record = {key: ns for key, ns in scaled.items() if ns is not None}
        info.setdefault(name.split("@")[0], record)
    return info
