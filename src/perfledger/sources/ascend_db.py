"""Read the Ascend SQLite exports: torch_npu's ``ascend_pytorch_profiler_{rank}.db`` and msprof's
``msprof_*.db``.

Both store times as integer ns and every text as an id into ``STRING_IDS``; the tables present
depend on the profiler level and version (and GUIs add their own), so each query is built from
the tables and columns actually found. The joins run inside SQLite; the results come back as
columns and are classified by the shared :func:`perfledger.sources.ascend_build.build_events`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from perfledger import vendors_ascend
from perfledger.errors import TraceFormatError
from perfledger.sources import ascend_build as build

_MASK32 = 0xFFFFFFFF


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


def _fetch(con: sqlite3.Connection, path: Path, sql: str, target: pa.Schema) -> pa.Table:
    """Run a query whose result columns are ``target``'s, as an Arrow table."""
    try:
        rows = con.execute(sql).fetchall()
    except sqlite3.Error as exc:
        raise TraceFormatError(f"{path}: unexpected database content ({exc})") from exc
    if not rows:
        return target.empty_table()
    columns = list(zip(*rows, strict=True))
    arrays = [
        # SQLite has no boolean type: flags come back as 0/1
        pa.array(column, type=pa.int8()).cast(pa.bool_())
        if pa.types.is_boolean(f.type)
        else pa.array(column, type=f.type)
        for column, f in zip(columns, target, strict=True)
    ]
    return pa.table(arrays, schema=target)


def _string(column: str, tables: dict[str, set[str]]) -> str:
    """SQL for the text behind a STRING_IDS id column."""
    if "STRING_IDS" not in tables:
        return f"CAST({column} AS TEXT)"
    return f"(SELECT value FROM STRING_IDS WHERE id = {column})"


def _optional(table: str, column: str, tables: dict[str, set[str]], alias: str) -> str:
    return f"{alias}.{column}" if column in tables.get(table, set()) else "NULL"


def _enum(table: str, column: str, tables: dict[str, set[str]]) -> str:
    if table not in tables:
        return f"CAST({column} AS TEXT)"
    return f"(SELECT name FROM {table} WHERE id = {column})"


def _cann_prefix_sql(level: str) -> str:
    cases = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in vendors_ascend.CANN_LEVEL_PREFIX.items())
    return f"CASE {level} {cases} ELSE coalesce({level}, 'CANN') END"


