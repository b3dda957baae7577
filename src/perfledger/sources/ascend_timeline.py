"""Read the Ascend timelines: torch_npu's ``trace_view.json`` and msprof's ``msprof_*.json``.

Both are Chrome-trace documents written as a bare JSON array, with ``ts`` as a *string* of epoch
microseconds (``"1736412474725417.508"``) and ``dur`` as float microseconds. Events are decoded
with typed msgspec structs whose variable fields stay raw JSON, then converted and classified in
one DuckDB pass (no Python work per event beyond building the columns).
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import duckdb
import msgspec
import pyarrow as pa

from perfledger.duck import duck
from perfledger.errors import TraceFormatError, reason
from perfledger.model import vendors_ascend
from perfledger.sources import ascend_build as build

# Process names of the timeline → what their events are.
PROCESS_ROLES: Final = {
    "Python": "host",
    "PyTorch": "host",
    "CANN": "cann",
    "AscendCL": "cann",
    "Runtime": "cann",
    "Ascend Hardware": "device",
    "Task Scheduler": "device",
    "HCCL": "hccl",
    "Communication": "hccl",
    "Overlap Analysis": "derived",  # torch_npu's own accounting: recomputed, never imported
}

_EMPTY_RAW: Final = msgspec.Raw(b"")


class _Event(msgspec.Struct):
    """The fields of a timeline event; those whose JSON type varies stay raw."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    pid: msgspec.Raw = _EMPTY_RAW
    tid: msgspec.Raw = _EMPTY_RAW
    ts: msgspec.Raw = _EMPTY_RAW
    dur: msgspec.Raw = _EMPTY_RAW
    id: msgspec.Raw = _EMPTY_RAW
    args: msgspec.Raw = _EMPTY_RAW


_RAW_COLUMNS: Final = ("pid", "tid", "ts", "dur", "id", "args")


# Between two events of the array: "}, {" (torch_npu), "},{" or "},\n{" (other writers).
_BETWEEN_EVENTS: Final = re.compile(rb"\}\s*,\s*\{")
# Small pieces keep the peak low at the same speed (a few MB: one piece's Python objects at a
# time).
CHUNK_BYTES: Final = 4 << 20


def _array_end(data: mmap.mmap) -> tuple[int, bool]:
    """Where the array's body ends, and whether the array is closed (``]`` then nothing).

    A file cut short has no closing bracket: its body runs to the end of the data.
    """
    last = data.rfind(b"]")
    if last >= 0 and not data[last + 1 :].strip():
        return last, True
    return len(data), False


def _event_runs(data: mmap.mmap, size: int, end: int) -> Iterator[tuple[int, int]]:
    """Spans of about ``size`` bytes of a JSON array's body (up to ``end``), cut between two
    events.

    ``data[start:end]`` holds whole events (``{...}, {...}``). A cut is made at the first
    ``}, {`` after ``size`` bytes; should that text lie inside a string, the span does not decode
    and the caller joins it with the next one.
    """
    start = data.find(b"[") + 1
    while start < end:
        cut = _BETWEEN_EVENTS.search(data, start + size, end) if start + size < end else None
        if cut is None:
            yield start, end
            return
        yield start, cut.start() + 1  # keep the closing brace here, the opening one next
        start = cut.end() - 1


_UNREADABLE: Final = (msgspec.ValidationError, UnicodeDecodeError, RecursionError)
_EVENT_DECODER: Final = msgspec.json.Decoder(_Event)
_EVENTS_DECODER: Final = msgspec.json.Decoder(list[_Event])


@dataclass
class _Damage:
    """What decoding one timeline skipped."""

    malformed: int = 0  # events that are not JSON objects of the expected types
    ended_early: bool = False  # the file ends inside an event
    events: int = 0  # events read

    def notes(self, path: Path) -> list[str]:
        notes = []
        if self.malformed:
            notes.append(f"{path}: {self.malformed:,} malformed events were skipped")
        if self.ended_early:
            notes.append(
                f"{path}: the file ends early after {self.events:,} events: the rest of the "
                "timeline is lost"
            )
        return notes


