"""Operator and host-API analyses: op summary, op statistics, kernel details, API statistics.

Every function takes a canonical events table (:data:`perfledger.model.schema.EVENTS_SCHEMA`, the
``step`` column already assigned) and returns an Arrow table with the schema below. Times are
integer ns; figures aggregate every row of the table given (call per rank for per-rank figures).

``op_summary`` on a trace with device tasks (:data:`OP_SUMMARY_SCHEMA`), one row per device task
(kernel, comm, memcpy, memset), sorted by rank, start_ns, device, stream:
    rank, device, stream, step, kind, name, start_ns, dur_ns,
    wait_ns    -- gap since the previous task on the same (rank, device, stream) ended; 0 for the
                  first task and for a task that starts before its predecessors ended,
    host_op    -- name of the cpu_op that launched the task (null when unknown),
    launch_ns  -- start of the runtime call that launched it (-1 when unknown),
    bytes      -- bytes the task moved (-1 when unknown),
    shapes, dtypes -- input shapes and types of the host op (null when unknown).

The launching host op: the runtime/sync call with the task's (rank, correlation) gives an
external id (the task's own external id when the call is missing); the cpu_op of that rank with
that external id is the host op (the shortest one if several share it) — unless the launch call
lies inside another cpu_op of its thread: then (an id that links to an unrelated operator) and
on older traces that link operators only by time, the host op is the innermost cpu_op running
on the launching thread when the call began (the ``relinked_tasks`` quality check counts the
links corrected so).

The linkage (:func:`link_device_tasks`, the slowest step of the operator tables) is shared by
op_summary, kernel_details and the advisor: a caller that needs more than one of them links once
and passes the linked table to each.

``op_summary`` on a host-only trace (no device task at all; :data:`HOST_OP_SUMMARY_SCHEMA`), one
row per cpu_op, sorted by rank, start_ns, stream:
    rank, device (-1), stream (host thread), step, kind, name, start_ns, dur_ns,
    self_ns    -- dur_ns minus the time covered by its direct children on the same thread,
    shapes, dtypes.

``op_statistic`` (:data:`OP_STATISTIC_SCHEMA`), one row per (op type, kind), sorted by total_ns
descending, then name and kind:
    name (the host op that launched the task when known, else the task name; on host-only
    traces the cpu_op name), kind, count, total_ns, min_ns, avg_ns, max_ns, ratio (share of the
    sum of total_ns over all rows). Device traces measure task durations, host-only traces
    operator self time (so that nested operators are not counted twice).

``kernel_details`` (:data:`KERNEL_DETAILS_SCHEMA`), one row per kernel or comm task, sorted by
rank, start_ns, device, stream (rank by rank, like op_summary: the ranks of a profile analysed
in separate tasks concatenate in order):
    rank, device, stream, step, kind, name, start_ns, dur_ns, wait_ns, host_op,
    grid, block     -- launch dimensions as "x,y,z" (null when absent; grid is the block dim
                       of an Ascend kernel),
    registers_per_thread, shared_memory_bytes, blocks_per_sm, warps_per_sm,
    occupancy_pct  -- estimated achieved occupancy; all null when absent from args.

``api_statistic`` (:data:`API_STATISTIC_SCHEMA`), one row per (runtime/sync call name, kind),
sorted by total_ns descending, then name and kind:
    name, kind, count, total_ns, avg_ns, min_ns, max_ns.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.columns import codes_taken, first_seen_ids, lexsort, strings_at
from perfledger.analysis.nesting import innermost_enclosing, operator_nesting, self_time
from perfledger.duck import duck
from perfledger.memory import drop_mapped_pages, release_freed_memory
from perfledger.model import schema
from perfledger.model.tables import (
    API_STATISTIC_SCHEMA,
    HOST_OP_SUMMARY_SCHEMA,
    KERNEL_DETAILS_SCHEMA,
    OP_STATISTIC_SCHEMA,
    OP_SUMMARY_SCHEMA,
)
from perfledger.sources import kineto_layout, kineto_scan

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


# Launch-configuration keys in a kernel's args, per output column, first found wins: Kineto's
# spelling, then the Ascend importers' (an Ascend kernel's block dim is its number of blocks,
# CUDA's grid size).
KERNEL_ARG_KEYS: Final = {
    "grid": ("grid", "block_dim"),
    "block": ("block",),
    "registers_per_thread": ("registers per thread",),
    "shared_memory_bytes": ("shared memory",),
    "blocks_per_sm": ("blocks per SM",),
    "warps_per_sm": ("warps per SM",),
    "occupancy_pct": ("est. achieved occupancy %",),
}

# The ids Kineto writes first in a kernel's args, all integers: `{"External id": 73689,"queued":
# 0, "device": 1, "context": 1,"stream": 7, "correlation": 73689,"registers per thread": ...`.
# No key of KERNEL_ARG_KEYS is among them. The alternatives share no first letter after a common
# prefix ("co"), so that RE2 matches them in one pass (several times faster on 1e5 documents).
KINETO_TASK_IDS: Final = (
    r'^\{(?:"(?:External id|queued|device|co(?:ntext|rrelation)|stream)": ?'
    r"-?(?:0|[1-9][0-9]{0,17}), ?)+"
)

# Documents cut and made distinct at a time by launch_config.
_BATCH: Final = 1 << 16

_NEEDED_COLUMNS: Final = (
    "rank",
    "kind",
    "name",
    "device",
    "stream",
    "pid",
    "start_ns",
    "dur_ns",
    "correlation",
    "external_id",
    "step",
    "bytes",
    "shapes",
    "dtypes",
    "args",
)


def op_summary(events: pa.Table, linked: pa.Table | None = None) -> pa.Table:
    """One row per device task with its wait and host op (per cpu_op on host-only traces).

    Args:
        events: canonical events.
        linked: ``link_device_tasks(events)`` when the caller already has it (saves relinking).
    """
    _check_columns(events)
    if not _kind_mask(events, schema.DEVICE_TASK_KINDS).any():
        return _host_op_summary(events)
    linked = link_device_tasks(events) if linked is None else linked
    return linked.select(OP_SUMMARY_SCHEMA.names)


def op_statistic(events: pa.Table, summary: pa.Table | None = None) -> pa.Table:
    """Count, total, min, avg, max and share of time per op type and kind.

    Args:
        events: canonical events.
        summary: ``op_summary(events)`` when the caller already has it (saves recomputing).
    """
    summary = op_summary(events) if summary is None else summary
    if "self_ns" in summary.column_names:
        op_type, measure = "name", "self_ns"
    else:
        op_type, measure = "coalesce(host_op, name)", "dur_ns"
    query = f"""
        WITH grouped AS (
            SELECT {op_type} AS name, kind, count(*) AS count, sum({measure})::BIGINT AS total_ns,
                   min({measure}) AS min_ns, avg({measure}) AS avg_ns, max({measure}) AS max_ns
            FROM summary GROUP BY ALL
        )
        SELECT name, kind, count, total_ns, min_ns, avg_ns, max_ns,
               CASE WHEN sum(total_ns) OVER () > 0
                    THEN total_ns / sum(total_ns) OVER () ELSE 0.0 END AS ratio
        FROM grouped ORDER BY total_ns DESC, name, kind
    """
    return _query(query, OP_STATISTIC_SCHEMA, summary=summary)


def kernel_details(events: pa.Table, linked: pa.Table | None = None) -> pa.Table:
    """One row per kernel or comm task with its launch configuration and wait time.

    Args:
        events: canonical events.
        linked: ``link_device_tasks(events)`` when the caller already has it (saves relinking).
    """
    _check_columns(events)
    linked = link_device_tasks(events) if linked is None else linked
    keep = np.flatnonzero(
        np.asarray(
            pc.is_in(linked["kind"], value_set=pa.array([schema.KERNEL, schema.COMM])), dtype=bool
        )
    )
    row = _int_column(linked, "row")[keep]
    # the order of op_summary, which link_device_tasks already gives: then this is the identity
    order = np.lexsort(
        (
            row,
            *(_int_column(linked, name)[keep] for name in ("stream", "device", "start_ns", "rank")),
        )
    )
    keep, row = keep[order], row[order]
    # The args in row order (a take per chunk, no reordering of the documents), a batch at a
    # time, their launch configuration put in the tasks' order afterwards: small columns
    # instead of the documents.
    wanted, position = _row_order(row)
    config = _launch_config_of(_args_batches(events.column("args"), wanted))
    del wanted
    at = pa.array(position, pa.int64())
    columns = {name: values.take(at) for name, values in config.items()}
    del config
    columns.update(
        {
            name: _column_at(linked[name], keep)
            for name in KERNEL_DETAILS_SCHEMA.names
            if name in linked.column_names
        }
    )
    details = pa.table({name: columns[name] for name in KERNEL_DETAILS_SCHEMA.names}).cast(
        KERNEL_DETAILS_SCHEMA
    )
    del columns
    release_freed_memory()
    return details


def _column_at(column: pa.ChunkedArray, rows: IntArray) -> pa.Array | pa.ChunkedArray:
    """``column`` at ``rows``; a string column's text allocated once (:func:`strings_at`)."""
    if column.num_chunks == 1 and pa.types.is_string(column.type):
        return strings_at(column.chunk(0), rows)
    return column.take(pa.array(rows, pa.int64()))