def _host(con: sqlite3.Connection, path: Path, tables: dict[str, set[str]]) -> pa.Table:
    if "PYTORCH_API" not in tables:
        return build.HOST_SCHEMA.empty_table()
    cols = tables["PYTORCH_API"]
    # Some torch_npu versions store shapes under inputDtypes and types under inputShapes:
    # shapes are digits and separators, types are words, so the content decides.
    shapes_col, dtypes_col = "inputShapes", "inputDtypes"
    if {"inputShapes", "inputDtypes"} <= cols:
        lettered = con.execute(
            "SELECT "
            f"sum({_string('inputShapes', tables)} GLOB '*[a-zA-Z]*'), "
            f"sum({_string('inputDtypes', tables)} GLOB '*[a-zA-Z]*') "
            "FROM (SELECT inputShapes, inputDtypes FROM PYTORCH_API "
            "WHERE inputShapes IS NOT NULL LIMIT 2000)"
        ).fetchone()
        if lettered and (lettered[0] or 0) > (lettered[1] or 0):
            shapes_col, dtypes_col = "inputDtypes", "inputShapes"
    crlf = "char(13) || char(10)"
    shapes = (
        f"replace({_string('p.' + shapes_col, tables)}, {crlf}, '')"
        if shapes_col in cols
        else "NULL"
    )
    dtypes = (
        f"replace({_string('p.' + dtypes_col, tables)}, {crlf}, '')"
        if dtypes_col in cols
        else "NULL"
    )
    stack = "NULL"
    if "callchainId" in cols and "PYTORCH_CALLCHAINS" in tables:
        stack = (
            "(SELECT group_concat(v, ';' || "
            + crlf
            + ") FROM (SELECT "
            + _string("c.stack", tables)
            + " AS v FROM PYTORCH_CALLCHAINS c WHERE c.id = p.callchainId "
            "ORDER BY c.stackDepth))"
        )
    queue_id = "NULL"
    if "CONNECTION_IDS" in tables:
        queue_id = (
            "(SELECT min(ci.connectionId) FROM CONNECTION_IDS ci WHERE ci.id = p.connectionId)"
        )
    type_name = _enum("ENUM_API_TYPE", "p.type", tables)
    name = _string("p.name", tables)
    category = (
        f"CASE WHEN {type_name} = 'queue' THEN "
        f"CASE WHEN {name} = 'Enqueue' THEN 'enqueue' ELSE 'dequeue' END "
        + " ".join(
            f"WHEN {type_name} = '{k}' THEN '{v}'"
            for k, v in vendors_ascend.DB_HOST_TYPE_CATEGORY.items()
        )
        + f" ELSE coalesce({type_name}, 'cpu_op') END"
    )
    seq = _optional("PYTORCH_API", "sequenceNumber", tables, "p")
    fwd = _optional("PYTORCH_API", "fwdThreadId", tables, "p")
    sql = f"""
        SELECT {name}, {category}, p.globalTid >> 32, p.globalTid & {_MASK32},
            CAST(p.startNs AS INTEGER), CAST(p.endNs AS INTEGER) - CAST(p.startNs AS INTEGER),
            p.rowid, {shapes}, {dtypes},
            json_object('Sequence number', {seq}, 'Fwd thread id', {fwd},
                'Call stack', {stack},
                'correlation_id', CASE WHEN {type_name} = 'queue' THEN {queue_id} END)
        FROM PYTORCH_API p
    """
    return _strip_null_args(_fetch(con, path, sql, build.HOST_SCHEMA))


def _links(con: sqlite3.Connection, path: Path, tables: dict[str, set[str]]) -> pa.Table:
    if "PYTORCH_API" not in tables or "CONNECTION_IDS" not in tables:
        return build.LINK_SCHEMA.empty_table()
    type_filter = ""
    if "ENUM_API_TYPE" in tables:
        type_filter = f"AND {_enum('ENUM_API_TYPE', 'p.type', tables)} = 'op'"
    sql = f"""
        SELECT DISTINCT p.rowid, ci.connectionId
        FROM PYTORCH_API p JOIN CONNECTION_IDS ci ON ci.id = p.connectionId
        WHERE p.connectionId IS NOT NULL {type_filter}
    """
    return _fetch(con, path, sql, build.LINK_SCHEMA)


def _cann(con: sqlite3.Connection, path: Path, tables: dict[str, set[str]]) -> pa.Table:
    if "CANN_API" not in tables:
        return build.CANN_SCHEMA.empty_table()
    level = _enum("ENUM_API_TYPE", "c.type", tables)
    sql = f"""
        SELECT {_cann_prefix_sql(level)} || '@' || {_string("c.name", tables)},
            c.globalTid >> 32, c.globalTid & {_MASK32}, c.startNs, c.endNs - c.startNs,
            c.connectionId,
            json_object('Thread Id', c.globalTid & {_MASK32}, 'level', {level},
                'connection_id', c.connectionId)
        FROM CANN_API c
    """
    return _fetch(con, path, sql, build.CANN_SCHEMA)


