"""Memory copies by direction: how much data moved, how fast, and how much of it was avoidable.

``transfers(events)`` returns :data:`TRANSFERS_SCHEMA`, one row per copy direction present, in
the order HtoD, DtoH, DtoD, HtoH, PtoP, unknown:
    direction      -- from the copy's name ("Memcpy HtoD (Pageable -> Device)",
                      "CopyDeviceToHost", ...) or else from ``args.kind`` ("HtoD", or the
                      cudaMemcpyKind / hipMemcpyKind number); "unknown" when neither says,
    count          -- number of copies,
    bytes          -- bytes moved by the copies whose size is known,
    time_ns        -- total duration of the copies,
    gbps           -- achieved bandwidth, bytes / time (GB/s = bytes per ns) over the copies
                      whose size is known; NaN when none is,
    pageable_count -- copies from or to pageable host memory (staged through a bounce buffer:
                      slower, and never asynchronous to the host),
    small_count    -- copies of known size under 64 KiB (dominated by fixed per-copy cost),
    unknown_bytes_count -- copies whose size the trace does not give.
All memcpy tasks of the table are counted together (call per rank for per-rank figures).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.duck import duck
from perfledger.model import schema
from perfledger.model.tables import SPELLINGS_SCHEMA, TRANSFERS_SCHEMA

DIRECTIONS: Final = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "unknown")
SMALL_COPY_BYTES: Final = 64 * 1024

# Vendor knowledge: how copy names and args spell the direction. Kineto (CUDA, and HIP through
# roctracer) names its copies "Memcpy HtoD (Pinned -> Device)"; rocprof writes
# "CopyHostToDevice"; Ascend and some runtimes write "H2D" or "host_to_device".
_DIRECTION_PATTERNS: Final = (
    ("HtoD", re.compile(r"HtoD|H2D|Host_?To_?Device", re.IGNORECASE)),
    ("DtoH", re.compile(r"DtoH|D2H|Device_?To_?Host", re.IGNORECASE)),
    ("DtoD", re.compile(r"DtoD|D2D|Device_?To_?Device", re.IGNORECASE)),
    ("HtoH", re.compile(r"HtoH|H2H|Host_?To_?Host", re.IGNORECASE)),
    ("PtoP", re.compile(r"PtoP|P2P|Peer_?To_?Peer", re.IGNORECASE)),
)
# cudaMemcpyKind / hipMemcpyKind values as a trace's args.kind may carry them (4, "default",
# lets the runtime infer the direction: unknown here).
_DIRECTION_BY_KIND_NUMBER: Final = {"0": "HtoH", "1": "HtoD", "2": "DtoH", "3": "DtoD"}
# A copy touches pageable host memory when its name says so: "(Pageable -> Device)".
_PAGEABLE: Final = re.compile(r"pageable", re.IGNORECASE)


def copy_direction(name: str, kind_arg: str | None = None) -> str:
    """The direction of one copy, from its name, else its ``args.kind``; "unknown" if neither."""
    for direction, pattern in _DIRECTION_PATTERNS:
        if pattern.search(name):
            return direction
    if kind_arg is not None:
        if kind_arg in _DIRECTION_BY_KIND_NUMBER:
            return _DIRECTION_BY_KIND_NUMBER[kind_arg]
        for direction, pattern in _DIRECTION_PATTERNS:
            if pattern.search(kind_arg):
                return direction
    return "unknown"


def is_pageable(name: str) -> bool:
    """Whether a copy's name says it reads or writes pageable host memory."""
    return _PAGEABLE.search(name) is not None


def transfers(events: pa.Table) -> pa.Table:
    """Count, bytes, time, bandwidth, pageable and small copies per copy direction."""
    return transfers_from_spellings([copy_spellings(events)])