def _args_batches(column: pa.ChunkedArray, wanted: IntArray) -> Iterator[pa.Array]:
    """The documents of ``column`` at ascending ``wanted`` rows, :data:`_BATCH` at a time; the
    pages read of a memory-mapped column let go after each batch (the batch is a copy): the
    documents' pages (half the events table) do not pile up while their configurations are
    parsed."""
    for at in range(0, wanted.size, _BATCH):
        yield _take_sorted(column, wanted[at : at + _BATCH])
        drop_mapped_pages(column)


def launch_config(args: pa.Array) -> dict[str, pa.Array]:
    """The launch-configuration columns of kernel_details, from each task's args JSON.

    Per column the first key of :data:`KERNEL_ARG_KEYS` found with a usable value wins.
    Launch dimensions become "x,y,z" (whole numbers written as floats lose their ".0"); the
    other fields are numbers, null when absent or not numeric; args that are not valid JSON
    give nulls. Each distinct document is parsed once for all keys (a list of paths), not once
    per key: Kineto's per-task ids (:data:`KINETO_TASK_IDS`) are cut from the front of each
    document first, leaving one document per launch configuration (a few hundred for
    hundreds of thousands of kernels).
    """
    # Cutting well-formed `"key": integer,` pairs of keys not looked up right after the
    # opening brace leaves what json_extract finds unchanged, and a document that is not valid
    # JSON invalid (but for `{"queued": 0,}`, which gives nulls either way).
    chunks = args.chunks if isinstance(args, pa.ChunkedArray) else [args]
    return _launch_config_of(
        chunk.slice(at, _BATCH) for chunk in chunks for at in range(0, len(chunk), _BATCH)
    )