def _decode_events_one_by_one(body: bytes, last: bool, damage: _Damage) -> list[_Event]:
    """The events of a span that did not decode whole, each on its own: what does not decode
    is counted (``damage``) and skipped; ``last``: the span ends the file's data."""
    bounds = [0, *(m.start() + 1 for m in _BETWEEN_EVENTS.finditer(body)), len(body)]
    events: list[_Event] = []
    pending: int | None = None
    for index in range(len(bounds) - 1):
        begin = bounds[index] if pending is None else pending
        piece = body[begin : bounds[index + 1]].strip().removeprefix(b",").strip()
        is_last = index == len(bounds) - 2
        try:
            events.append(_EVENT_DECODER.decode(piece))
        except msgspec.DecodeError as exc:
            if "truncated" in str(exc) and not is_last:
                pending = begin  # "}, {" inside a string: join the next piece
                continue
            if is_last and last and "truncated" in str(exc):
                damage.ended_early = True
            else:
                damage.malformed += 1
        except _UNREADABLE:
            damage.malformed += 1
        pending = None
    return events


def _utf8_events(events: list[_Event], damage: _Damage) -> list[_Event]:
    """The events whose raw fields are UTF-8 text (msgspec does not check raw JSON)."""
    kept = []
    for event in events:
        try:
            for column in _RAW_COLUMNS:
                bytes(getattr(event, column)).decode("utf-8")
        except UnicodeDecodeError:
            damage.malformed += 1
            continue
        kept.append(event)
    return kept


def _raw_columns(events: list[_Event], damage: _Damage) -> pa.Table:
    columns: dict[str, pa.Array] = {
        "ph": pa.array([e.ph for e in events], pa.string()),
        "name": pa.array([e.name for e in events], pa.string()),
        "cat": pa.array([e.cat for e in events], pa.string()),
    }
    try:
        for column in _RAW_COLUMNS:
            raw = pa.array([bytes(getattr(e, column)) for e in events], pa.binary())
            columns[column] = raw.cast(pa.string())
    except pa.ArrowInvalid:
        return _raw_columns(_utf8_events(events, damage), damage)
    return pa.table(columns)


def decode_timeline(path: Path, chunk_bytes: int = CHUNK_BYTES) -> pa.Table:
    """One timeline file as a table of raw columns (strings), decoded piece by piece.

    Decoding a few MB at a time keeps one piece's Python objects alive instead of the whole
    file's (a 100 MB timeline is about 500 000 events); what stays is their Arrow columns.
    Malformed events are skipped, and a file cut short is read up to where it ends
    (:func:`read_timeline` reports both).
    """
    return _decode_timeline(path, chunk_bytes)[0]


def _decode_timeline(path: Path, chunk_bytes: int) -> tuple[pa.Table, list[str]]:
    try:
        with path.open("rb") as stream:
            if os.fstat(stream.fileno()).st_size == 0:
                raise TraceFormatError(f"{path}: empty file")
            # mapped, not read: the file's pages are the kernel's to drop, not our memory
            data = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return _decode_mapped(data, path, chunk_bytes)
    finally:
        data.close()


def _decode_mapped(data: mmap.mmap, path: Path, chunk_bytes: int) -> tuple[pa.Table, list[str]]:
    first_char = re.compile(rb"\S").search(data)
    if first_char is None:
        raise TraceFormatError(f"{path}: empty file")
    if first_char.group() != b"[":
        raise TraceFormatError(f"{path}: not a JSON array of trace events")
    end, closed = _array_end(data)
    damage = _Damage()
    tables: list[pa.Table] = []
    pending: int | None = None  # start of a span that did not decode alone
    for start, stop in _event_runs(data, chunk_bytes, end):
        first = start if pending is None else pending
        last = stop == end
        try:
            events = _EVENTS_DECODER.decode(b"[" + data[first:stop] + b"]")
        except msgspec.DecodeError as exc:
            if "truncated" in str(exc) and not last:
                # the cut fell inside a string (or a string never ends): join the next span
                pending = first
                continue
            events = _decode_events_one_by_one(data[first:stop], not closed and last, damage)
        except _UNREADABLE:
            events = _decode_events_one_by_one(data[first:stop], not closed and last, damage)
        pending = None
        damage.events += len(events)
        if events:
            tables.append(_raw_columns(events, damage))
    if not tables:
        notes = "; ".join(note.removeprefix(f"{path}: ") for note in damage.notes(path))
        raise TraceFormatError(f"{path}: no timeline events" + (f" ({notes})" if notes else ""))
    return (pa.concat_tables(tables) if len(tables) > 1 else tables[0]), damage.notes(path)


