"""The rows the report's step timelines draw, read without holding the profile's columns.

A profile of many ranks keeps its events memory-mapped: only the rows of the embedded steps
that a timeline can draw are taken, batch by batch, and their strings become the dictionary
codes of the whole table, so the payload is the same as if every row had been read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.columns import dictionary_codes, lexsort
from perfledger.model import schema
from perfledger.model.accounts import GAPS_SCHEMA
from perfledger.render.report.data import ReportData

Int64Array = npt.NDArray[np.int64]
Span = tuple[int, int]


@dataclass(frozen=True)
class PreparedRows:
    """The rows the step timelines can draw, as numpy arrays, strings as dictionary codes.

    Only the rows of ``spans`` that a timeline of at most ``limit`` events can show are held
    (every row of a span with at most ``limit`` rows, else its ``limit`` longest): the profile's
    other events stay where they are (memory-mapped for a profile of many ranks).
    """

    spans: frozenset[Span]  # the step hulls [start_ns, end_ns) whose rows are held
    limit: int  # events (and gaps) per span held
    events_total: Mapping[Span, int]  # events overlapping each span, held or not
    origin_ns: int | None  # the earliest event start of the whole profile
    rank: Int64Array
    device: Int64Array
    stream: Int64Array
    pid: Int64Array
    start: Int64Array
    dur: Int64Array
    kind: Int64Array
    name: Int64Array
    labels: list[str]  # event names, then "idle: <cause>" for every gap cause
    kinds: list[str]  # event kinds, then "idle: <cause>"
    step_kind: int  # code of the step kind, -1 when absent
    gap_rank: Int64Array
    gap_device: Int64Array
    gap_start: Int64Array
    gap_end: Int64Array
    gap_label: Int64Array  # into labels
    gap_kind: Int64Array  # into kinds

    def covers(self, spans: Sequence[Span], limit: int) -> bool:
        """Whether the timelines of these spans, ``limit`` events each, draw only held rows."""
        return limit <= self.limit and self.spans.issuperset(spans)


def prepare_rows(data: ReportData, spans: Sequence[Span], limit: int) -> PreparedRows:
    """Read the rows of ``spans`` that timelines of at most ``limit`` events can draw.

    The codes of names, kinds and causes are those of the whole tables, so the payload is
    the same as if every row had been read.
    """
    events = data.events
    drawn = ["rank", "kind", "name", "device", "stream", "pid", "start_ns", "dur_ns"]
    held, totals = _held_rows(events.select(drawn), "start_ns", _event_end, spans, limit)
    kind, kinds = held_codes(events, held, "kind")
    name, names = held_codes(events, held, "name")
    gaps = data.gaps if data.gaps is not None else GAPS_SCHEMA.empty_table()
    gap_columns = ["rank", "device", "start_ns", "end_ns", "cause"]
    held_gaps, _ = _held_rows(gaps.select(gap_columns), "start_ns", _gap_end, spans, limit)
    cause, causes = held_codes(gaps, held_gaps, "cause")
    cause_text = [f"idle: {c or 'other'}" for c in causes]
    kind_text = [k or "" for k in kinds]
    origin = pc.min(events.column("start_ns")).as_py() if events.num_rows else None
    return PreparedRows(
        spans=frozenset(spans),
        limit=limit,
        events_total=totals,
        origin_ns=int(origin) if origin is not None else None,
        rank=int64(held, "rank"),
        device=int64(held, "device"),
        stream=int64(held, "stream"),
        pid=int64(held, "pid"),
        start=int64(held, "start_ns"),
        dur=int64(held, "dur_ns"),
        kind=kind,
        name=name,
        labels=[n or "" for n in names] + cause_text,
        kinds=kind_text + cause_text,
        step_kind=kind_text.index(schema.STEP) if schema.STEP in kind_text else -1,
        gap_rank=int64(held_gaps, "rank"),
        gap_device=int64(held_gaps, "device"),
        gap_start=int64(held_gaps, "start_ns"),
        gap_end=int64(held_gaps, "end_ns"),
        gap_label=cause + len(names),
        gap_kind=cause + len(kinds),
    )


def _event_end(batch: pa.RecordBatch, start: Int64Array) -> tuple[Int64Array, Int64Array]:
    """End of each event, and its rank among a step's events (longest first)."""
    dur = _batch_int64(batch, "dur_ns")
    return start + dur, -dur


def _gap_end(batch: pa.RecordBatch, start: Int64Array) -> tuple[Int64Array, Int64Array]:
    """End of each gap, and its rank among a step's gaps (longest first)."""
    end = _batch_int64(batch, "end_ns")
    return end, start - end