def _launch_config_of(batches: Iterable[pa.Array]) -> dict[str, pa.Array]:
    """:func:`launch_config` of the documents of ``batches`` one after the other.

    Each batch is cut and its distinct documents found on its own (never a copy of all the
    documents at once), then the batches' distinct documents are made distinct together.
    """
    dictionaries: list[pa.Array] = []
    codes: list[npt.NDArray[np.int64]] = []
    for batch in batches:
        bare = _cut_task_ids(batch)
        encoded = pc.dictionary_encode(bare)
        del bare
        dictionaries.append(encoded.dictionary)
        codes.append(np.asarray(pc.fill_null(encoded.indices, -1), dtype=np.int64))
    merged = pc.dictionary_encode(
        pa.concat_arrays(dictionaries) if dictionaries else pa.array([], pa.string())
    )
    merged_codes = np.asarray(merged.indices, dtype=np.int64)
    offsets = np.cumsum([0, *(len(d) for d in dictionaries)])
    index = np.concatenate(
        [_gather(merged_codes[offsets[k] : offsets[k + 1]], local) for k, local in enumerate(codes)]
        if codes
        else [np.zeros(0, dtype=np.int64)]
    )
    del codes, merged_codes
    config = _parsed_config(merged.dictionary)
    indices = pa.array(index, pa.int64(), mask=index < 0)
    return {column: values.take(indices) for column, values in config.items()}


def _cut_task_ids(batch: pa.Array) -> pa.Array:
    """``batch`` with :data:`KINETO_TASK_IDS` cut from each document (one compiled pass where
    the scanner is built)."""
    if kineto_scan.AVAILABLE:
        return kineto_scan.cut_task_ids(batch)
    return pc.replace_substring_regex(
        pc.cast(batch, pa.string()), KINETO_TASK_IDS, "{", max_replacements=1
    )