def _roles_sql() -> str:
    pairs = ", ".join(f"'{name}': '{role}'" for name, role in PROCESS_ROLES.items())
    return "MAP {" + pairs + "}"


def _dtype_bytes_sql() -> str:
    pairs = ", ".join(f"'{k}': {v}" for k, v in vendors_ascend.HCCL_DTYPE_BYTES.items())
    return "MAP {" + pairs + "}"


_TS_NS = (
    "CAST(round(coalesce(TRY_CAST(trim(ts, '\"') AS DECIMAL(38, 6)), "
    "TRY_CAST(TRY_CAST(trim(ts, '\"') AS DOUBLE) AS DECIMAL(38, 6))) * 1000) AS BIGINT)"
)

_PREPARE_SQL = f"""
CREATE TEMP TABLE ev AS
SELECT ph, name, cat,
    TRY_CAST(trim(pid, '"') AS BIGINT) AS pid,
    TRY_CAST(trim(tid, '"') AS BIGINT) AS tid,
    {_TS_NS} AS ts_ns,
    CAST(round(TRY_CAST(trim(dur, '"') AS DOUBLE) * 1000) AS BIGINT) AS dur_ns,
    nullif(trim(id, '"'), '') AS flow_id,
    CASE WHEN starts_with(args, '{{') THEN args END AS args
FROM raw;

CREATE TEMP TABLE procs AS
SELECT pid,
    any_value(json_extract_string(args, '$.name')) FILTER (WHERE name = 'process_name') AS pname,
    any_value(json_extract_string(args, '$.labels')) FILTER (WHERE name = 'process_labels')
        AS plabel
FROM ev WHERE ph = 'M' GROUP BY pid;

CREATE TEMP TABLE threads AS
SELECT pid, tid, any_value(json_extract_string(args, '$.name')) AS tname
FROM ev WHERE ph = 'M' AND name = 'thread_name' GROUP BY pid, tid;

CREATE TEMP VIEW xev AS
SELECT e.*, coalesce(roles[p.pname],
        CASE WHEN e.cat IN {build.sql_list(tuple(vendors_ascend.HOST_CATEGORY_KIND))}
        THEN 'host' END) AS role,
    TRY_CAST(regexp_extract(p.plabel, '(\\d+)', 1) AS SMALLINT) AS label_device,
    t.tname
FROM ev e
LEFT JOIN procs p USING (pid)
LEFT JOIN threads t USING (pid, tid)
WHERE e.ph = 'X' AND e.ts_ns IS NOT NULL;
"""

_HOST_SQL = """
SELECT name, coalesce(cat, '') AS category, pid, tid, ts_ns AS start_ns,
    coalesce(dur_ns, 0) AS dur_ns,
    (row_number() OVER (ORDER BY ts_ns, tid, name, dur_ns DESC) - 1)::BIGINT AS op_key,
    replace(json_extract_string(args, '$."Input Dims"'), chr(13) || chr(10), '') AS shapes,
    replace(json_extract_string(args, '$."Input type"'), chr(13) || chr(10), '') AS dtypes,
    args
FROM xev WHERE role = 'host'
"""

_CANN_SQL = """
SELECT name,
    coalesce((SELECT min(pid) FROM xev WHERE role = 'host'), pid) AS pid,
    coalesce(TRY_CAST(json_extract_string(args, '$."Thread Id"') AS BIGINT), tid) AS tid,
    ts_ns AS start_ns, coalesce(dur_ns, 0) AS dur_ns,
    TRY_CAST(json_extract_string(args, '$.connection_id') AS BIGINT) AS connection_id,
    args
FROM xev WHERE role = 'cann'
"""

