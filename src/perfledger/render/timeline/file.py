"""One timeline file: its records cut to a window and an event cap, in time order, streamed
out part by part (one rank after another), then its otherData, then renamed into place."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import numpy as np
import numpy.typing as npt

from perfledger.analysis.columns import distinct, unique_rows
from perfledger.errors import PerfledgerError
from perfledger.files import temporary_name
from perfledger.render.timeline.grouping import BoolArray, Int64Array
from perfledger.render.timeline.gzstream import (
    GZIP_HEADER,
    Deflate,
    Writable,
    background_writes,
)
from perfledger.render.timeline.lines import (
    counter_lines,
    flow_lines,
    metadata_lines,
    slice_lines,
)
from perfledger.render.timeline.records import PreparedTimeline
from perfledger.render.timeline.text import Pieces, RowTexts, joined_bytes
from perfledger.render.timeline.windows import WindowIndex
from perfledger.version import __version__

TIMELINE_FORMAT_VERSION: Final = 1
# Records formatted and compressed at a time: smaller chunks leave the writer threads' heaps
# smaller freed blocks to keep (peak RSS of a large trace's step files 0.88x of 100,000's
# with Arrow on the C heap, as in analyze; the same CPU).
_CHUNK_RECORDS: Final = 25_000
# Record classes: at equal ts a slice is written before the flow ends and counters at it.
_SLICE, _INSTANT, _FLOW_OUT, _FLOW_IN, _COUNTER = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class TimelineStats:
    """What one written timeline holds.

    Attributes:
        path: the file written.
        events_total: trace events (slices and instants of the events table) in the window.
        events_written: those written (fewer when ``max_events`` cut the timeline).
        truncated_at_ns: where the cut fell (absolute ns), or None when nothing was cut.
        flows: launch → task flows written.
        counters: counter samples written.
        overlapping: slices moved to overflow lanes because they partially overlapped.
        dropped: slices left out because their track needed more than MAX_LANES lanes.
    """

    path: Path
    events_total: int
    events_written: int
    truncated_at_ns: int | None
    flows: int
    counters: int
    overlapping: int
    dropped: int


def overlaps(
    start: Int64Array, dur: Int64Array, lo: int, hi: int, end: Int64Array | None = None
) -> BoolArray:
    """Slices that overlap [lo, hi); an instant counts from ``lo`` on."""
    end = start + dur if end is None else end
    inside: BoolArray = (start < hi) & ((end > lo) | ((dur == 0) & (start >= lo)))
    return inside


def _record_order(
    ts: Int64Array,
    cls: npt.NDArray[np.int8],
    longer_first: Int64Array,
    nesting: npt.NDArray[np.int8],
) -> Int64Array:
    """The stable order of records by (ts, class, longer_first, nesting).

    One stable sort by time and class packed into one key, then only the runs of records
    at the same time and class sorted by the other keys: the same order as a stable sort by
    all four keys, at a fraction of its cost (ties are a small part of a file's records).
    """
    if ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    low = int(ts.min())
    if int(ts.max()) - low >= 1 << 59:  # the packed key would overflow: sort by every key
        return np.lexsort((nesting, longer_first, cls, ts)).astype(np.int64)
    key = ts - low
    key *= 8
    key += cls  # classes are 0 to 4
    order = np.argsort(key, kind="stable").astype(np.int64, copy=False)
    sorted_key = key[order]
    del key
    same = sorted_key[1:] == sorted_key[:-1]
    del sorted_key
    if not same.any():
        return order
    in_run = np.zeros(same.size + 1, dtype=bool)
    in_run[1:] |= same
    in_run[:-1] |= same
    at = np.flatnonzero(in_run)
    del in_run
    # a number per run of equal keys, at the tied records only
    run = np.cumsum(~same, dtype=np.int64)  # of record i + 1
    run_at = np.where(at > 0, run[np.maximum(at - 1, 0)], 0)
    del run, same
    tied = order[at]
    order[at] = tied[np.lexsort((nesting[tied], longer_first[tied], run_at))]
    return order


@dataclass
class _PartFigures:
    """What one part (a rank) put into one file."""

    rank: int | None
    events_total: int
    events_written: int
    truncated_at_ns: int | None
    flows: int
    counters: int
    overlapping: int
    dropped: int
    flows_unplaceable: int


# How every timeline file begins, and how its events end before otherData: what tells a file
# perfledger wrote from another (``perfledger timeline --force`` replaces only those).
TIMELINE_HEAD: Final = '{"traceEvents":[\n'
TIMELINE_TAIL: Final = '\n],\n"otherData":'


class TimelineFile:
    """One timeline file, written part by part (one rank after another), then closed.

    Between two parts nothing stays open: the file is reopened to append, and a gzip file's
    single deflate stream goes on in segments, each compressed afresh and ended by a sync
    flush (a byte-aligned, non-final block), so a profile with many step files holds no
    compressor per file while other ranks are written. The last part's segment is not
    flushed: the trailer follows in it and ends the stream, so a file of one part has the
    bytes :class:`gzip.GzipFile` writes.
    """

    def __init__(
        self,
        path: Path,
        *,
        origin: int,
        window: tuple[int, int] | None,
        max_events: int | None,
    ) -> None:
        # a zero-length window (a step of no length) gives a timeline with no event
        if window is not None and window[1] < window[0]:
            raise PerfledgerError(
                f"timeline window [{window[0]}, {window[1]}) ends before it starts for {path}"
            )
        self.path = path
        self.origin = origin
        self.window = window
        self.max_events = max_events  # per part
        self.parts: list[_PartFigures] = []
        self._gzip = path.name.endswith(".gz")
        self._deflate = Deflate() if self._gzip else None
        self._pending = TIMELINE_HEAD  # written with the first part's metadata
        self._empty = True  # no record yet: the next one has no leading ",\n"
        self._closed: TimelineStats | None = None  # the figures, once closed
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temporary_name(path)
        try:
            with self._tmp.open("wb") as raw:
                if self._gzip:
                    raw.write(GZIP_HEADER)
        except BaseException:
            self.abort()
            raise

    @property
    def flows(self) -> int:
        """Flows written so far: the next part's flow ids go on from there."""
        return sum(p.flows for p in self.parts)

    def _sink(self, raw: IO[bytes]) -> Writable:
        """Where the bytes of a part go: through the deflate stream for a gzip file."""
        if self._deflate is None:
            return raw
        self._deflate.attach(raw)
        return self._deflate

    def add(
        self,
        prepared: PreparedTimeline,
        *,
        rank: int | None = None,
        last: bool = True,
        index: WindowIndex | None = None,
    ) -> None:
        """Append the records of one preparation (a rank's) that fall in this file.

        ``last``: no part follows (the deflate segment stays open for the trailer).
        ``index``: the preparation indexed for windows at least as long as this file's: only
        the records it names for the window are tested (same records written).
        """
        if self.window is None:
            index = None
        if prepared.origin != self.origin:
            raise ValueError("every part of a timeline file has the file's origin")
        with self._tmp.open("ab") as raw:
            with background_writes(self._sink(raw)) as write:
                self._add(prepared, write, rank, index)
            if self._deflate is not None and not last:
                self._deflate.end_segment()

    def _add(
        self,
        prepared: PreparedTimeline,
        write: Callable[[memoryview], None],
        rank: int | None,
        index: WindowIndex | None,
    ) -> None:
        origin = prepared.origin
        ev = prepared.events
        window = self.window
        max_events = self.max_events
        lo, hi = window if window is not None else (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
        if index is None:
            in_window = overlaps(ev.start, ev.dur, lo, hi, prepared.event_end)
            in_window[prepared.dropped] = False
            event_rows = np.flatnonzero(in_window)
        else:
            near = index.events.candidates(lo, hi)
            near = near[~index.dropped[near]]
            event_rows = near[
                overlaps(ev.start[near], ev.dur[near], lo, hi, prepared.event_end[near])
            ]
        total = int(event_rows.size)
        cut = hi
        truncated_at: int | None = None
        if max_events is not None and total > max_events:
            starts = np.sort(ev.start[event_rows])
            truncated_at = int(starts[max_events]) if max_events >= 0 else int(starts[0])
            cut = min(hi, truncated_at)
            event_rows = event_rows[ev.start[event_rows] < cut]

        records: list[tuple[int, Int64Array]] = [(0, event_rows)]  # source, rows
        for i, a in enumerate(prepared.analysis, start=1):
            if index is None:
                rows = np.flatnonzero(overlaps(a.start, a.dur, lo, cut))
            else:
                near = index.analysis[i - 1].candidates(lo, cut)
                rows = near[overlaps(a.start[near], a.dur[near], lo, cut)]
            records.append((i, rows))

        # flows whose both ends are written
        kept = np.zeros(ev.size, dtype=bool)
        kept[event_rows] = True
        if index is None:
            flow_sel = np.flatnonzero(kept[prepared.flow_from] & kept[prepared.flow_to])
        else:
            near = index.flows.candidates(lo, cut)
            flow_sel = near[kept[prepared.flow_from[near]] & kept[prepared.flow_to[near]]]
        f_from = prepared.flow_from[flow_sel]
        f_to = prepared.flow_to[flow_sel]
        f_out_ts = prepared.flow_out_ts[flow_sel]
        f_in_ts = prepared.flow_in_ts[flow_sel]
        # ids numbered by launch time, so the same profile always gets the same ids
        flow_order = np.lexsort((f_to, ev.start[f_from]))
        f_from, f_to = f_from[flow_order], f_to[flow_order]
        f_out_ts, f_in_ts = f_out_ts[flow_order], f_in_ts[flow_order]
        first_id = self.flows + 1  # ids go on from the parts before
        flow_ids = np.arange(first_id, first_id + f_from.size, dtype=np.int64)

        c = prepared.counters
        if index is None:
            counter_rows = np.flatnonzero((c.ts >= max(lo, origin)) & (c.ts < cut))
        else:
            counter_rows = index.counters.rows_in(max(lo, origin), cut)
        counter_ts = c.ts[counter_rows]
        if window is not None and c.ts.size:
            # the value each series holds when the window opens
            if index is not None:
                carried = index.counters.carried(lo)
            else:
                before = np.flatnonzero(c.ts < lo)
                order = before[np.lexsort((c.ts[before], c.series[before]))]
                last = np.ones(order.size, dtype=bool)
                last[:-1] = c.series[order][1:] != c.series[order][:-1]
                carried = order[last]
            if carried.size:
                counter_rows = np.concatenate([carried, counter_rows])
                counter_ts = np.concatenate([np.full(carried.size, lo, np.int64), counter_ts])

        # one global order: time, then record class (slices before flow ends), longer first.
        # The sort spans every record of the file (millions on large traces): narrow key types,
        # and each key is let go as soon as it is merged.
        n_parts = len(records) + 3
        src_list: list[npt.NDArray[np.int8]] = []
        local_list: list[npt.NDArray[np.int32]] = []
        ts_list: list[Int64Array] = []
        cls_list: list[npt.NDArray[np.int8]] = []
        dur_list: list[Int64Array] = []
        nest_list: list[npt.NDArray[np.int8]] = []
        for src, rows in records:
            s = ev if src == 0 else prepared.analysis[src - 1]
            src_list.append(np.full(rows.size, src, np.int8))
            local_list.append(np.arange(rows.size, dtype=np.int32))
            ts_list.append(s.start[rows])
            cls_list.append(np.where(s.instant[rows], _INSTANT, _SLICE).astype(np.int8))
            dur_list.append(s.dur[rows])
            nest_list.append(s.nesting[rows].astype(np.int8))
        for src, ts, cls in (
            (n_parts - 3, f_out_ts, _FLOW_OUT),
            (n_parts - 2, f_in_ts, _FLOW_IN),
            (n_parts - 1, counter_ts, _COUNTER),
        ):
            src_list.append(np.full(ts.size, src, np.int8))
            local_list.append(np.arange(ts.size, dtype=np.int32))
            ts_list.append(ts)
            cls_list.append(np.full(ts.size, cls, np.int8))
            dur_list.append(np.zeros(ts.size, np.int64))
            nest_list.append(np.zeros(ts.size, np.int8))
        src_all = np.concatenate(src_list)
        local_all = np.concatenate(local_list)
        del src_list, local_list
        longer_first = np.concatenate(dur_list)
        np.negative(longer_first, out=longer_first)
        del dur_list
        # records are concatenated by source, each source's in order: the (source, row)
        # tie-break is the order a stable sort keeps
        ts_all = np.concatenate(ts_list)
        del ts_list  # each key's parts let go once merged: the sort holds one copy of each
        cls_all = np.concatenate(cls_list)
        del cls_list
        nest_all = np.concatenate(nest_list)
        del nest_list
        order = _record_order(ts_all, cls_all, longer_first, nest_all)
        del longer_first, nest_all, cls_all, ts_all

        def lines_of(src: int, local: Int64Array) -> Pieces | RowTexts:
            if src < len(records):
                s = ev if src == 0 else prepared.analysis[src - 1]
                return slice_lines(s, records[src][1][local], origin)
            if src == n_parts - 3:
                return flow_lines(ev, f_from[local], f_out_ts[local], flow_ids[local], "s", origin)
            if src == n_parts - 2:
                return flow_lines(ev, f_to[local], f_in_ts[local], flow_ids[local], "f", origin)
            return counter_lines(c, counter_rows[local], counter_ts[local], origin)

        used_pids = _used_pids(ev.pid[event_rows])
        used_threads = _used_threads(ev.pid[event_rows], ev.tid[event_rows])
        for src, rows in records[1:]:
            a = prepared.analysis[src - 1]
            used_pids |= _used_pids(a.pid[rows])
            used_threads |= _used_threads(a.pid[rows], a.tid[rows])
        used_pids |= _used_pids(c.pid[counter_rows])
        metadata = metadata_lines(prepared, used_pids, used_threads)

        head = ",\n".join(metadata)
        if head and not self._empty:
            head = ",\n" + head
        if self._pending or head:
            write(memoryview((self._pending + head).encode()))
        self._pending = ""
        self._empty = self._empty and not metadata
        for begin in range(0, order.size, _CHUNK_RECORDS):
            chunk = order[begin : begin + _CHUNK_RECORDS]
            chunk_src = src_all[chunk]
            local = local_all[chunk].astype(np.int64)
            parts = []
            for value in np.unique(chunk_src):
                where = np.flatnonzero(chunk_src == value)
                parts.append((lines_of(int(value), local[where]), where))
            data = joined_bytes(parts, int(chunk.size))
            del parts
            if self._empty:
                data = data[2:]  # the leading ",\n" of the very first record
                self._empty = False
            write(data)
        self.parts.append(
            _PartFigures(
                rank=rank,
                events_total=total,
                events_written=int(event_rows.size),
                truncated_at_ns=truncated_at,
                flows=int(f_from.size),
                counters=int(counter_rows.size),
                overlapping=prepared.overlapping,
                dropped=prepared.dropped_count,
                flows_unplaceable=prepared.flows_unplaceable,
            )
        )

    def close(self) -> TimelineStats:
        """Write otherData and end the file; rename it into place. Closing it again gives the
        same figures and writes nothing."""
        if self._closed is not None:
            return self._closed
        parts = self.parts
        cuts = [p.truncated_at_ns for p in parts if p.truncated_at_ns is not None]
        stats = TimelineStats(
            path=self.path,
            events_total=sum(p.events_total for p in parts),
            events_written=sum(p.events_written for p in parts),
            truncated_at_ns=min(cuts) if cuts else None,
            flows=sum(p.flows for p in parts),
            counters=sum(p.counters for p in parts),
            overlapping=sum(p.overlapping for p in parts),
            dropped=sum(p.dropped for p in parts),
        )
        other: dict[str, Any] = {
            "generator": f"perfledger {__version__}",
            "timeline_format_version": TIMELINE_FORMAT_VERSION,
            "origin_ns": self.origin,
            "window_ns": list(self.window) if self.window is not None else None,
            "events_total": stats.events_total,
            "events_written": stats.events_written,
            "truncated_at_ns": stats.truncated_at_ns,
            "overlapping_moved": stats.overlapping,
            "dropped": stats.dropped,
            "flows_unplaceable": sum(p.flows_unplaceable for p in parts),
        }
        if len(parts) > 1:
            # each rank is cut on its own: where, and how much it kept
            other["max_events_per_rank"] = self.max_events
            other["ranks"] = [
                {
                    "rank": p.rank,
                    "events_total": p.events_total,
                    "events_written": p.events_written,
                    "truncated_at_ns": p.truncated_at_ns,
                }
                for p in parts
            ]
        # traceEvents first: an importer that stops at a key it does not know (older Perfetto
        # did, at anything but traceEvents) loses only otherData
        trailer = (
            self._pending
            + TIMELINE_TAIL
            + json.dumps(other, sort_keys=True, separators=(",", ":"))
            + "}\n"
        )
        try:
            with self._tmp.open("ab") as raw:
                self._sink(raw).write(memoryview(trailer.encode()))
                if self._deflate is not None:
                    self._deflate.finish()
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        self._deflate = None
        self._closed = stats
        return stats

    def abort(self, remove_closed: bool = False) -> None:
        """Leave nothing behind of an unfinished file (an interrupted file must not look
        whole); ``remove_closed``: the file too when it was closed already (the files of a
        failed write that go together). A file closed already is otherwise kept: it is
        whole, and may be the user's only copy."""
        self._deflate = None
        self._tmp.unlink(missing_ok=True)
        if remove_closed and self._closed is not None:
            self.path.unlink(missing_ok=True)
            self._closed = None


# Pids and tids are small synthetic numbers: the distinct ones are found by counting them
# when their range is at most this (faster than hashing every record's).
_COUNTED_RANGE: Final = 1 << 20


def _used_pids(pid: npt.NDArray[np.integer]) -> set[int]:
    """The distinct pids of some records."""
    if pid.size == 0:
        return set()
    low = int(pid.min())
    if int(pid.max()) - low < _COUNTED_RANGE:
        return set((np.flatnonzero(np.bincount(pid - low)) + low).tolist())
    return set(distinct(pid.astype(np.int64)).tolist())


def _used_threads(pid: Int64Array, tid: Int64Array) -> set[tuple[int, int]]:
    """The distinct (pid, tid) pairs of some records."""
    if pid.size == 0:
        return set()
    pid_low, tid_low = int(pid.min()), int(tid.min())
    pid_span = int(pid.max()) - pid_low + 1
    tid_span = int(tid.max()) - tid_low + 1
    if pid_span * tid_span <= _COUNTED_RANGE:
        pairs = np.flatnonzero(np.bincount((pid - pid_low) * tid_span + (tid - tid_low)))
        return {
            (int(p) + pid_low, int(t) + tid_low)
            for p, t in zip(*np.divmod(pairs, tid_span), strict=True)
        }
    return {(int(p), int(t)) for p, t in unique_rows([pid, tid])[0]}
