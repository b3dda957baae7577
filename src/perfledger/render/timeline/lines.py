"""The JSON text of timeline records, formatted column-wise: one string per record."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.render.timeline.grouping import Int64Array
from perfledger.render.timeline.records import CounterSeries, PreparedTimeline, Slices
from perfledger.render.timeline.text import either, ints, join, us


def slice_lines(s: Slices, rows: Int64Array, origin: int) -> pa.Array:
    """``"ph":"X"`` (complete) and ``"ph":"i"`` (instant) records of the given rows."""
    ts = us(s.start[rows] - origin)
    names = s.names.take(pa.array(s.name_index[rows]))
    cats = s.cats.take(pa.array(s.cat_index[rows]))
    args = s.args(rows)
    instant = s.instant[rows]
    head = either(pa.array(instant), ',\n{"ph":"i","s":"t","pid":', ',\n{"ph":"X","pid":')
    dur = either(pa.array(instant), "", join(',"dur":', us(s.dur[rows])))
    return join(
        head,
        ints(s.pid[rows]),
        ',"tid":',
        ints(s.tid[rows]),
        ',"ts":',
        ts,
        dur,
        ',"name":',
        names,
        ',"cat":',
        cats,
        ',"args":',
        args,
        s.colours.take(pa.array(s.name_index[rows])) if s.colours is not None else "",
        "}",
    )


def flow_lines(
    s: Slices, rows: Int64Array, ts: Int64Array, ids: Int64Array, phase: str, origin: int
) -> pa.Array:
    """Flow records: ``phase`` "s" leaves a launch, "f" enters a task (bound to the slice
    that encloses it, ``"bp":"e"``)."""
    bind = ',"bp":"e"' if phase == "f" else ""
    return join(
        f',\n{{"ph":"{phase}"{bind},"id":',
        ints(ids),
        ',"pid":',
        ints(s.pid[rows]),
        ',"tid":',
        ints(s.tid[rows]),
        ',"ts":',
        us(ts - origin),
        ',"name":"launch","cat":"flow"}',
    )


def counter_lines(c: CounterSeries, rows: Int64Array, ts: Int64Array, origin: int) -> pa.Array:
    """``"ph":"C"`` records of the given samples, each at its ``ts`` (a sample carried to a
    window's start is written there)."""
    values = np.round(c.value[rows], 6)
    values = np.where(values == 0, 0.0, values)  # no "-0"
    series = pa.array(c.series[rows])
    return join(
        ',\n{"ph":"C","pid":',
        ints(c.pid[rows]),
        ',"ts":',
        us(ts - origin),
        ',"name":',
        c.names.take(series),
        ',"args":{',
        c.keys.take(series),
        ":",
        pc.cast(pa.array(values), pa.string()),
        "}}",
    )


def metadata_lines(
    prepared: PreparedTimeline, pids: set[int], tids: set[tuple[int, int]]
) -> list[str]:
    """Names and sort order of the processes and threads that hold something."""
    lines = []
    for pid, tid, name, sort, what in prepared.metadata:
        if what == "process" and pid in pids:
            ident: dict[str, int] = {"pid": pid}
        elif what == "thread" and (pid, tid) in tids:
            ident = {"pid": pid, "tid": tid}
        else:
            continue
        for key, args in (("name", {"name": name}), ("sort_index", {"sort_index": sort})):
            record = {"ph": "M", **ident, "name": f"{what}_{key}", "args": args}
            lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    return lines


def string_bytes(lines: pa.Array) -> memoryview:
    """The UTF-8 bytes of a string array's values, concatenated, without copying."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if len(lines) == 0:
        return memoryview(b"")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    first = int(offsets[lines.offset])
    last = int(offsets[lines.offset + len(lines)])
    return memoryview(lines.buffers()[2]).cast("B")[first:last]