def _parsed_config(args: pa.Array) -> dict[str, pa.Array]:
    """launch_config of each document, parsed by DuckDB."""
    dims = [(c, k) for c, k in KERNEL_ARG_KEYS.items() if pa.types.is_string(_config_type(c))]
    figures = [(c, k) for c, k in KERNEL_ARG_KEYS.items() if (c, k) not in dims]
    keys = [key for _, column_keys in dims + figures for key in column_keys]
    selects = []
    for column, column_keys in dims:
        texts = []
        for key in column_keys:
            raw = f"CAST(found[{keys.index(key) + 1}] AS VARCHAR)"
            bare = f"regexp_replace({raw}, '[\\[\\] \"]', '', 'g')"
            whole = f"regexp_replace({bare}, '\\.0+(,|$)', '\\1', 'g')"
            texts.append(f"nullif({whole}, 'null')")
        selects.append(f"coalesce({', '.join(texts)}) AS {column}")
    for column, column_keys in figures:
        sql_type = "BIGINT" if pa.types.is_integer(_config_type(column)) else "DOUBLE"
        # the value as json_extract_string gives it: a string without its quotes
        numbers = [
            f"TRY_CAST(json_extract_string(found[{keys.index(k) + 1}], '$') AS {sql_type})"
            for k in column_keys
        ]
        selects.append(f"coalesce({', '.join(numbers)}) AS {column}")
    # one parse of each document: try() gives null where json_extract fails (not JSON), as a
    # json_valid test before it would, without parsing the document a second time
    query = f"""
        SELECT {", ".join(selects)}
        FROM (SELECT i, try(json_extract(args, {_json_paths(keys)})) AS found FROM tasks)
        ORDER BY i
    """
    tasks = pa.table({"i": pa.array(np.arange(len(args), dtype=np.int64)), "args": args})
    schema_ = pa.schema([KERNEL_DETAILS_SCHEMA.field(c) for c in KERNEL_ARG_KEYS])
    table = _query(query, schema_, tasks=tasks)
    return {column: table[column].combine_chunks() for column in KERNEL_ARG_KEYS}


def _config_type(column: str) -> pa.DataType:
    return KERNEL_DETAILS_SCHEMA.field(column).type


def _json_paths(keys: Sequence[str]) -> str:
    """A DuckDB list of JSON paths naming top-level keys."""
    return "[" + ", ".join("'$.\"" + key.replace("'", "''") + "\"'" for key in keys) + "]"


def api_statistic(events: pa.Table) -> pa.Table:
    """Count and time of the host runtime and synchronisation calls, per call name."""
    _check_columns(events)
    # only the columns used: a filter copies every column it is given (args is half the table)
    calls = events.select(["name", "kind", "dur_ns"])
    calls = calls.filter(pc.is_in(calls["kind"], value_set=pa.array(list(schema.LAUNCH_KINDS))))
    calls = pa.table(
        {
            "name": pc.cast(calls["name"], pa.string()),
            "kind": pc.cast(calls["kind"], pa.string()),
            "dur_ns": calls["dur_ns"],
        }
    )
    query = """
        SELECT name, kind, count(*) AS count, sum(dur_ns)::BIGINT AS total_ns,
               sum(dur_ns)::DOUBLE / count(*) AS avg_ns,
               min(dur_ns) AS min_ns, max(dur_ns) AS max_ns
        FROM calls GROUP BY name, kind ORDER BY total_ns DESC, name, kind
    """
    return _query(query, API_STATISTIC_SCHEMA, calls=calls)


def merge_api_statistics(tables: Sequence[pa.Table]) -> pa.Table:
    """One api_statistic from the api_statistic of each rank: what all ranks' events give."""
    if len(tables) == 1:
        return tables[0]
    query = """
        SELECT name, kind, sum(count)::BIGINT AS count, sum(total_ns)::BIGINT AS total_ns,
               sum(total_ns)::DOUBLE / sum(count) AS avg_ns,
               min(min_ns) AS min_ns, max(max_ns) AS max_ns
        FROM parts GROUP BY name, kind ORDER BY total_ns DESC, name, kind
    """
    parts = pa.concat_tables([t.cast(API_STATISTIC_SCHEMA) for t in tables])
    return _query(query, API_STATISTIC_SCHEMA, parts=parts)


def _check_columns(events: pa.Table) -> None:
    missing = [name for name in _NEEDED_COLUMNS if name not in events.column_names]
    if missing:
        raise ValueError(f"events table lacks columns: {', '.join(missing)}")


def _kind_mask(events: pa.Table, kinds: Sequence[str]) -> BoolArray:
    value_set = pa.array(list(kinds), pa.string())
    masks = []
    for chunk in events["kind"].chunks:
        if not pa.types.is_dictionary(chunk.type):
            masks.append(np.asarray(pc.fill_null(pc.is_in(chunk, value_set=value_set), False)))
            continue
        # a test per distinct kind, a pass per wanted one (null: a code past the dictionary)
        wanted = pc.fill_null(pc.is_in(chunk.dictionary, value_set=value_set), False)
        codes = np.asarray(pc.fill_null(chunk.indices, len(chunk.dictionary)))
        masks.append(kineto_layout.codes_among(codes, np.flatnonzero(np.asarray(wanted))))
    return np.concatenate(masks).astype(bool, copy=False) if masks else np.zeros(0, dtype=bool)


def _int_column(events: pa.Table, name: str) -> IntArray:
    return np.asarray(events[name], dtype=np.int64)