def copy_spellings(events: pa.Table) -> pa.Table:
    """The copies summed per distinct spelling (name, args.kind): :data:`SPELLINGS_SCHEMA`.

    Sums only, so the spellings of several ranks add up to those of all their events; the
    direction is decided once per spelling, not once per copy.
    """
    # only the columns used, at the copies' rows only (a filter of the table would copy
    # every column it is given, and join the chunks of the args first)
    rows = np.flatnonzero(columns.isin(events, "kind", [schema.MEMCPY]))
    copies = columns.take_rows(events, rows, ["name", "dur_ns", "bytes"])
    # the args a page apart: their pages let go as they are read
    copies = copies.append_column("args", columns.take_paged(events.column("args"), rows))
    copies = pa.table(
        {
            "name": pc.cast(copies["name"], pa.string()),
            "args": pc.cast(copies["args"], pa.string()),
            "dur_ns": copies["dur_ns"],
            "bytes": copies["bytes"],
        }
    )
    query = f"""
        SELECT name,
               CASE WHEN json_valid(args) THEN json_extract_string(args, '$.kind') END AS kind_arg,
               count(*) AS count,
               coalesce(sum(bytes) FILTER (WHERE bytes >= 0), 0)::BIGINT AS bytes,
               sum(dur_ns)::BIGINT AS time_ns,
               coalesce(sum(dur_ns) FILTER (WHERE bytes >= 0), 0)::BIGINT AS sized_time_ns,
               count(*) FILTER (WHERE bytes >= 0 AND bytes < {SMALL_COPY_BYTES}) AS small_count,
               count(*) FILTER (WHERE bytes < 0) AS unknown_bytes_count
        FROM copies GROUP BY ALL
    """
    with duck() as con:
        con.register("copies", copies)
        return con.sql(query).to_arrow_table().cast(SPELLINGS_SCHEMA)


def transfers_from_spellings(parts: Sequence[pa.Table]) -> pa.Table:
    """The transfers table from the :func:`copy_spellings` of one or several event tables."""
    with duck() as con:
        con.register("parts", pa.concat_tables(parts))
        per_spelling = con.sql(
            """
            SELECT name, kind_arg, sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes,
                   sum(time_ns)::BIGINT AS time_ns, sum(sized_time_ns)::BIGINT AS sized_time_ns,
                   sum(small_count)::BIGINT AS small_count,
                   sum(unknown_bytes_count)::BIGINT AS unknown_bytes_count
            FROM parts GROUP BY ALL
            """
        ).to_arrow_table()
        spellings = zip(
            per_spelling["name"].to_pylist(), per_spelling["kind_arg"].to_pylist(), strict=True
        )
        labels = [(copy_direction(name, kind), is_pageable(name)) for name, kind in spellings]
        per_spelling = per_spelling.append_column(
            "direction", pa.array([d for d, _ in labels], pa.string())
        ).append_column("pageable", pa.array([p for _, p in labels], pa.bool_()))
        order = pa.table({"direction": list(DIRECTIONS), "position": list(range(len(DIRECTIONS)))})
        con.register("per_spelling", per_spelling)
        con.register("direction_order", order)
        result = con.sql(
            """
            SELECT s.direction, sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes,
                   sum(time_ns)::BIGINT AS time_ns,
                   CASE WHEN sum(sized_time_ns) > 0 AND sum(count) > sum(unknown_bytes_count)
                        THEN sum(bytes) / sum(sized_time_ns) ELSE 'NaN'::DOUBLE END AS gbps,
                   coalesce(sum(count) FILTER (WHERE pageable), 0)::BIGINT AS pageable_count,
                   sum(small_count)::BIGINT AS small_count,
                   sum(unknown_bytes_count)::BIGINT AS unknown_bytes_count
            FROM per_spelling s JOIN direction_order o ON s.direction = o.direction
            GROUP BY s.direction, o.position ORDER BY o.position
            """
        ).to_arrow_table()
    return result.cast(TRANSFERS_SCHEMA)
