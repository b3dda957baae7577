"""The JSON text of timeline records, formatted column-wise as pieces (see ``text``)."""

from __future__ import annotations

import json
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.render.timeline.grouping import Int64Array
from perfledger.render.timeline.records import CounterSeries, PreparedTimeline
from perfledger.render.timeline.slices import Slices
from perfledger.render.timeline.text import (
    Pieces,
    RowTexts,
    builder,
    join,
)

# A record's start: complete (row 0) or instant (row 1), by the row's ``instant`` flag.
_HEADS: Final = pa.array([',\n{"ph":"X","pid":', ',\n{"ph":"i","s":"t","pid":'], pa.string())


def slice_lines(s: Slices, rows: Int64Array, origin: int) -> Pieces | RowTexts:
    """``"ph":"X"`` (complete) and ``"ph":"i"`` (instant) records of the given rows."""
    instant = s.instant[rows]
    complete = ~instant
    line = builder(int(rows.size))
    line.table(_HEADS, instant.view(np.int8), fixed=True)
    line.ints(s.pid[rows], after=',"tid":')
    line.ints(s.tid[rows], after=',"ts":')
    # an instant has no duration: its time is followed by its name
    line.us(s.start[rows] - origin)
    line.text(',"dur":', complete)
    line.us(s.dur[rows], complete)
    name_index = s.name_index[rows]
    line.table(s.name_pieces, name_index)
    line.table(s.cat_pieces, s.cat_index[rows])
    s.args(line, rows)
    if s.colours is not None:
        line.table(s.end_pieces, name_index)
    else:
        line.text("}")
    return line.build()


def flow_lines(
    s: Slices, rows: Int64Array, ts: Int64Array, ids: Int64Array, phase: str, origin: int
) -> Pieces | RowTexts:
    """Flow records: ``phase`` "s" leaves a launch, "f" enters a task (bound to the slice
    that encloses it, ``"bp":"e"``)."""
    bind = ',"bp":"e"' if phase == "f" else ""
    line = builder(int(rows.size))
    line.ints(ids, before=f',\n{{"ph":"{phase}"{bind},"id":', after=',"pid":')
    line.ints(s.pid[rows], after=',"tid":')
    line.ints(s.tid[rows], after=',"ts":')
    line.us(ts - origin, after=',"name":"launch","cat":"flow"}')
    return line.build()


def counter_lines(
    c: CounterSeries, rows: Int64Array, ts: Int64Array, origin: int
) -> Pieces | RowTexts:
    """``"ph":"C"`` records of the given samples, each at its ``ts`` (a sample carried to a
    window's start is written there)."""
    values = np.round(c.value[rows], 6)
    values = np.where(values == 0, 0.0, values)  # no "-0"
    line = builder(int(rows.size))
    line.ints(c.pid[rows].astype(np.int64), before=',\n{"ph":"C","pid":', after=',"ts":')
    line.us(ts - origin)
    line.table(join(',"name":', c.names, ',"args":{', c.keys, ":"), c.series[rows])
    line.values(pc.cast(pa.array(values), pa.string()))
    line.text("}}")
    return line.build()


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