# A task without a connection id in its args is linked through the HostToDevice flow whose
# end lies on it: the flow's start lies on the CANN call that launched it.
_TASKS_SQL = """
WITH
flow_end AS (
    SELECT flow_id, pid, tid, ts_ns FROM ev WHERE ph = 'f' AND cat = 'HostToDevice'
),
flow_start AS (
    SELECT flow_id, pid, tid, ts_ns FROM ev WHERE ph = 's' AND cat = 'HostToDevice'
),
cann_at AS (
    SELECT pid, tid, ts_ns,
        min(TRY_CAST(json_extract_string(args, '$.connection_id') AS BIGINT)) AS connection_id
    FROM xev WHERE role = 'cann' GROUP BY pid, tid, ts_ns
),
flow_link AS (
    SELECT fe.pid, fe.tid, fe.ts_ns, min(c.connection_id) AS connection_id
    FROM flow_end fe JOIN flow_start fs USING (flow_id)
    JOIN cann_at c ON c.pid = fs.pid AND c.tid = fs.tid AND c.ts_ns = fs.ts_ns
    GROUP BY fe.pid, fe.tid, fe.ts_ns
)
SELECT x.name, json_extract_string(x.args, '$."Task Type"') AS hw_type,
    NULL::VARCHAR AS core_type, NULL::VARCHAR AS op_type,
    false AS is_compute, false AS is_comm_subtask,
    coalesce(x.label_device, $device)::SMALLINT AS device,
    coalesce(x.tid, TRY_CAST(json_extract_string(x.args, '$."Physic Stream Id"') AS BIGINT))
        AS stream,
    x.pid, x.ts_ns AS start_ns, coalesce(x.dur_ns, 0) AS dur_ns,
    coalesce(TRY_CAST(json_extract_string(x.args, '$.connection_id') AS BIGINT),
        fl.connection_id) AS connection_id,
    TRY_CAST(json_extract_string(x.args, '$."data size(Byte)"') AS BIGINT) AS bytes,
    NULL::VARCHAR AS shapes, NULL::VARCHAR AS dtypes, x.args
FROM xev x
LEFT JOIN flow_link fl ON fl.pid = x.pid AND fl.tid = x.tid AND fl.ts_ns = x.ts_ns
WHERE x.role = 'device'
"""

_COMM_SQL = """
SELECT name, coalesce(label_device, $device)::SMALLINT AS device, -1::BIGINT AS stream, pid,
    ts_ns AS start_ns, coalesce(dur_ns, 0) AS dur_ns,
    TRY_CAST(json_extract_string(args, '$.connection_id') AS BIGINT) AS connection_id,
    CAST(TRY_CAST(json_extract_string(args, '$.count') AS DOUBLE)
        * dtype_bytes[json_extract_string(args, '$.data_type')] AS BIGINT) AS bytes,
    args
FROM xev
WHERE role = 'hccl'
    AND (tname ILIKE '%communication%' OR (tname IS NULL AND json_exists(args, '$.alg_type')))
"""

# torch_to_npu flows start on the host operator that issued the work and end on the device
# task (or collective); the innermost operator starting at the flow's start is the issuer.
_LINKS_SQL = """
WITH
fs AS (SELECT flow_id, pid, tid, ts_ns FROM ev WHERE ph = 's' AND cat = 'async_npu'),
fe AS (SELECT flow_id, pid, tid, ts_ns FROM ev WHERE ph = 'f' AND cat = 'async_npu'),
op_at AS (
    SELECT pid, tid, start_ns, arg_min(op_key, dur_ns) AS op_key FROM host_staged
    GROUP BY pid, tid, start_ns
),
work_at AS (
    SELECT pid, tid, ts_ns,
        min(TRY_CAST(json_extract_string(args, '$.connection_id') AS BIGINT)) AS connection_id
    FROM xev WHERE role IN ('device', 'hccl') GROUP BY pid, tid, ts_ns
)
SELECT DISTINCT o.op_key, w.connection_id
FROM fs JOIN fe USING (flow_id)
JOIN op_at o ON o.pid = fs.pid AND o.tid = fs.tid AND o.start_ns = fs.ts_ns
JOIN work_at w ON w.pid = fe.pid AND w.tid = fe.tid AND w.ts_ns = fe.ts_ns
WHERE w.connection_id IS NOT NULL
"""