def _tasks(con: sqlite3.Connection, path: Path, tables: dict[str, set[str]]) -> pa.Table:
    if "TASK" not in tables:
        return build.TASK_SCHEMA.empty_table()
    has_compute = "COMPUTE_TASK_INFO" in tables
    has_comm = "COMMUNICATION_TASK_INFO" in tables
    ct = tables.get("COMPUTE_TASK_INFO", set())
    hw_type = _string("t.taskType", tables)

    def compute(column: str) -> str:
        return _string(f"ci.{column}", tables) if has_compute and column in ct else "NULL"

    def unquoted(column: str) -> str:
        value = compute(column)
        return f"nullif(nullif(trim({value}, '\"'), 'N/A'), '')"

    block_dim = next((f"ci.{c}" for c in ("blockDim", "block_dim", "blockNum") if c in ct), "NULL")
    mix_dim = "ci.mixBlockDim" if "mixBlockDim" in ct else "NULL"
    wait = "ci.waitNs / 1000.0" if "waitNs" in ct else "NULL"
    compute_join = (
        "LEFT JOIN COMPUTE_TASK_INFO ci ON ci.globalTaskId = t.globalTaskId" if has_compute else ""
    )
    comm_join = (
        "LEFT JOIN COMMUNICATION_TASK_INFO mi ON mi.globalTaskId = t.globalTaskId"
        if has_comm
        else ""
    )
    comm_args = "NULL"
    if has_comm:
        mc = tables["COMMUNICATION_TASK_INFO"]

        def comm(column: str, text: bool = False, enum: str | None = None) -> str:
            if column not in mc:
                return "NULL"
            if enum is not None:
                return _enum(enum, f"mi.{column}", tables)
            return _string(f"mi.{column}", tables) if text else f"mi.{column}"

        comm_args = f"""CASE WHEN mi.globalTaskId IS NOT NULL THEN json_object(
            'op_name', {comm("name", text=True)},
            'hccl_task_type', {comm("taskType", text=True)},
            'plane_id', {comm("planeId")}, 'src_rank', {comm("srcRank")},
            'dst_rank', {comm("dstRank")}, 'size', {comm("size")},
            'transport_type', {comm("transportType", enum="ENUM_HCCL_TRANSPORT_TYPE")},
            'link_type', {comm("linkType", enum="ENUM_HCCL_LINK_TYPE")},
            'data_type', {comm("dataType", enum="ENUM_HCCL_DATA_TYPE")},
            'notify_id', {comm("notifyId")}) END"""
    is_compute = "ci.globalTaskId IS NOT NULL" if has_compute else "0"
    is_comm = "mi.globalTaskId IS NOT NULL" if has_comm else "0"
    sql = f"""
        SELECT coalesce({compute("name")}, {hw_type}), {hw_type},
            nullif({compute("taskType")}, 'N/A'), nullif({compute("opType")}, 'N/A'),
            {is_compute}, {is_comm}, t.deviceId, t.streamId, t.globalPid, t.startNs,
            t.endNs - t.startNs, t.connectionId, NULL,
            {unquoted("inputShapes")}, nullif({compute("inputDataTypes")}, 'N/A'),
            json_patch(json_object(
                'task_id', t.taskId, 'context_id', t.contextId, 'model_id', t.modelId,
                'global_task_id', t.globalTaskId, 'block_dim', {block_dim},
                'mix_block_dim', {mix_dim}, 'wait_us', {wait},
                'input_formats', nullif({compute("inputFormats")}, 'N/A'),
                'output_shapes', {unquoted("outputShapes")},
                'output_dtypes', nullif({compute("outputDataTypes")}, 'N/A'),
                'output_formats', nullif({compute("outputFormats")}, 'N/A')),
                coalesce({comm_args}, '{{}}'))
        FROM TASK t {compute_join} {comm_join}
    """
    tasks = _strip_null_args(_fetch(con, path, sql, build.TASK_SCHEMA))
    return _with_pmu(con, path, tables, tasks)


