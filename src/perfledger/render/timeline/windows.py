"""Which records can fall in a window, found without a pass over every record.

A profile's step slices are many windows over one preparation: testing every record of the
trace for every step file costs steps x records, which on a trace of millions of events and
hundreds of steps outweighs formatting the slices themselves. :class:`WindowIndex` sorts the
records by start once; a window then takes the records that start within it or less than
``reach`` before it (a record no longer than ``reach`` cannot overlap the window otherwise),
plus the few records longer than ``reach``. These are candidates, a superset: each file
still applies its exact test to them, so the files hold the same bytes as when every record
was tested.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfledger.analysis.columns import lexsort
from perfledger.render.timeline.grouping import BoolArray, Int64Array, row_type
from perfledger.render.timeline.layout import RowArray
from perfledger.render.timeline.records import CounterSeries, PreparedTimeline


@dataclass(frozen=True)
class SpanIndex:
    """Records of one kind (events, gaps, findings) by start, and those longer than reach."""

    order: Int64Array  # rows by start
    sorted_start: Int64Array
    long_rows: Int64Array  # rows longer than reach, ascending
    reach: int

    @classmethod
    def of(cls, start: Int64Array, end: Int64Array, reach: int) -> SpanIndex:
        order = np.argsort(start, kind="stable").astype(np.int64)
        return cls(
            order=order,
            sorted_start=start[order],
            long_rows=np.flatnonzero(end - start > reach).astype(np.int64),
            reach=reach,
        )

    def candidates(self, lo: int, hi: int) -> Int64Array:
        """Ascending rows that may overlap [lo, hi): every row that does, and some more."""
        first = int(np.searchsorted(self.sorted_start, lo - self.reach, side="right"))
        last = int(np.searchsorted(self.sorted_start, hi, side="left"))
        near = self.order[first:last]
        if self.long_rows.size:
            return np.union1d(near, self.long_rows)
        return np.sort(near)


@dataclass(frozen=True)
class CounterIndex:
    """Counter samples by time, and each series' samples by time (for the carried values)."""

    by_ts: RowArray
    sorted_ts: Int64Array
    by_series: RowArray  # samples by (series, ts), stable
    series_ts: Int64Array  # ts in that order
    series_bounds: list[tuple[int, int]]  # each series' run in by_series, in series order

    @classmethod
    def of(cls, counters: CounterSeries) -> CounterIndex:
        """The index of some samples; its rows in 32-bit integers where they fit (it is
        kept while a rank's step files are written: millions of samples on a large trace)."""
        index_type = row_type(counters.ts.size)
        by_ts = np.argsort(counters.ts, kind="stable").astype(index_type)
        by_series = lexsort((counters.ts, counters.series)).astype(index_type)
        series = counters.series[by_series]
        cuts = np.flatnonzero(series[1:] != series[:-1]) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), int(series.size)]
        return cls(
            by_ts=by_ts,
            sorted_ts=counters.ts[by_ts],
            by_series=by_series,
            series_ts=counters.ts[by_series],
            series_bounds=[(a, b) for a, b in zip(starts, ends, strict=True) if b > a],
        )

    def rows_in(self, lo: int, hi: int) -> Int64Array:
        """Ascending rows of the samples with lo <= ts < hi."""
        first = int(np.searchsorted(self.sorted_ts, lo, side="left"))
        last = int(np.searchsorted(self.sorted_ts, hi, side="left"))
        return np.sort(self.by_ts[first : max(first, last)]).astype(np.int64)

    def carried(self, lo: int) -> Int64Array:
        """Per series (in series order), its last sample before ``lo``: the value it holds
        when a window opens at ``lo`` (the last of equal times, as a stable sort leaves it)."""
        rows = []
        for a, b in self.series_bounds:
            before = int(np.searchsorted(self.series_ts[a:b], lo, side="left"))
            if before:
                rows.append(int(self.by_series[a + before - 1]))
        return np.asarray(rows, dtype=np.int64)


@dataclass(frozen=True)
class WindowIndex:
    """One preparation indexed for windows no longer than ``reach`` ns.

    Attributes:
        events: the events' index (end: the preparation's ``event_end``).
        analysis: one index per analysis record kind (gaps, findings' spans).
        flows: flows by the start of their launch; ``long_flows`` those whose launch is
            longer than reach.
        dropped: True for the event rows the preparation left out.
        counters: the counter samples' index.
    """

    events: SpanIndex
    analysis: list[SpanIndex]
    flows: SpanIndex
    dropped: BoolArray
    counters: CounterIndex

    @classmethod
    def of(
        cls,
        prepared: PreparedTimeline,
        reach: int,
        counters: CounterIndex | None = None,
        analysis: list[SpanIndex] | None = None,
    ) -> WindowIndex:
        """The index of ``prepared``; ``counters`` and ``analysis``: the indexes of its
        counters and analysis slices, when made already (preparations of several groups of
        rows of one placement share them)."""
        ev = prepared.events
        dropped = np.zeros(ev.size, dtype=bool)
        dropped[prepared.dropped] = True
        flow_start = ev.start[prepared.flow_from]
        flow_end = prepared.event_end[prepared.flow_from]
        return cls(
            events=SpanIndex.of(ev.start, prepared.event_end, reach),
            analysis=(
                analysis
                if analysis is not None
                else [SpanIndex.of(a.start, a.start + a.dur, reach) for a in prepared.analysis]
            ),
            flows=SpanIndex.of(flow_start, flow_end, reach),
            dropped=dropped,
            counters=counters or CounterIndex.of(prepared.counters),
        )