def _native_column(events: pa.Table, name: str) -> npt.NDArray[np.integer]:
    """An integer column in its own type: a view, not a copy, where it is one chunk."""
    column = events[name]
    if column.num_chunks == 1:
        return np.asarray(column.chunk(0))
    return np.asarray(column)


def _thread_group(events: pa.Table) -> IntArray:
    """A dense id per host thread: (rank, pid, thread), numbered in order of first appearance."""
    return _thread_ids(*(_int_column(events, column) for column in ("rank", "pid", "stream")))


def _thread_ids(rank: IntArray, pid: IntArray, stream: IntArray) -> IntArray:
    """:func:`_thread_group` of the columns' values."""
    numbered = first_seen_ids((rank, pid, stream))
    if numbered is not None:
        return numbered
    group = np.zeros(rank.size, dtype=np.int64)
    for column in (rank, pid, stream):
        # column by column: the ids so far times the column's distinct count plus its own id
        # stays below rows squared; hashing (Arrow's dictionary encoding) instead of sorting
        values, count = _dense_ids(column)
        group, _ = _dense_ids(group * count + values)
    return group


def _dense_ids(values: IntArray) -> tuple[IntArray, int]:
    """0, 1, ... per distinct value in order of first appearance, and the number of them."""
    encoded = pc.dictionary_encode(pa.array(values, pa.int64()))
    return np.asarray(encoded.indices, dtype=np.int64), len(encoded.dictionary)


def _string_take(events: pa.Table, column: str, rows: IntArray) -> pa.Array:
    """A column's values at ``rows`` as plain strings (null where a row is -1)."""
    return pc.cast(take_rows(events.column(column), rows), pa.string())


def take_rows(column: pa.ChunkedArray, rows: IntArray) -> pa.Array:
    """``column[rows]`` (null where a row is -1), taking from each chunk in turn.

    Arrow's take on a chunked column first joins its chunks: a full copy of the column
    (131 MB for the args of the bench trace) for a few rows. Dictionary columns come back
    decoded to their values.
    """
    if column.num_chunks == 1 and pa.types.is_dictionary(column.type):
        # the codes gathered, then the values taken once in the order asked: taking and
        # decoding first, then reordering, would copy the (long) names twice
        # (the column's codes read in place, not copied whole as int64: a few rows of them)
        chunk = column.chunk(0)
        indices = chunk.indices if chunk.null_count == 0 else pc.fill_null(chunk.indices, -1)
        codes = np.asarray(indices)
        rows = np.asarray(rows, dtype=np.int64)
        picked = np.full(rows.size, -1, dtype=np.int64)
        asked = rows >= 0
        picked[asked] = codes[rows[asked]]
        return strings_at(chunk.dictionary, picked)
    found, position = _take_in_row_order(column, rows)
    return found.take(pa.array(position, mask=position < 0))


def _take_in_row_order(column: pa.ChunkedArray, rows: IntArray) -> tuple[pa.Array, IntArray]:
    """The values of ``column`` at the valid ``rows`` (>= 0) in ascending row order, and where
    each of ``rows`` lies in them (-1 for a row -1): ``take_rows`` without its last reordering.
    """
    wanted, position = _row_order(rows)
    return _take_sorted(column, wanted), position


def _row_order(rows: IntArray) -> tuple[IntArray, IntArray]:
    """The valid ``rows`` (>= 0) in ascending order, and where each of ``rows`` lies in them
    (-1 for a row -1)."""
    rows = np.asarray(rows, dtype=np.int64)
    valid = np.flatnonzero(rows >= 0)
    order = valid[np.argsort(rows[valid], kind="stable")]
    position = np.full(rows.size, -1, dtype=np.int64)
    position[order] = np.arange(order.size, dtype=np.int64)
    return rows[order], position


def _take_sorted(column: pa.ChunkedArray, wanted: IntArray) -> pa.Array:
    """The values of ``column`` at ascending ``wanted`` rows, a take per chunk."""
    value_type = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    bounds = np.cumsum([0, *(len(chunk) for chunk in column.chunks)])
    cuts = np.searchsorted(wanted, bounds)
    parts = [
        pc.cast(chunk.take(pa.array(wanted[cuts[i] : cuts[i + 1]] - bounds[i])), value_type)
        for i, chunk in enumerate(column.chunks)
        if cuts[i + 1] > cuts[i]
    ]
    return pa.concat_arrays(parts) if parts else pa.nulls(0, value_type)