def _with_pmu(
    con: sqlite3.Connection, path: Path, tables: dict[str, set[str]], tasks: pa.Table
) -> pa.Table:
    """Merge TASK_PMU_INFO's hardware counters into the tasks' args, named as in the CSVs."""
    if "TASK_PMU_INFO" not in tables or tasks.num_rows == 0:
        return tasks
    schema = pa.schema(
        [("global_task_id", pa.int64()), ("metric", pa.string()), ("value", pa.float64())]
    )
    pmu = _fetch(
        con,
        path,
        f"SELECT globalTaskId, {_string('name', tables)}, value FROM TASK_PMU_INFO",
        schema,
    )
    aliases = ", ".join(f"'{k}': '{v}'" for k, v in vendors_ascend.PMU_NAME_ALIASES.items())
    duck = duckdb.connect()
    try:
        duck.register("tasks", tasks)
        duck.register("pmu", pmu)
        merged = duck.sql(
            f"""
            WITH named AS (
                SELECT global_task_id,
                    coalesce(MAP {{{aliases}}}[metric], metric) AS metric, value FROM pmu
            ),
            -- the database keeps times in ns; the CSVs (and our args) in us
            keyed AS (
                SELECT global_task_id,
                    CASE WHEN ends_with(metric, '_time') THEN metric || '_us' ELSE metric END
                        AS key,
                    CASE WHEN ends_with(metric, '_time') THEN value / 1000 ELSE value END AS value
                FROM named
            ),
            per_task AS (
                SELECT global_task_id, json_group_object(key, value) AS counters
                FROM keyed GROUP BY global_task_id
            )
            SELECT t.* EXCLUDE (args),
                CASE WHEN p.counters IS NULL THEN t.args
                    ELSE json_merge_patch(coalesce(t.args, '{{}}'), p.counters)::VARCHAR END
                    AS args
            FROM tasks t LEFT JOIN per_task p
                ON p.global_task_id = TRY_CAST(json_extract(t.args, '$.global_task_id') AS BIGINT)
            """
        ).to_arrow_table()
    finally:
        duck.close()
    return merged.select(build.TASK_SCHEMA.names).cast(build.TASK_SCHEMA)


def _comm(con: sqlite3.Connection, path: Path, tables: dict[str, set[str]]) -> pa.Table:
    if "COMMUNICATION_OP" not in tables:
        return build.COMM_SCHEMA.empty_table()
    oc = tables["COMMUNICATION_OP"]

    def col(column: str, text: bool = False, enum: str | None = None) -> str:
        if column not in oc:
            return "NULL"
        if enum is not None:
            return _enum(enum, f"o.{column}", tables)
        return _string(f"o.{column}", tables) if text else f"o.{column}"

    sizes = " ".join(f"WHEN '{k}' THEN {v}" for k, v in vendors_ascend.HCCL_DTYPE_BYTES.items())
    dtype = col("dataType", enum="ENUM_HCCL_DATA_TYPE")
    device = (
        "(SELECT min(t.deviceId) FROM TASK t WHERE t.connectionId = o.connectionId)"
        if "TASK" in tables
        else "0"
    )
    sql = f"""
        SELECT {col("opName", text=True)}, coalesce({device}, 0), -1,
            NULL, o.startNs, o.endNs - o.startNs, o.connectionId,
            CAST({col("count")} * (CASE {dtype} {sizes} END) AS INTEGER),
            json_object('data_type', {dtype}, 'alg_type', {col("algType", text=True)},
                'count', {col("count")}, 'group_name', {col("groupName", text=True)},
                'op_type', {col("opType", text=True)}, 'relay', {col("relay")},
                'retry', {col("retry")})
        FROM COMMUNICATION_OP o
    """
    return _strip_null_args(_fetch(con, path, sql, build.COMM_SCHEMA))


def _mstx(con: sqlite3.Connection, path: Path, tables: dict[str, set[str]]) -> pa.Table:
    """msprof's MSTX ranges (user annotations from the application) as host events."""
    if "MSTX_EVENTS" not in tables:
        return build.HOST_SCHEMA.empty_table()
    sql = f"""
        SELECT coalesce({_string("m.message", tables)}, 'mstx'), 'mstx',
            m.globalTid >> 32, m.globalTid & {_MASK32}, m.startNs,
            max(m.endNs - m.startNs, 0), -1 - m.rowid, NULL, NULL,
            json_object('event_type', {_enum("ENUM_MSTX_EVENT_TYPE", "m.eventType", tables)})
        FROM MSTX_EVENTS m
    """
    return _fetch(con, path, sql, build.HOST_SCHEMA)


