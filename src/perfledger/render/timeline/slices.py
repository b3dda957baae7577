"""The slices of a timeline's records by origin: the columns every origin fills, and the
analysis lanes (findings' spans, steps' critical paths) drawn beside a rank's events."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.model.whatif import PathSpan
from perfledger.render.timeline.grouping import BoolArray, Int64Array
from perfledger.render.timeline.layout import (
    ANALYSIS,
    ProcessKey,
    ThreadKey,
    TrackLayout,
    track_lanes,
)
from perfledger.render.timeline.text import Builder, join, json_strings

# A piece of a step's critical path with its rank and step (the critical-path track).
RankPathSpan = tuple[int, int, PathSpan]
# The critical-path lanes sort after the findings' lanes of a rank's analysis process.
CRITICAL_PATH_LANE: Final = 2

PidMap = Mapping[ProcessKey, int]
TidMap = Mapping[ThreadKey, int]


@dataclass(frozen=True)
class Slices:
    """Slices and instants of one origin (events, gaps or findings), columns by row."""

    start: Int64Array
    dur: Int64Array
    pid: Int64Array
    tid: Int64Array
    instant: BoolArray
    nesting: npt.NDArray[np.int8]  # tie-break among equal start and duration
    name_index: Int64Array
    names: pa.Array  # JSON-escaped distinct names, indexed by name_index
    cat_index: npt.NDArray[np.integer]
    cats: pa.Array
    # adds the pieces of the JSON args objects of the given rows to a record's line
    args: Callable[[Builder, Int64Array], None]
    # ``,"cname":"..."`` per distinct name (same index as names), or None
    colours: pa.Array | None = None

    @property
    def size(self) -> int:
        """The number of rows."""
        return int(self.start.size)

    # The texts around a record's name and category, per distinct one, made once for all
    # the files written (two threads making one at once make the same).
    @functools.cached_property
    def name_pieces(self) -> pa.Array:
        """``,"name":<name>,"cat":`` per distinct name."""
        return join(',"name":', self.names, ',"cat":')

    @functools.cached_property
    def cat_pieces(self) -> pa.Array:
        """``<category>,"args":`` per distinct category."""
        return join(self.cats, ',"args":')

    @functools.cached_property
    def end_pieces(self) -> pa.Array:
        """A record's end after its args: its colour (per distinct name) and ``}``."""
        return join(self.colours, "}") if self.colours is not None else pa.array(["}"])


def finding_spans(
    findings: Sequence[Mapping[str, Any]], layout: TrackLayout
) -> Callable[[PidMap, TidMap], Slices] | None:
    """Register the findings lanes of each rank; the builder of the spans' slices (None when
    no finding has a span)."""
    rows: list[tuple[int, int, int, str, str]] = []
    for finding in findings:
        for span in finding.get("spans") or ():
            try:
                lo, hi = int(span["start_ns"]), int(span["end_ns"])
                owner = int(span.get("rank", 0))
            except (KeyError, TypeError, ValueError):
                continue
            if hi >= lo:
                rows.append(
                    (owner, lo, hi, str(finding.get("id", "")), str(finding.get("title", "")))
                )
    if not rows:
        return None
    rank = np.array([r[0] for r in rows], dtype=np.int64)
    start = np.array([r[1] for r in rows], dtype=np.int64)
    end = np.array([r[2] for r in rows], dtype=np.int64)
    lane = np.zeros(len(rows), dtype=np.int64)
    for r in np.unique(rank):
        sel = np.flatnonzero(rank == r)
        lane[sel] = track_lanes(start[sel], end[sel])
        process = layout.process(int(r), ANALYSIS, 0)
        for k in np.unique(lane[sel]):
            if k >= 0:
                suffix = f" (overlap {k})" if k else ""
                layout.thread(process, (1, int(k)), f"findings{suffix}")
    ids = [r[3] for r in rows]
    titles = [r[4] for r in rows]

    def build(pids: PidMap, tids: TidMap) -> Slices:
        n = len(rows)
        pid = np.zeros(n, dtype=np.int64)
        tid = np.zeros(n, dtype=np.int64)
        for i in range(n):  # one row per finding span: a handful
            if lane[i] < 0:
                pid[i] = -1
                continue
            process = (int(rank[i]), ANALYSIS, 0)
            pid[i] = pids[process]
            tid[i] = tids[(process, (1, int(lane[i])))]
        title_json = json_strings(titles)

        titles_args = join('{"title":', title_json, "}")

        def args(line: Builder, sel: Int64Array) -> None:
            line.table(titles_args, sel)

        keep = pid >= 0
        return Slices(
            start=start[keep],
            dur=(end - start)[keep],
            pid=pid[keep],
            tid=tid[keep],
            instant=np.zeros(int(keep.sum()), dtype=bool),
            nesting=np.zeros(int(keep.sum()), dtype=np.int8),
            name_index=np.arange(n, dtype=np.int64)[keep],
            names=json_strings(ids),
            cat_index=np.zeros(int(keep.sum()), dtype=np.int8),
            cats=json_strings(["finding"]),
            args=args,
        )

    return build