def _host_op_summary(events: pa.Table) -> pa.Table:
    ops = events.filter(pc.equal(events["kind"], schema.CPU_OP))
    start = _int_column(ops, "start_ns")
    end = start + _int_column(ops, "dur_ns")
    parent = operator_nesting(_thread_group(ops), start, end)
    table = pa.table(
        {
            "rank": ops["rank"],
            "device": ops["device"],
            "stream": ops["stream"],
            "step": ops["step"],
            "kind": pc.cast(ops["kind"], pa.string()),
            "name": pc.cast(ops["name"], pa.string()),
            "start_ns": ops["start_ns"],
            "dur_ns": ops["dur_ns"],
            "self_ns": pa.array(self_time(start, end, parent), pa.int64()),
            "shapes": pc.cast(ops["shapes"], pa.string()),
            "dtypes": pc.cast(ops["dtypes"], pa.string()),
        }
    ).cast(HOST_OP_SUMMARY_SCHEMA)
    order = np.lexsort(
        (np.arange(ops.num_rows), _int_column(ops, "stream"), start, _int_column(ops, "rank"))
    )
    return table.take(pa.array(order, pa.int64()))


def link_device_tasks(events: pa.Table) -> pa.Table:
    """Each device task linked to the call that launched it and the host op that issued it.

    op_summary's columns plus, as rows of ``events`` (-1: none), ``row`` (the task's own),
    ``launch_row`` (the call that launched it) and ``op_row`` (the host op), and the call's
    ``launch_dur_ns`` (0: none). Sorted as op_summary.
    """
    linked = _linked_table(events)
    release_freed_memory()
    return linked


def with_task_steps(links: pa.Table, events: pa.Table) -> pa.Table:
    """``links`` (:func:`link_device_tasks` of events whose steps were assigned since: the
    linking reads no other column the assignment fills) with each task's ``step`` as the
    row of ``events`` it names has it."""
    index = links.schema.get_field_index("step")
    rows = links.column("row").to_numpy()
    return links.set_column(index, links.schema.field(index), _gathered(events, "step", rows))


def _linked_table(events: pa.Table) -> pa.Table:
    """The linking of :func:`link_device_tasks`; its temporaries are freed on return.

    The linkage's arrays are made and freed first (:func:`_link_rows`), then the tasks' own
    columns gathered at their rows while the pages the linkage read of a memory-mapped events
    table are in memory; those pages are let go before the names are taken (from the
    dictionaries, in the heap): the names' copies do not stack on the linkage's temporaries
    and the mapped columns' pages.
    """
    link = _link_rows(events)
    rows_np = link.row
    own = {
        name: _gathered(events, name, rows_np)
        for name in ("rank", "device", "stream", "step", "start_ns", "dur_ns", "bytes")
    }
    drop_mapped_pages(events)
    op_row = link.op_row
    return pa.table(
        {
            "rank": own["rank"],
            "device": own["device"],
            "stream": own["stream"],
            "step": own["step"],
            "kind": codes_taken(events.column("kind"), rows_np),
            "name": codes_taken(events.column("name"), rows_np),
            "start_ns": own["start_ns"],
            "dur_ns": own["dur_ns"],
            "wait_ns": pa.array(link.wait_ns, pa.int64()),
            "host_op": codes_taken(events.column("name"), op_row),
            "launch_ns": pa.array(link.launch_ns, pa.int64()),
            "bytes": own["bytes"],
            "shapes": _string_take(events, "shapes", op_row),
            "dtypes": _string_take(events, "dtypes", op_row),
            "row": pa.array(rows_np, pa.int64()),
            "launch_row": pa.array(link.launch_row, pa.int64()),
            "launch_dur_ns": pa.array(link.launch_dur_ns, pa.int64()),
            "op_row": pa.array(op_row, pa.int64()),
            # the id link named another operator than the one the launch call lies in
            "relinked": pa.array(link.relinked, pa.bool_()),
        }
    )


def _gathered(events: pa.Table, name: str, rows: IntArray) -> pa.Array:
    """``events[name]`` at ``rows`` (all valid), in the column's own type."""
    column = events[name]
    if column.null_count:
        return column.take(pa.array(rows, pa.int64())).combine_chunks()
    return pa.array(_native_column(events, name)[rows], column.type)


class _Links(NamedTuple):
    """Per device task, in op_summary's order (rows of the events; -1: none)."""

    row: IntArray  # the task's own
    launch_row: IntArray  # the call that launched it
    op_row: IntArray  # the host op that issued it
    wait_ns: IntArray
    launch_ns: IntArray
    launch_dur_ns: IntArray
    relinked: BoolArray  # the id link named another operator than the launch call lies in