def _counters(con: sqlite3.Connection, path: Path, tables: dict[str, set[str]]) -> pa.Table:
    selects: list[str] = []
    if "MEMORY_RECORD" in tables:
        for metric, column in (
            ("allocated_bytes", "totalAllocated"),
            ("reserved_bytes", "totalReserved"),
            ("active_bytes", "totalActive"),
        ):
            if column in tables["MEMORY_RECORD"]:
                selects.append(
                    "SELECT 'npu_memory', lower(coalesce("
                    + _string("component", tables)
                    + f", 'app')) || '/{metric}', timestamp, {column} FROM MEMORY_RECORD"
                )
    if "NPU_MEM" in tables:
        kind = f"upper(coalesce({_string('type', tables)}, 'APP'))"
        selects += [
            f"SELECT 'NPU MEM', {kind} || '/DDR/bytes', timestampNs, ddr FROM NPU_MEM",
            f"SELECT 'NPU MEM', {kind} || '/HBM/bytes', timestampNs, hbm FROM NPU_MEM",
        ]
    if "AICORE_FREQ" in tables:
        selects.append(
            "SELECT 'AI Core Freq', 'AI Core Freq/MHz', CAST(timestampNs AS INTEGER), freq "
            "FROM AICORE_FREQ"
        )
    if not selects:
        return build.STAGED_COUNTER_SCHEMA.empty_table()
    return _fetch(con, path, " UNION ALL ".join(selects), build.STAGED_COUNTER_SCHEMA)


def _strip_null_args(table: pa.Table) -> pa.Table:
    """Drop the null members SQLite's json_object keeps (``"wait_us": null``)."""
    duck = duckdb.connect()
    try:
        duck.register("staged", table)
        cleaned = duck.sql(
            "SELECT * EXCLUDE (args), json_merge_patch('{}', args)::VARCHAR AS args FROM staged"
        ).to_arrow_table()
    finally:
        duck.close()
    return cleaned.select(table.schema.names).cast(table.schema)


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
        host = _host(con, path, tables)
        mstx = _mstx(con, path, tables)
        staged = build.Staged(
            host=pa.concat_tables([host, mstx]) if mstx.num_rows else host,
            cann=_cann(con, path, tables),
            tasks=_tasks(con, path, tables),
            comm=_comm(con, path, tables),
            links=_links(con, path, tables),
            counters=_counters(con, path, tables),
        )
        facts = _facts(con, tables)
    return staged, facts


def _facts(con: sqlite3.Connection, tables: dict[str, set[str]]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    if "RANK_DEVICE_MAP" in tables:
        row = con.execute("SELECT rankId, deviceId FROM RANK_DEVICE_MAP LIMIT 1").fetchone()
        if row is not None:
            facts["rank"], facts["device"] = row
    if "NPU_INFO" in tables:
        facts["npu"] = {str(i): name for i, name in con.execute("SELECT id, name FROM NPU_INFO")}
    if "HOST_INFO" in tables:
        row = con.execute("SELECT hostUid, hostName FROM HOST_INFO LIMIT 1").fetchone()
        if row is not None:
            facts["host"] = {"uid": row[0], "name": row[1]}
    if "META_DATA" in tables:
        facts["db_meta"] = dict(con.execute("SELECT name, value FROM META_DATA"))
    if "SESSION_TIME_INFO" in tables:
        row = con.execute("SELECT * FROM SESSION_TIME_INFO LIMIT 1").fetchone()
        if row is not None:
            facts["session_ns"] = list(row)
    if "COMMUNICATION_TASK_INFO" in tables and "dstRank" in tables["COMMUNICATION_TASK_INFO"]:
        row = con.execute(
            "SELECT max(r) FROM (SELECT srcRank AS r FROM COMMUNICATION_TASK_INFO "
            "UNION ALL SELECT dstRank FROM COMMUNICATION_TASK_INFO) WHERE r < 65536"
        ).fetchone()
        if row is not None and row[0] is not None:
            facts["hccl_ranks"] = int(row[0]) + 1
    if "STEP_TIME" in tables:
        facts["step_time_ns"] = [list(r) for r in con.execute("SELECT * FROM STEP_TIME")]
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
                result[key] = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return result