def critical_path_slices(
    spans: Sequence[RankPathSpan], layout: TrackLayout
) -> Callable[[PidMap, TidMap], Slices] | None:
    """Register the ``critical path`` lanes of each rank (an overflow lane where the paths
    of two steps cross); the builder of the path's slices (None without spans)."""
    if not spans:
        return None
    rank = np.array([r for r, _, _ in spans], dtype=np.int64)
    step = np.array([st for _, st, _ in spans], dtype=np.int64)
    start = np.array([p.start_ns for _, _, p in spans], dtype=np.int64)
    end = np.array([p.end_ns for _, _, p in spans], dtype=np.int64)
    lane = np.zeros(len(spans), dtype=np.int64)
    for r in np.unique(rank).tolist():  # a loop over ranks
        sel = np.flatnonzero(rank == r)
        lane[sel] = track_lanes(start[sel], end[sel])
        process = layout.process(int(r), ANALYSIS, 0)
        for k in np.unique(lane[sel]).tolist():
            if k >= 0:
                suffix = f" (overlap {k})" if k else ""
                layout.thread(process, (CRITICAL_PATH_LANE, int(k)), f"critical path{suffix}")
    label_codes, labels = _text_codes([p.shown for _, _, p in spans])
    class_codes, classes = _text_codes([p.category for _, _, p in spans])
    lane_codes, lane_names = _text_codes([p.lane for _, _, p in spans])

    def build(pids: PidMap, tids: TidMap) -> Slices:
        pid = np.full(len(spans), -1, dtype=np.int64)
        tid = np.zeros(len(spans), dtype=np.int64)
        for r in np.unique(rank).tolist():  # a loop over ranks and lanes
            process = (int(r), ANALYSIS, 0)
            for k in np.unique(lane[rank == r]).tolist():
                if k >= 0:
                    sel = (rank == r) & (lane == k)
                    pid[sel] = pids[process]
                    tid[sel] = tids[(process, (CRITICAL_PATH_LANE, int(k)))]
        keep = np.flatnonzero(pid >= 0)
        class_json = json_strings(classes)
        lane_json = json_strings(lane_names)

        classes_text = join(',"class":', class_json, ',"lane":')
        lanes_text = join(lane_json, "}")

        def args(line: Builder, rows: Int64Array) -> None:
            at = keep[rows]
            line.ints(step[at], before='{"step":')
            line.table(classes_text, class_codes[at])
            line.table(lanes_text, lane_codes[at])

        return Slices(
            start=start[keep],
            dur=(end - start)[keep],
            pid=pid[keep],
            tid=tid[keep],
            instant=np.zeros(keep.size, dtype=bool),
            nesting=np.zeros(keep.size, dtype=np.int8),
            name_index=label_codes[keep],
            names=json_strings(labels),
            cat_index=np.zeros(keep.size, dtype=np.int8),
            cats=json_strings(["critical_path"]),
            args=args,
        )

    return build


def _text_codes(values: Sequence[str]) -> tuple[Int64Array, list[str]]:
    """Each value's index among the distinct values (in first-seen order), and those."""
    distinct = list(dict.fromkeys(values))
    index = {value: i for i, value in enumerate(distinct)}
    return np.array([index[v] for v in values], dtype=np.int64), distinct