# Counter events: one counter per numeric argument; KB/MB amounts become bytes.
_COUNTERS_SQL = """
WITH keyed AS (
    SELECT coalesce(p.pname, 'npu') AS track, e.name AS event, e.ts_ns, e.args,
        unnest(json_keys(e.args)) AS key
    FROM ev e LEFT JOIN procs p USING (pid)
    WHERE e.ph = 'C' AND e.args IS NOT NULL AND e.ts_ns IS NOT NULL
)
SELECT track,
    event || '/' || CASE key WHEN 'KB' THEN 'bytes' WHEN 'MB' THEN 'bytes' ELSE key END AS name,
    ts_ns,
    TRY_CAST(json_extract_string(args, '$."' || key || '"') AS DOUBLE)
        * CASE key WHEN 'KB' THEN 1024 WHEN 'MB' THEN 1048576 ELSE 1 END AS value
FROM keyed
WHERE NOT ends_with(lower(key), 'id')
"""


# Spans left out for want of a time to place them at ("ts": "x", null, missing).
_UNTIMED_SQL = "SELECT count(*) FROM ev WHERE ph = 'X' AND ts_ns IS NULL"


def _query(con: duckdb.DuckDBPyConnection, sql: str, target: pa.Schema, device: int) -> pa.Table:
    sql = sql.replace("$device", str(int(device)))
    table = con.sql(sql).to_arrow_table()
    return table.select(target.names).cast(target)


def read_timeline(paths: Sequence[Path], default_device: int) -> build.Staged:
    """Read one rank's timeline (several files when msprof split it into slices).

    Args:
        paths: the timeline files of one rank.
        default_device: the device index when the timeline does not name one.
    """
    decoded = [_decode_timeline(path, CHUNK_BYTES) for path in paths]
    losses = tuple(note for _, notes in decoded for note in notes)
    raw = pa.concat_tables([t for t, _ in decoded]) if len(decoded) > 1 else decoded[0][0]
    del decoded
    con = duck(parallel=True)
    try:
        con.register("raw", raw)
        con.execute(
            _PREPARE_SQL.replace("roles[", f"{_roles_sql()}[").replace(
                "dtype_bytes[", f"{_dtype_bytes_sql()}["
            )
        )
        # the parsed copy in DuckDB replaces the raw text from here on
        con.unregister("raw")
        del raw
        host = _query(con, _HOST_SQL, build.HOST_SCHEMA, default_device)
        con.register("host_staged", host)
        cann = _query(con, _CANN_SQL, build.CANN_SCHEMA, default_device)
        tasks = _query(con, _TASKS_SQL, build.TASK_SCHEMA, default_device)
        comm = _query(
            con,
            _COMM_SQL.replace("dtype_bytes[", f"{_dtype_bytes_sql()}["),
            build.COMM_SCHEMA,
            default_device,
        )
        links = _query(con, _LINKS_SQL, build.LINK_SCHEMA, default_device)
        counters = _query(con, _COUNTERS_SQL, build.STAGED_COUNTER_SCHEMA, default_device)
        untimed = con.sql(_UNTIMED_SQL).fetchall()[0][0]
    except duckdb.Error as exc:
        raise TraceFormatError(f"{paths[0]}: unexpected timeline content ({reason(exc)})") from exc
    finally:
        con.close()
    if host.num_rows + cann.num_rows + tasks.num_rows + comm.num_rows == 0:
        raise TraceFormatError(f"{paths[0]}: no timeline events")
    if untimed:
        losses += (f"{paths[0]}: skipped {untimed} events without a readable start time",)
    return build.Staged(
        host=host,
        cann=cann,
        tasks=tasks,
        comm=comm,
        links=links,
        counters=counters,
        losses=losses,
    )