def _held_rows(
    table: pa.Table,
    start_column: str,
    end_and_order: Callable[[pa.RecordBatch, Int64Array], tuple[Int64Array, Int64Array]],
    spans: Sequence[Span],
    limit: int,
) -> tuple[pa.Table, dict[Span, int]]:
    """The rows a step timeline of each span can draw, and how many rows overlap each span.

    A span's timeline draws its rows that overlap it, or when there are more than ``limit``
    of them the first ``limit`` in (order, row) order; a shorter limit draws a subset of
    those. Batch by batch, so memory holds one batch's columns and the chosen rows, never
    whole columns. The result keeps one chunk per batch with the batch's dictionaries, so
    its dictionary codes are those of ``table``.
    """
    spans = list(dict.fromkeys(spans))
    no_rows = np.zeros(0, dtype=np.int64)
    # per span: the candidate rows (index into table, ascending) and their order keys
    rows: list[Int64Array] = [no_rows] * len(spans)
    keys: list[Int64Array] = [no_rows] * len(spans)
    totals = [0] * len(spans)
    offset = 0
    for batch in table.to_batches():
        if spans and batch.num_rows:
            start = _batch_int64(batch, start_column)
            end, order = end_and_order(batch, start)
            window = _overlap_window(start, end)
            for i, (lo, hi) in enumerate(spans):
                low, high = window(lo, hi)
                inside = low + np.flatnonzero((start[low:high] < hi) & (end[low:high] > lo))
                totals[i] += int(inside.size)
                r = np.concatenate([rows[i], inside + offset])
                k = np.concatenate([keys[i], order[inside]])
                if r.size > limit:
                    first = np.sort(lexsort((r, k))[:limit])
                    r, k = r[first], k[first]
                rows[i], keys[i] = r, k
        offset += batch.num_rows
    # every span's rows, each once, ascending: marked, not sorted
    marked = np.zeros(offset, dtype=bool)
    for chosen in rows:
        marked[chosen] = True
    held = take_ascending(table, np.flatnonzero(marked))
    return held, dict(zip(spans, totals, strict=True))


def _overlap_window(start: Int64Array, end: Int64Array) -> Callable[[int, int], tuple[int, int]]:
    """For a span [lo, hi): the rows ``first`` to ``last`` outside which no row overlaps it.

    Where the starts are ascending (a rank's events and gaps are), the rows starting before
    ``hi`` come first, and those before the first whose end, or an earlier row's, passes
    ``lo`` all end by ``lo``: two binary searches instead of a pass over every row per span.
    Elsewhere every row."""
    if start.size < 2 or not bool(np.all(start[1:] >= start[:-1])):
        return lambda lo, hi: (0, start.size)
    reach = np.maximum.accumulate(end)

    def window(lo: int, hi: int) -> tuple[int, int]:
        last = int(np.searchsorted(start, hi, side="left"))
        first = int(np.searchsorted(reach, lo, side="right"))
        return min(first, last), last

    return window


def take_ascending(table: pa.Table, rows: Int64Array) -> pa.Table:
    """The rows (ascending) of ``table``, one chunk per batch, each with the batch's dictionaries.

    Batch by batch because Arrow's take of a chunked column first joins its chunks.
    """
    batches = table.to_batches()
    firsts = np.cumsum([0] + [b.num_rows for b in batches])
    bounds = np.searchsorted(rows, firsts)
    return pa.Table.from_batches(
        [
            b.take(pa.array(rows[bounds[j] : bounds[j + 1]] - firsts[j]))
            for j, b in enumerate(batches)
        ],
        schema=table.schema,
    )


def take(table: pa.Table, rows: Int64Array) -> pa.Table:
    """``table.take(rows)`` without joining the chunks of ``table``."""
    order = np.argsort(rows, kind="stable")
    back = np.empty_like(order)
    back[order] = np.arange(order.size)
    return take_ascending(table, rows[order]).take(pa.array(back))


def held_codes(table: pa.Table, held: pa.Table, column: str) -> tuple[Int64Array, list[str | None]]:
    """:func:`dictionary_codes` of ``table`` at the rows ``held`` took from it."""
    if pa.types.is_dictionary(table.schema.field(column).type):
        # held has the chunk dictionaries of table, in order: they unify the same way
        return dictionary_codes(held, column)
    # plain strings are coded in order of first appearance over all rows: only the distinct
    # values are kept, then the held rows are looked up among them
    distinct = pc.unique(table.column(column)).drop_null()
    codes = pc.fill_null(pc.index_in(held.column(column), value_set=distinct), 0)
    return np.asarray(codes.to_numpy(), dtype=np.int64), distinct.to_pylist()


def int64(table: pa.Table, column: str) -> Int64Array:
    """One integer column of ``table`` as an int64 array."""
    return np.asarray(table.column(column).to_numpy(), dtype=np.int64)


def _batch_int64(batch: pa.RecordBatch, column: str) -> Int64Array:
    return np.asarray(batch.column(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def distinct_rows(*columns: Int64Array) -> list[tuple[int, ...]]:
    """Distinct rows of integer columns, sorted."""
    if columns[0].size == 0:
        return []
    order = np.lexsort(columns[::-1])
    stacked = np.stack([np.asarray(c)[order] for c in columns], axis=1)
    first = np.ones(order.size, dtype=bool)
    first[1:] = (stacked[1:] != stacked[:-1]).any(axis=1)
    return [tuple(int(v) for v in row) for row in stacked[first]]