def _link_rows(events: pa.Table) -> _Links:
    """The device tasks' links (:class:`_Links`) of :func:`link_device_tasks`.

    Whole columns are read in place (a view where the column is one chunk) and copied only at
    the rows of operators, launch calls and tasks: no array as long as the events is made.
    """
    start = _int_column(events, "start_ns")
    dur = _int_column(events, "dur_ns")
    correlation = _int_column(events, "correlation")
    external_id = _int_column(events, "external_id")
    rank = _native_column(events, "rank")
    is_launch = _kind_mask(events, schema.LAUNCH_KINDS)
    is_launch &= correlation != schema.NO_ID
    launch_rows = np.flatnonzero(is_launch)
    del is_launch
    op_rows = np.flatnonzero(_kind_mask(events, (schema.CPU_OP,)))
    task_rows = np.flatnonzero(_kind_mask(events, schema.DEVICE_TASK_KINDS))
    op_start, launch_start = start[op_rows], start[launch_rows]
    op_end = op_start + dur[op_rows]

    # Innermost cpu_op running on the launching thread when each launch call began.
    host_rows = np.concatenate([op_rows, launch_rows])
    thread = _thread_ids(
        rank[host_rows].astype(np.int64),
        _int_column(events, "pid")[host_rows],
        _int_column(events, "stream")[host_rows],
    )
    del host_rows
    op_thread, launch_thread = thread[: len(op_rows)], thread[len(op_rows) :]
    parent = operator_nesting(op_thread, op_start, op_end)
    enclosing = innermost_enclosing(
        op_thread, op_start, op_end, parent, launch_thread, launch_start
    )
    del parent
    enclosing_row = (
        np.where(enclosing >= 0, op_rows[np.maximum(enclosing, 0)], -1)
        if op_rows.size
        else enclosing
    )

    # The launch of a correlation id: the earliest call of the rank that carries it (its
    # position among launch_rows).
    launch_rank = rank[launch_rows].astype(np.int64)
    launch = _first_of_groups(launch_rank, correlation[launch_rows], launch_start)
    # The operator of an external id: the shortest (then the latest) cpu_op of the rank (its
    # position among op_rows).
    with_id = np.flatnonzero(external_id[op_rows] != schema.NO_ID)
    with_id_rows = op_rows[with_id]
    op = with_id[
        _first_of_groups(
            rank[with_id_rows].astype(np.int64),
            external_id[with_id_rows],
            dur[with_id_rows],
            -op_start[with_id],
            -with_id_rows,
        )
    ]
    del with_id, with_id_rows
    task_rank = rank[task_rows].astype(np.int64)
    task_correlation = correlation[task_rows]
    found = _lookup(
        launch_rank[launch], correlation[launch_rows[launch]], task_rank, task_correlation
    )
    found[task_correlation == schema.NO_ID] = -1
    del launch_rank, task_correlation
    launch_at = _gather(launch, found)  # position among launch_rows
    launch_row = _gather(launch_rows, launch_at)
    launch_ns = _gather(launch_start, launch_at)
    launch_dur_ns = np.where(launch_at >= 0, _gather(dur, launch_row), 0)
    launch_id = _gather(external_id, launch_row)
    # the launch's external id, else the task's own (-1: none, the missing value throughout)
    op_id = np.where(launch_id != schema.NO_ID, launch_id, external_id[task_rows])
    del launch_id
    op_rows_op = op_rows[op]
    by_id = _lookup(rank[op_rows_op].astype(np.int64), external_id[op_rows_op], task_rank, op_id)
    by_id[op_id == schema.NO_ID] = -1
    del op_id, op_rows_op
    # otherwise the innermost cpu_op running on the launching thread when the call began
    enclosing_op = _gather(enclosing_row, launch_at)
    # An id link stands unless the launch call lies inside another operator of its thread:
    # traces whose launch calls carry their correlation id as external id too (seen on an
    # A100 trace) would tie copies to whatever operator shares the number. A call on a thread
    # without operators (Ascend's task queue) keeps its id link.
    id_at = _gather(op, by_id)  # position among op_rows
    id_op = _gather(op_rows, id_at)
    known = (id_at >= 0) & (launch_at >= 0)
    inside = known.copy()
    op_known, launch_known = id_at[known], launch_at[known]
    inside[known] = (
        (op_thread[op_known] == launch_thread[launch_known])
        & (op_start[op_known] <= launch_start[launch_known])
        & (launch_start[launch_known] < op_end[op_known])
    )
    del op_known, launch_known, id_at
    relinked = known & ~inside & (enclosing_op >= 0) & (enclosing_op != id_op)
    op_row = np.where((id_op >= 0) & ~relinked, id_op, enclosing_op)
    del known, inside, id_op, enclosing_op
    task_device = _native_column(events, "device")[task_rows].astype(np.int64)
    task_stream = _int_column(events, "stream")[task_rows]
    task_start = start[task_rows]
    wait_ns = _stream_waits(
        task_rank, task_device, task_stream, task_start, task_start + dur[task_rows], task_rows
    )
    order = np.lexsort((task_rows, task_stream, task_device, task_start, task_rank))
    del task_device, task_stream, task_start, task_rank
    return _Links(
        row=task_rows[order],
        launch_row=launch_row[order],
        op_row=op_row[order],
        wait_ns=wait_ns[order],
        launch_ns=launch_ns[order],
        launch_dur_ns=launch_dur_ns[order],
        relinked=relinked[order],
    )


