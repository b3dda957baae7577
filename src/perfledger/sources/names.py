"""Bounded names: what a trace may make perfledger store and write, whatever it holds.

A trace is the traced program's text; one kernel name of 300 MiB, or thousands of names of
100 kB, would otherwise land in every table, CSV, summary.json and the report. Every importer's
trace goes through :func:`bounded` (docs/formats.md, "Names and sizes"):

- a name (operator, kernel, annotation, counter, track; a thread or process name or any
  other text of the trace's metadata) longer than :data:`NAME_LIMIT`
  characters keeps its first :data:`NAME_LIMIT` and gets a mark ``…[cut: <length> chars
  <digest>]``; the digest keeps two long names that share their beginning apart;
- an event's ``args`` JSON longer than :data:`ARGS_LIMIT` bytes becomes
  ``{"perfledger_cut_args_bytes": <length>}``, and ``shapes`` / ``dtypes`` longer than that
  are left empty (null);

each counted in the trace's quality report (``long_names``, repaired). Every event then holds
a bounded number of bytes, so what is written grows with the number of events, not with what
the program put in them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.model.quality import OPERATORS, TIMELINE, QualityCheck
from perfledger.model.trace import Trace

NAME_LIMIT: Final = 16_384  # characters; C++ template kernel names reach 5,000 (a100_alexnet)
ARGS_LIMIT: Final = 65_536  # bytes of one event's args, shapes or dtypes
LONG_NAMES: Final = "long_names"
_EVENT_NAMES: Final = ("kind", "name")
_COUNTER_NAMES: Final = ("track", "name")
_ARGS_CUT_KEY: Final = "perfledger_cut_args_bytes"


def cut_name(name: str) -> str:
    """``name`` itself when short enough, else its beginning and the mark."""
    if len(name) <= NAME_LIMIT:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{name[:NAME_LIMIT]}…[cut: {len(name):,} chars {digest}]"


def bounded(trace: Trace) -> Trace:
    """``trace`` with its names and args within the limits, and what was cut counted."""
    events, cut_events = _bounded_table(trace.events, _EVENT_NAMES, ("args", "shapes", "dtypes"))
    counters, cut_counters = _bounded_table(trace.counters, _COUNTER_NAMES, ())
    meta, cut_meta = _bounded_meta(trace.meta)
    names = cut_events[0] + cut_counters[0] + cut_meta
    values = cut_events[1] + cut_counters[1]
    if not names and not values:
        return trace
    where = trace.source_files[0].name if trace.source_files else f"rank {trace.rank}"
    parts = [f"{names:,} names over {NAME_LIMIT:,} characters cut"] if names else []
    if values:
        parts.append(f"{values:,} args, shapes or dtypes over {ARGS_LIMIT:,} bytes left out")
    check = QualityCheck(
        LONG_NAMES,
        names + values,
        f"{where}: " + "; ".join(parts),
        (OPERATORS, TIMELINE),
        repaired=True,
    )
    return replace(
        trace, events=events, counters=counters, meta=meta, quality=(*trace.quality, check)
    )


def _bounded_meta(value: Any) -> tuple[Any, int]:
    """The trace's metadata (thread and process names, the trace's own keys) with every
    string and key over the limit cut; how many were."""
    if isinstance(value, str):
        return (cut_name(value), 1) if len(value) > NAME_LIMIT else (value, 0)
    if isinstance(value, dict):
        count = 0
        bounded_dict = {}
        for key, item in value.items():
            new_key, cut_key = _bounded_meta(key) if isinstance(key, str) else (key, 0)
            new_item, cut_item = _bounded_meta(item)
            bounded_dict[new_key] = new_item
            count += cut_key + cut_item
        return bounded_dict, count
    if isinstance(value, list | tuple):
        items = [_bounded_meta(item) for item in value]
        return type(value)(i for i, _ in items), sum(c for _, c in items)
    return value, 0


def _bounded_table(
    table: pa.Table, name_columns: tuple[str, ...], value_columns: tuple[str, ...]
) -> tuple[pa.Table, tuple[int, int]]:
    names = values = 0
    for column in name_columns:
        if column in table.column_names:
            capped, count = _bounded_names(table.column(column))
            if count:
                table = _set(table, column, capped)
                names += count
    for column in value_columns:
        if column in table.column_names:
            capped, count = _bounded_values(table.column(column), column == "args")
            if count:
                table = _set(table, column, capped)
                values += count
    return table, (names, values)


def _set(table: pa.Table, column: str, values: pa.ChunkedArray) -> pa.Table:
    index = table.schema.get_field_index(column)
    return table.set_column(index, table.schema.field(column), values)


def _bounded_names(column: pa.ChunkedArray) -> tuple[pa.ChunkedArray, int]:
    """Each chunk's long strings cut (in the dictionary when the column is encoded)."""
    chunks: list[pa.Array] = []
    count = 0
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            dictionary, cut = _cut_strings(chunk.dictionary)
            if cut.any():
                hits = np.isin(chunk.indices.to_numpy(zero_copy_only=False), np.flatnonzero(cut))
                count += int(hits.sum())
                chunk = pa.DictionaryArray.from_arrays(chunk.indices, dictionary)
        else:
            strings, cut = _cut_strings(chunk)
            count += int(cut.sum())
            chunk = strings
        chunks.append(chunk)
    return pa.chunked_array(chunks, column.type), count


def _cut_strings(strings: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The strings with the long ones cut, and a mask of those."""
    over = pc.greater(pc.utf8_length(strings), NAME_LIMIT)
    if not pc.any(over).as_py():
        return strings, np.zeros(len(strings), np.bool_)
    long = np.asarray(over.fill_null(False).to_numpy(zero_copy_only=False), np.bool_)
    cut = [cut_name(strings[int(i)].as_py()) for i in np.flatnonzero(long)]
    return pc.replace_with_mask(strings, pa.array(long), pa.array(cut, strings.type)), long


def _bounded_values(column: pa.ChunkedArray, is_args: bool) -> tuple[pa.ChunkedArray, int]:
    chunks: list[pa.Array] = []
    count = 0
    for chunk in column.chunks:
        # compared in Arrow: no per-row copy of a column of millions (the args) unless some
        # value is over the limit
        sizes = pc.binary_length(chunk)
        over = pc.greater(sizes, ARGS_LIMIT)
        if pc.any(over).as_py():
            long = np.asarray(over.fill_null(False).to_numpy(zero_copy_only=False), np.bool_)
            bytes_of = sizes.fill_null(0).to_numpy(zero_copy_only=False)
            marks = [
                json.dumps({_ARGS_CUT_KEY: int(bytes_of[i])}) if is_args else None
                for i in np.flatnonzero(long)
            ]
            chunk = pc.replace_with_mask(chunk, pa.array(long), pa.array(marks, chunk.type))
            count += int(long.sum())
        chunks.append(chunk)
    return pa.chunked_array(chunks, column.type), count
