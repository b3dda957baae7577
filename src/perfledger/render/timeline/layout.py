"""Where every record goes: synthetic pids and tids, track names, and overflow lanes.

A track (a host thread, a device stream, a device's annotations) holds only slices that nest
or are disjoint: a slice that partially overlaps an earlier one moves to an overflow lane of
its track, itself a thread. Pids and tids are small numbers unique across the file, given in
display order; the real ones are in the track names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import pyarrow as pa

from perfledger.analysis.intervals import crossing_intervals
from perfledger.model import schema
from perfledger.render.timeline.grouping import (
    Int64Array,
    KindCodes,
    int64,
    kind_mask,
    unique_rows,
)

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
    lane = np.full(start.size, -1, dtype=np.int64)
    if _laminar(start, end):  # the usual track: no pass needed
        lane[:] = 0
        return lane
    pending = np.arange(start.size)
    for k in range(MAX_LANES):
        if pending.size == 0:
            break
        crossing = crossing_intervals(start[pending], end[pending])
        lane[pending[~crossing]] = k
        pending = pending[crossing]
    return lane


def _laminar(start: Int64Array, end: Int64Array) -> bool:
    """Whether no interval crosses another (:func:`crossing_intervals` takes none out),
    found cheaply for intervals already in the order that pass sorts them into: by start,
    longer first (a track's events usually are); False when they are not, or cross.

    The same test as the pass's first round, less its sorts: the intervals' order is
    checked rather than sorted, and the depths (a few distinct values) sorted by counting.
    """
    positive = end > start
    s = start[positive]
    e = end[positive]
    n = s.size
    if n <= 1:
        return True
    later = s[1:]
    if not bool(np.all((later > s[:-1]) | ((later == s[:-1]) & (e[1:] <= e[:-1])))):
        return False
    if bool(np.all(e[:-1] <= later)):  # one after the other: none nests or crosses
        return True
    # as the pass: the depth of each interval, its parent the last one a level up before it
    index = np.arange(n, dtype=np.int64)
    depth = index + 1 - np.searchsorted(np.sort(e), s, side="right")
    top = int(depth.max())
    narrow = depth.astype(np.int16) if top <= np.iinfo(np.int16).max else depth
    by_depth = np.argsort(narrow, kind="stable")  # by depth, then position: the keys' order
    del narrow
    stride = np.int64(n + 1)
    key_sorted = depth[by_depth] * stride + by_depth
    del by_depth
    pos = np.searchsorted(key_sorted, (depth - 1) * stride + index, side="left") - 1
    pos_c = np.clip(pos, 0, n - 1)
    parent = key_sorted[pos_c] % stride
    found = (depth >= 2) & (pos >= 0) & (key_sorted[pos_c] // stride == depth - 1)
    parent_end = e[parent]
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
) -> tuple[Int64Array, list[ThreadKey], int]:
    """The thread of every event row (index into the returned keys, -1: left out), and the
    number of slices moved to overflow lanes. ``kinds``: the events' kind codes, when made.

    A track is a host thread or a device stream (device annotations get their own);
    partial overlaps on a track spill into overflow lanes, each its own thread.
    """
    n = events.num_rows
    rank = int64(events, "rank")
    device = int64(events, "device")
    stream = int64(events, "stream")
    on_device = device >= 0
    annotation = kind_mask(events, (schema.DEVICE_ANNOTATION,), kinds) & on_device
    category = np.where(on_device, DEVICE, HOST)
    ident = np.where(on_device, device, int64(events, "pid"))
    lane_class = np.where(annotation, ANNOTATION_LANE, STREAM_LANE)
    start = int64(events, "start_ns")
    end = start + int64(events, "dur_ns")
    step_rows = kind_mask(events, (schema.STEP,), kinds)
    row_thread = np.full(n, -1, dtype=np.int64)
    thread_keys: list[ThreadKey] = []
    if n == 0:
        return row_thread, thread_keys, 0
    keys, track = unique_rows([rank, category, ident, stream, lane_class])
    # the track's columns are no longer needed: let them go before the lanes' passes
    del rank, device, stream, on_device, annotation, category, ident, lane_class
    # few tracks: their numbers sorted by counting (a stable sort of 16-bit keys)
    narrow = track.astype(np.int16) if keys.shape[0] <= np.iinfo(np.int16).max else track
    order = np.argsort(narrow, kind="stable")
    del narrow
    bounds = np.searchsorted(track[order], np.arange(keys.shape[0] + 1))
    del track
    overlapping = 0
    for t in range(keys.shape[0]):  # one pass per track, vectorised inside
        r, cat, idn, strm, cls = (int(v) for v in keys[t])
        rows = order[bounds[t] : bounds[t + 1]]
        lane = track_lanes(start[rows], end[rows])
        overlapping += int((lane > 0).sum())
        process = layout.process(r, cat, idn)
        # host: the thread holding the step marks (the main thread) first, then by start
        main = 0 if step_rows[rows].any() else 1
        first = int(start[rows].min())
        for k in np.unique(lane[lane >= 0]):
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