def _gather(values: IntArray, index: IntArray) -> IntArray:
    """``values[index]``, -1 (schema.NO_ID) where the index is -1."""
    out = np.full(index.size, -1, dtype=np.int64)
    ok = index >= 0
    out[ok] = values[index[ok]]
    return out


def _first_of_groups(rank: IntArray, ident: IntArray, *order_by: IntArray) -> IntArray:
    """Positions of the first element of every (rank, ident) group, ordered by ``order_by``
    (then position); the result is sorted by (rank, ident)."""
    if rank.size == 0:
        return np.zeros(0, dtype=np.int64)
    # grouped first (stable: by position within a group), then only the groups of more than
    # one element ordered by ``order_by``: most ids are carried once, and sorting every
    # element on every key was the pass's largest cost
    one_rank = bool(rank[0] == rank[-1]) and bool((rank == rank[0]).all())
    order = np.lexsort((ident,) if one_rank else (ident, rank))
    i = ident[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = i[1:] != i[:-1]
    if not one_rank:
        r = rank[order]
        first[1:] |= r[1:] != r[:-1]
    if first.all():  # every id carried once
        return order
    chosen: IntArray = order[first]
    group = np.cumsum(first) - 1
    shared = np.flatnonzero(np.bincount(group)[group] > 1)  # places in order of larger groups
    if shared.size:
        among, their_group = order[shared], group[shared]
        # stable: ties in every key keep the position order of ``order``
        ranked = np.lexsort((*(key[among] for key in reversed(order_by)), their_group))
        ranked_group = their_group[ranked]
        head = np.ones(ranked.size, dtype=bool)
        head[1:] = ranked_group[1:] != ranked_group[:-1]
        chosen[ranked_group[head]] = among[ranked[head]]
    return chosen


def _lookup(
    table_rank: IntArray, table_ident: IntArray, rank: IntArray, ident: IntArray
) -> IntArray:
    """Position of each (rank, ident) in a table sorted and unique by (rank, ident); -1: absent."""
    found = np.full(rank.size, -1, dtype=np.int64)
    for r in np.unique(table_rank).tolist():  # a loop over ranks
        lo, hi = np.searchsorted(table_rank, [r, r + 1])
        ids = table_ident[lo:hi]
        asked = np.flatnonzero(rank == r)
        at = np.clip(np.searchsorted(ids, ident[asked]), 0, max(ids.size - 1, 0))
        hit = ids[at] == ident[asked]
        found[asked[hit]] = lo + at[hit]
    return found


def _stream_waits(
    rank: IntArray,
    device: IntArray,
    stream: IntArray,
    start: IntArray,
    end: IntArray,
    row: IntArray,
) -> IntArray:
    """How long each task's stream sat idle before it: its start minus the latest end of the
    tasks before it on the same (rank, device, stream), never below 0 (0 for the first)."""
    wait = np.zeros(start.size, dtype=np.int64)
    if start.size == 0:
        return wait
    order = lexsort((row, end - start, start, stream, device, rank))
    r, d, s = rank[order], device[order], stream[order]
    bounds = np.flatnonzero((r[1:] != r[:-1]) | (d[1:] != d[:-1]) | (s[1:] != s[:-1])) + 1
    for a, b in itertools.pairwise([0, *bounds.tolist(), order.size]):  # a loop over streams
        rows = order[a:b]
        latest = np.maximum.accumulate(end[rows])
        before = np.concatenate([start[rows[:1]], latest[:-1]])
        wait[rows] = np.maximum(start[rows] - before, 0)
    return wait


def _query(query: str, result_schema: pa.Schema, **tables: pa.Table) -> pa.Table:
    with duck() as con:
        for name, table in tables.items():
            con.register(name, table)
        result = con.sql(query).to_arrow_table()
    return result.cast(result_schema)
