"""Where every record goes: synthetic pids and tids, track names, and overflow lanes.

A track (a host thread, a device stream, a device's annotations) holds only slices that nest
or are disjoint: a slice that partially overlaps an earlier one moves to an overflow lane of
its track, itself a thread. Pids and tids are small numbers unique across the file, given in
display order; the real ones are in the track names.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis.columns import unique_rows
from perfledger.analysis.intervals import compiled_laminar, crossing_intervals
from perfledger.model import schema
from perfledger.render.timeline.grouping import (
    BLOCK_ROWS,
    BoolArray,
    ColumnValues,
    Int64Array,
    KindCodes,
    blocks,
    int64,
    kind_mask,
    row_type,
)

# A row index array: int32 where the rows allow it (:func:`row_type`), else int64.
RowArray = npt.NDArray[np.signedinteger]

# A track needing more overflow lanes than this is pathological; the rest is dropped (counted).
MAX_LANES: Final = 32

# Process categories, in display order within a rank.
HOST, DEVICE, ANALYSIS = 0, 1, 2
# Thread classes inside a device process, in display order.
GAPS_LANE, STREAM_LANE, ANNOTATION_LANE = 0, 1, 2

# A process: (rank, category, id); a thread: (process, sort key within the rank).
ProcessKey = tuple[int, int, int]
ThreadKey = tuple[ProcessKey, tuple[Any, ...]]
# A metadata row: pid, tid (0 for a process), name, sort index, "process" or "thread".
Metadata = tuple[int, int, str, int, str]


def track_lanes(start: Int64Array, end: Int64Array) -> Int64Array:
    """A lane per interval so that every lane holds only nested or disjoint intervals.

    Lane 0 keeps as many as it can; intervals crossing an earlier one go to lane 1, and so
    on; -1 marks intervals beyond MAX_LANES (left out). Zero-length intervals nest anywhere.
    """
    if is_laminar(start, end):  # the usual track: no pass needed
        return np.zeros(start.size, dtype=np.int64)
    lane = np.full(start.size, -1, dtype=np.int64)
    pending = np.arange(start.size)
    for k in range(MAX_LANES):
        if pending.size == 0:
            break
        crossing = crossing_intervals(start[pending], end[pending])
        lane[pending[~crossing]] = k
        pending = pending[crossing]
    return lane


def is_laminar(start: Int64Array, end: Int64Array) -> bool:
    """:func:`_laminar`'s answer, by the compiled pass where it was built (one pass over the
    intervals with a stack of the open ones, not the sorts of depths)."""
    laminar = compiled_laminar(start, end)
    return _laminar(start, end) if laminar is None else laminar


def _laminar(start: Int64Array, end: Int64Array) -> bool:
    """Whether no interval crosses another (:func:`crossing_intervals` takes none out),
    found cheaply for intervals already in the order that pass sorts them into: by start,
    longer first (a track's events usually are); False when they are not, or cross.

    The same test as the pass's first round, less its sorts: the intervals' order is
    checked rather than sorted, and the depths (a few distinct values) sorted by counting.
    """
    positive = end > start
    if bool(positive.all()):  # the usual track: no copies
        s, e = start, end
    else:
        s, e = start[positive], end[positive]
    del positive
    n = s.size
    if n <= 1:
        return True
    later = s[1:]
    if not bool(np.all((later > s[:-1]) | ((later == s[:-1]) & (e[1:] <= e[:-1])))):
        return False
    if bool(np.all(e[:-1] <= later)):  # one after the other: none nests or crosses
        return True
    # Where every interval before one has ended when it starts, the intervals on either side
    # cannot cross: the runs between such cuts are tested a block of rows at a time (a track
    # can hold most of a trace's rows; its temporaries are then those of a block).
    cut = np.maximum.accumulate(e)[:-1] <= later  # cut[i]: a cut before interval i + 1
    size = BLOCK_ROWS
    low = 0
    while low < n:
        high = low + size
        if high >= n:
            high = n
        else:  # the first cut at or after high, else the end
            ahead = int(np.argmax(cut[high - 1 :]))
            high = high + ahead if cut[high - 1 + ahead] else n
        if not _nested(s[low:high], e[low:high]):
            return False
        low = high
    return True


def _nested(s: Int64Array, e: Int64Array) -> bool:
    """Whether no interval crosses its parent (the last one a level up before it), for
    positive intervals by start, longer first, with no interval of another run open at
    their first start (:func:`_laminar`): its depths are those of the whole track.

    Each temporary is let go as soon as used.
    """
    n = s.size
    if n <= 1:
        return True
    depth = np.searchsorted(np.sort(e), s, side="right")
    np.subtract(np.arange(1, n + 1, dtype=np.int64), depth, out=depth)  # index + 1 - ended
    top = int(depth.max())
    narrow = depth.astype(np.int16) if top <= np.iinfo(np.int16).max else depth
    by_depth = np.argsort(narrow, kind="stable")  # by depth, then position: the keys' order
    del narrow
    stride = np.int64(n + 1)
    key_sorted = depth[by_depth]
    key_sorted *= stride
    key_sorted += by_depth
    del by_depth
    wanted = depth - 1  # the key of the level up at each interval's position
    wanted *= stride
    wanted += np.arange(n, dtype=np.int64)
    pos = np.searchsorted(key_sorted, wanted, side="left")
    del wanted
    pos -= 1
    found = pos >= 0
    np.clip(pos, 0, n - 1, out=pos)
    key = key_sorted[pos]
    del key_sorted, pos
    found &= depth >= 2
    found &= key // stride == depth - 1
    del depth
    parent_end = e[key % stride]
    del key
    crossing = found & (parent_end > s) & (e > parent_end)
    return not bool(crossing.any())


class TrackLayout:
    """Synthetic pids/tids and the metadata naming them, in display order."""

    def __init__(self, process_names: Mapping[int, str] | None) -> None:
        self._labels = dict(process_names or {})
        self.processes: dict[ProcessKey, str] = {}  # the name of each
        self.threads: dict[ThreadKey, str] = {}

    def label(self, rank: int) -> str:
        """What a rank is called in its processes' names."""
        return self._labels.get(rank, f"rank {rank}")

    def process(self, rank: int, category: int, ident: int) -> ProcessKey:
        """The key of a process, registered (and named) on first use."""
        key = (rank, category, ident)
        if key not in self.processes:
            label = self.label(rank)
            if category == HOST:
                name = f"{label} host (pid {ident})"
            elif category == DEVICE:
                name = f"{label} device {ident}"
            else:
                name = f"{label} analysis"
            self.processes[key] = name
        return key

    def thread(self, process: ProcessKey, sort: tuple[Any, ...], name: str) -> None:
        """Register a thread of ``process``; ``sort`` orders it within its rank."""
        self.threads.setdefault((process, sort), name)

    def assign(
        self, first_pid: int = 1, first_tid: int = 1
    ) -> tuple[dict[ProcessKey, int], dict[ThreadKey, int], list[Metadata]]:
        """Number processes and threads in display order from the given first numbers;
        return the maps and metadata."""
        pids: dict[ProcessKey, int] = {}
        tids: dict[ThreadKey, int] = {}
        metadata: list[Metadata] = []
        for i, key in enumerate(sorted(self.processes), start=first_pid):
            pids[key] = i
            metadata.append((i, 0, self.processes[key], i, "process"))
        threads = sorted(self.threads, key=lambda t: (t[0], t[1]))
        for j, tkey in enumerate(threads, start=first_tid):
            tids[tkey] = j
            metadata.append((pids[tkey[0]], j, self.threads[tkey], j, "thread"))
        return pids, tids, metadata


def event_tracks(
    events: pa.Table, layout: TrackLayout, kinds: KindCodes | None = None
) -> tuple[RowArray, list[ThreadKey], int]:
    """The thread of every event row (index into the returned keys, -1: left out), and the
    number of slices moved to overflow lanes. ``kinds``: the events' kind codes, when made.

    A track is a host thread or a device stream (device annotations get their own);
    partial overlaps on a track spill into overflow lanes, each its own thread.

    The rows are read a block at a time (:func:`~perfledger.render.timeline.grouping.blocks`)
    and each track's times only at its rows: what stays of every row is its thread and its
    place in its track's rows, in 32-bit integers where they fit.
    """
    n = events.num_rows
    row_thread = np.full(n, -1, dtype=row_type(n))
    thread_keys: list[ThreadKey] = []
    if n == 0:
        return row_thread, thread_keys, 0
    annotation = kind_mask(events, (schema.DEVICE_ANNOTATION,), kinds)
    step_rows = kind_mask(events, (schema.STEP,), kinds)
    keys, track_rows = _track_rows(events, annotation)
    del annotation
    start = ColumnValues(events, "start_ns")
    dur = ColumnValues(events, "dur_ns")
    overlapping = 0
    for t in range(keys.shape[0]):  # one pass per track, vectorised inside
        r, cat, idn, strm, cls = (int(v) for v in keys[t])
        rows = np.concatenate(track_rows[t])
        track_rows[t] = []  # the blocks' rows let go as their tracks are placed
        track_start = start.at(rows)
        track_end = track_start + dur.at(rows)
        lane = track_lanes(track_start, track_end)
        del track_end
        overlapping += int((lane > 0).sum())
        process = layout.process(r, cat, idn)
        # host: the thread holding the step marks (the main thread) first, then by start
        main = 0 if step_rows[rows].any() else 1
        first = int(track_start.min())
        del track_start
        for k in np.flatnonzero(np.bincount(lane[lane >= 0])):  # the lanes used (few)
            suffix = f" (overlap {k})" if k else ""
            if cat == HOST:
                sort: tuple[Any, ...] = (main, first, strm, int(k))
                name = f"thread {strm}{suffix}"
            else:
                sort = (cls, strm, int(k))
                what = " annotations" if cls == ANNOTATION_LANE else ""
                name = f"stream {strm}{what}{suffix}"
            layout.thread(process, sort, name)
            row_thread[rows[lane == k]] = len(thread_keys)
            thread_keys.append((process, sort))
    return row_thread, thread_keys, overlapping


def _track_rows(events: pa.Table, annotation: BoolArray) -> tuple[Int64Array, list[list[RowArray]]]:
    """The distinct tracks (rank, category, id, stream, lane class) in ascending order, and
    the rows of each, ascending, in pieces to concatenate. ``annotation``: the device
    annotation rows.

    Made a block of rows at a time: each block's distinct tracks and its rows of each, then
    the blocks' tracks numbered together; a track's rows are its blocks' in block order.
    """
    index_type = row_type(events.num_rows)
    block_keys: list[Int64Array] = []
    block_rows: list[list[RowArray]] = []
    for low, block in blocks(events):
        device = int64(block, "device")
        on_device = device >= 0
        ident = np.where(on_device, device, int64(block, "pid"))
        keys, track = unique_rows(
            [
                int64(block, "rank"),
                np.where(on_device, DEVICE, HOST),
                ident,
                int64(block, "stream"),
                np.where(
                    annotation[low : low + block.num_rows] & on_device,
                    ANNOTATION_LANE,
                    STREAM_LANE,
                ),
            ]
        )
        del device, on_device, ident
        # few tracks: their numbers sorted by counting (a stable sort of 16-bit keys)
        narrow = track.astype(np.int16) if keys.shape[0] <= np.iinfo(np.int16).max else track
        order = np.argsort(narrow, kind="stable")
        bounds = np.searchsorted(narrow[order], np.arange(keys.shape[0] + 1)).tolist()
        del narrow, track
        rows = (order + low).astype(index_type)
        block_keys.append(keys)
        block_rows.append([rows[a:b] for a, b in itertools.pairwise(bounds)])
        del order, rows
    stacked = np.concatenate(block_keys)
    keys, track = unique_rows([stacked[:, j] for j in range(stacked.shape[1])])
    pieces: list[list[RowArray]] = [[] for _ in range(keys.shape[0])]
    for t, part in zip(track.tolist(), itertools.chain.from_iterable(block_rows), strict=True):
        pieces[t].append(part)
    return keys, pieces
