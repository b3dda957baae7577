"""Writing timelines: the whole profile, its step slices, a window of some ranks.

Every file is written from a :class:`PreparedTimeline`; a profile of several ranks is
prepared and written one rank at a time (see the package doc).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.columns import distinct
from perfledger.memory import (
    arrow_maps,
    drop_mapped_pages,
    dropping_mapped_pages,
    release_freed_memory,
)
from perfledger.model import schema
from perfledger.model.accounts import StepWindow
from perfledger.render.timeline.file import TimelineFile, TimelineStats, overlaps
from perfledger.render.timeline.grouping import Int64Array, blocks, int64, row_type
from perfledger.render.timeline.records import (
    Placement,
    PreparedTimeline,
    check_events,
    place_timeline,
    prepare_all_rows,
    prepare_rows,
    prepare_timeline,
    profile_origin_ns,
)
from perfledger.render.timeline.slices import RankPathSpan
from perfledger.render.timeline.windows import CounterIndex, SpanIndex, WindowIndex

# A step slice holds at most this many trace events, so one step always opens fast.
STEP_MAX_EVENTS: Final = 200_000
STEP_WRITERS: Final = 4  # step files written at the same time, at most


def write_timeline(
    path: Path,
    events: pa.Table,
    *,
    gaps: pa.Table | None = None,
    counters: pa.Table | None = None,
    window: tuple[int, int] | None = None,
    max_events: int | None = None,
    process_names: Mapping[int, str] | None = None,
    findings: Sequence[Mapping[str, Any]] | None = None,
    origin_ns: int | None = None,
    device_busy: bool = True,
    critical_path: Sequence[RankPathSpan] = (),
) -> TimelineStats:
    """Write the Chrome trace of a profile (gzip when ``path`` ends with ``.gz``).

    Args:
        path: the output file; written under a temporary name, then renamed.
        events: canonical events (:data:`perfledger.model.schema.EVENTS_SCHEMA`).
        gaps: idle gaps (:data:`perfledger.model.accounts.GAPS_SCHEMA`), shown by cause.
        counters: counter samples (:data:`perfledger.model.schema.COUNTERS_SCHEMA`).
        window: only what overlaps [start_ns, end_ns) (absolute ns, the events' time base).
        max_events: keep only the earliest events, at most this many.
        process_names: a label per rank (host name, job name), else ``rank <n>``.
        findings: findings whose ``spans`` (``[{rank, start_ns, end_ns}]``) become slices.
        origin_ns: time zero of the file; the first event by default. Step slices share
            the origin of the whole profile so their times agree with it.
        device_busy: add the device busy % counters of the device tasks.
        critical_path: the steps' critical paths, (rank, step, span), on a track per rank.
    """
    prepared = prepare_timeline(
        events,
        gaps=gaps,
        counters=counters,
        findings=findings,
        process_names=process_names,
        origin_ns=origin_ns,
        device_busy=device_busy,
        critical_path=critical_path,
    )
    stats = write_prepared_timeline(path, prepared, window=window, max_events=max_events)
    del prepared
    release_freed_memory()
    return stats


def write_prepared_timeline(
    path: Path,
    prepared: PreparedTimeline,
    *,
    window: tuple[int, int] | None = None,
    max_events: int | None = None,
) -> TimelineStats:
    """Write one timeline file from a preparation (see :func:`write_timeline` for the
    arguments); the preparation can serve more files after it."""
    out = TimelineFile(Path(path), origin=prepared.origin, window=window, max_events=max_events)
    try:
        out.add(prepared)
    except BaseException:
        out.abort()
        raise
    return out.close()


def write_step_timelines(
    dir: Path,  # noqa: A002 - the name of the public contract
    events: pa.Table,
    windows: Sequence[StepWindow],
    gaps: pa.Table | None,
    counters: pa.Table | None,
    *,
    findings: Sequence[Mapping[str, Any]] | None = None,
    process_names: Mapping[int, str] | None = None,
    max_events: int | None = STEP_MAX_EVENTS,
    writers: int = STEP_WRITERS,
) -> list[Path]:
    """Write one ``step_<n>.json.gz`` per step (the hull of that step's windows over ranks).

    The tracks, names and time origin are those of the whole profile, so a step slice and
    the full timeline line up; each slice holds at most ``max_events`` events. ``writers``
    files are written at the same time, at most.
    """
    if not _step_hulls(windows):
        Path(dir).mkdir(parents=True, exist_ok=True)
        return []
    prepared = prepare_timeline(
        events,
        gaps=gaps,
        counters=counters,
        findings=findings,
        process_names=process_names,
    )
    written = write_prepared_step_timelines(
        dir, prepared, windows, max_events=max_events, writers=writers
    )
    del prepared
    release_freed_memory()
    return written


def write_prepared_step_timelines(
    dir: Path,  # noqa: A002 - as write_step_timelines
    prepared: PreparedTimeline,
    windows: Sequence[StepWindow],
    *,
    max_events: int | None = STEP_MAX_EVENTS,
    writers: int = STEP_WRITERS,
) -> list[Path]:
    """:func:`write_step_timelines` from a preparation, such as the whole timeline's: the
    slices then share its tracks and time origin without preparing the profile again."""
    out_dir = Path(dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hulls = _step_hulls(windows)
    steps = sorted(hulls)
    written = [out_dir / f"step_{step}.json.gz" for step in steps]
    # Files are independent and their formatting and compression release the GIL: a few
    # at a time use the cores the machine has.
    with _step_pool(len(steps), writers) as pool:
        done = [
            pool.submit(
                write_prepared_timeline, target, prepared, window=hulls[step], max_events=max_events
            )
            for step, target in zip(steps, written, strict=True)
        ]
        for future in done:
            future.result()
    return written


@dataclass(frozen=True)
class TimelinePart:
    """One rank's share of a profile's timelines: its events and its idle gaps.

    Attributes:
        rank: the rank; the profile's counters and findings' spans of this rank go with it.
        events: the rank's canonical events (:data:`perfledger.model.schema.EVENTS_SCHEMA`).
        gaps: the rank's idle gaps (:data:`perfledger.model.accounts.GAPS_SCHEMA`).
        critical_path: the rank's steps' critical paths: (rank, step, span), shown on its
            ``critical path`` track.
    """

    rank: int
    events: pa.Table
    gaps: pa.Table | None = None
    critical_path: tuple[RankPathSpan, ...] = ()


def write_profile_timelines(
    path: Path | None,
    step_dir: Path,
    parts: Sequence[TimelinePart],
    windows: Sequence[StepWindow],
    *,
    counters: pa.Table | None = None,
    findings: Sequence[Mapping[str, Any]] | None = None,
    process_names: Mapping[int, str] | None = None,
    max_events: int | None = None,
    step_max_events: int | None = STEP_MAX_EVENTS,
) -> tuple[TimelineStats | None, list[Path]]:
    """Write the whole timeline and one ``step_<n>.json.gz`` per step, one rank at a time.

    Each part (rank) is prepared once, written into every file, and let go before the next:
    memory is that of one rank's preparation, whatever the number of ranks. Ranks are
    written in the order given, their pids and tids numbered on from the rank before (in
    rank order, the numbers of a timeline written all at once). The files share one time
    origin, the profile's first event (else first counter sample). A rank holds at most
    ``ceil(max_events / len(parts))`` events of the whole timeline and
    ``ceil(step_max_events / len(parts))`` of a step slice: its earliest ones (see the
    package doc). Counters and findings' spans go with the part of their rank; those of a
    rank no part has go with the last part.

    ``path`` None: the step files only.

    Returns:
        the whole timeline's figures (None without it) and the step files written, in step
        order.
    """
    for part in parts:
        check_events(part.events)
    origin = _parts_origin(parts, counters)
    hulls = _step_hulls(windows)
    steps = sorted(hulls)
    whole = (
        TimelineFile(
            Path(path), origin=origin, window=None, max_events=_share(max_events, len(parts))
        )
        if path is not None
        else None
    )
    files = [whole] if whole is not None else []
    try:
        if steps:
            Path(step_dir).mkdir(parents=True, exist_ok=True)
        step_share = _share(step_max_events, len(parts))
        # extended one by one: files opened before a failure are in the list to abort
        files.extend(
            TimelineFile(
                Path(step_dir) / f"step_{step}.json.gz",
                origin=origin,
                window=hulls[step],
                max_events=step_share,
            )
            for step in steps
        )
        _write_parts(
            files,
            [part.rank for part in parts],
            lambda i: parts[i],
            counters=counters,
            findings=findings,
            process_names=process_names,
            origin=origin,
        )
        stats = whole.close() if whole is not None else None
        slices = files[1:] if whole is not None else files
        for f in slices:
            f.close()
        release_freed_memory()
    except BaseException:
        for f in files:  # the profile's files go together
            f.abort(remove_closed=True)
        raise
    return stats, [f.path for f in slices]


def write_ranks_timeline(
    path: Path,
    ranks: Sequence[int],
    load: Callable[[int], TimelinePart],
    *,
    origin_ns: int,
    window: tuple[int, int] | None = None,
    counters: pa.Table | None = None,
    findings: Sequence[Mapping[str, Any]] | None = None,
    process_names: Mapping[int, str] | None = None,
    max_events: int | None = None,
) -> TimelineStats:
    """One timeline file of a window of the profile, its ranks loaded and written one by one.

    ``load(i)`` gives the part of ``ranks[i]`` only when its turn comes, so that a window of a
    run of many ranks is written with one rank in memory at a time. A rank holds at most
    ``ceil(max_events / len(ranks))`` events of the file, as in :func:`write_profile_timelines`.
    """
    target = TimelineFile(
        Path(path), origin=origin_ns, window=window, max_events=_share(max_events, len(ranks))
    )
    try:

        def checked(i: int) -> TimelinePart:
            part = load(i)
            check_events(part.events)
            return part

        _write_parts(
            [target],
            list(ranks),
            checked,
            counters=counters,
            findings=findings,
            process_names=process_names,
            origin=origin_ns,
        )
        stats = target.close()
        release_freed_memory()
    except BaseException:
        target.abort()
        raise
    return stats


def _write_parts(
    files: Sequence[TimelineFile],
    ranks: Sequence[int],
    load: Callable[[int], TimelinePart],
    *,
    counters: pa.Table | None,
    findings: Sequence[Mapping[str, Any]] | None,
    process_names: Mapping[int, str] | None,
    origin: int,
) -> None:
    """Prepare each rank's part in turn, add it to every file, let it go; a file is closed
    as soon as the last part is in it.

    When every file has a window (step slices, no whole timeline), a rank's events are
    prepared a group of files at a time, only the rows near the group's windows
    (:func:`_file_groups`): memory then holds the preparation of a few steps, not of the
    whole trace, and every file gets the bytes of a preparation of every row.
    """
    owner = _owner_of(ranks)
    counter_owner = _counter_owners(counters, owner, len(ranks))
    first_pid = first_tid = 1
    windowed = len(files) > 1 and all(f.window is not None for f in files)
    with _step_pool(len(files)) as pool:
        for i in range(len(ranks)):
            part = load(i)
            rank = part.rank
            events: pa.Table | None = part.events
            last = i == len(ranks) - 1
            # the passes over every row read the mapped pages of the events (and of the gaps
            # and counters, when mapped too): let go as they go
            mapped: list[pa.Table | None] = [events, part.gaps, counters]
            with dropping_mapped_pages(*mapped):
                placement = place_timeline(
                    part.events,
                    gaps=part.gaps,
                    counters=_counters_of(counters, counter_owner, i),
                    findings=_findings_of(findings or (), owner, i),
                    process_names=process_names,
                    origin_ns=origin,
                    device_busy=True,
                    first_pid=first_pid,
                    first_tid=first_tid,
                    critical_path=part.critical_path,
                )
            del part  # its events are held as long as they are read, below
            first_pid += sum(1 for m in placement.metadata if m[4] == "process")
            first_tid += sum(1 for m in placement.metadata if m[4] == "thread")
            with dropping_mapped_pages(*mapped):
                groups = (
                    _file_groups(placement, events, files) if windowed else [(list(files), None)]
                )
            shared = _shared_index(placement, files) if windowed else None
            # the placement's passes over every row leave freed blocks the files do not reuse
            release_freed_memory()
            # a group's files are written while the next group is prepared (the pool's text
            # and deflate run mostly outside the GIL): one group in flight at most, so a file
            # is never added to twice at once and memory holds two groups' rows at most
            writing = _Writing()
            maps = arrow_maps()  # read once: the part's maps stay while it is held here
            while groups:  # each group's rows let go once it is written
                group, rows = groups.pop(0)
                assert events is not None  # let go only with the last group, below
                if rows is not None:
                    prepared = prepare_rows(placement, events, rows, maps=maps)
                else:
                    prepared = prepare_all_rows(placement, events)
                    # every row prepared: the events are read no more (those of a stored
                    # profile lie in the heap), let go before the files sort and write the
                    # records where the caller holds them no longer
                    events = mapped[0] = None
                    release_freed_memory()
                index = _window_index(prepared, group, shared)
                writing.finish(last)
                # the whole timeline's part (the largest) first, the step slices beside it
                writing.start(
                    group,
                    [
                        pool.submit(f.add, prepared, rank=rank, last=last, index=index)
                        for f in group
                    ],
                )
                if rows is None:  # the whole trace's rows: not held while the next is made
                    writing.finish(last)
                del prepared, index, rows
                # the pages of the mapped files read for the group (args, times, counters)
                drop_mapped_pages(*mapped, maps=maps)
            writing.finish(last)
            del placement, events, groups, shared, mapped, maps
            release_freed_memory()


class _Writing:
    """The group of files being written: its files and their futures."""

    def __init__(self) -> None:
        self.files: list[TimelineFile] = []
        self.futures: list[Future[None]] = []

    def start(self, files: list[TimelineFile], futures: list[Future[None]]) -> None:
        self.files, self.futures = files, futures

    def finish(self, last: bool) -> None:
        """Wait for the group's files (the first error raised); close them after the last
        part (each file's compressor, a few hundred KB of deflate state, let go then)."""
        futures, self.futures = self.futures, []
        for future in futures:
            future.result()
        if last:
            for f in self.files:
                f.close()
        self.files = []
        if futures:
            release_freed_memory()


# The event rows a group of step files is prepared from, at most (unless one file's window
# alone holds more, or fewer files than the writers would leave them idle): a preparation
# holds about 100 bytes per row, a few steps of a large trace.
GROUP_ROWS: Final = 250_000


def _file_groups(
    placement: Placement, events: pa.Table, files: Sequence[TimelineFile]
) -> list[tuple[list[TimelineFile], npt.NDArray[np.signedinteger]]]:
    """The files (all with a window) in groups of neighbouring windows, each with the event
    rows that overlap one of its windows: every record of a group's files is among them
    (a file takes the rows that overlap its window, and the flows between those). A group
    holds at most :data:`GROUP_ROWS` rows, and at least as many files as are written side
    by side (:data:`STEP_WRITERS`) when there are that many. The windows of a group need
    not be contiguous (analyze of a large trace writes a few chosen steps): the rows between
    them are not prepared.

    The rows are read a block at a time (:func:`blocks`), and a group's rows kept in 32-bit
    integers where they fit."""
    by_time = sorted(files, key=lambda f: _window_of(f))
    # rows starting in each window: a cheap measure of what it holds (counted against the
    # windows' sorted edges, not by sorting the rows)
    window_lo = np.array([_window_of(f)[0] for f in by_time], dtype=np.int64)
    window_hi = np.array([_window_of(f)[1] for f in by_time], dtype=np.int64)
    edges = np.unique(np.concatenate([window_lo, window_hi]))
    # starting before each edge: the rows whose start lies below it
    starting = np.zeros(edges.size + 1, dtype=np.int64)
    for _, block in blocks(events):
        starting += np.bincount(
            np.searchsorted(edges, int64(block, "start_ns"), side="right"),
            minlength=edges.size + 1,
        )
    before_edge = np.cumsum(starting)
    near = (
        before_edge[np.searchsorted(edges, window_hi)]
        - before_edge[np.searchsorted(edges, window_lo)]
    )
    groups: list[list[TimelineFile]] = []
    held = 0
    for f, rows in zip(by_time, near.tolist(), strict=True):
        if groups and (len(groups[-1]) < STEP_WRITERS or held + rows <= GROUP_ROWS):
            groups[-1].append(f)
            held += rows
        else:
            groups.append([f])
            held = rows
    spans = [_joined_windows([_window_of(f) for f in group]) for group in groups]
    index_type = row_type(events.num_rows)
    pieces: list[list[npt.NDArray[np.signedinteger]]] = [[] for _ in groups]
    for low, block in blocks(events):
        start = int64(block, "start_ns")
        dur = int64(block, "dur_ns")
        end = start + dur
        placed = placement.row_thread[low : low + block.num_rows] >= 0
        for (lo, hi), rows in zip(spans, pieces, strict=True):
            # the rows in the hull of the group's windows first (one test of each row), of
            # those the rows in one of its windows
            at = np.flatnonzero(overlaps(start, dur, int(lo[0]), int(hi[-1]), end) & placed)
            if lo.size > 1:
                at = at[_overlapping_one(start[at], dur[at], end[at], lo, hi)]
            rows.append((at + low).astype(index_type))
    return [
        (group, np.concatenate(rows) if rows else np.zeros(0, dtype=index_type))
        for group, rows in zip(groups, pieces, strict=True)
    ]


def _joined_windows(windows: Sequence[tuple[int, int]]) -> tuple[Int64Array, Int64Array]:
    """``windows`` in time order, those that overlap or touch joined into one: the starts
    and ends of disjoint windows, both ascending."""
    joined: list[list[int]] = []
    for lo, hi in sorted(windows):
        if joined and lo <= joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], hi)
        else:
            joined.append([lo, hi])
    return (
        np.array([w[0] for w in joined], dtype=np.int64),
        np.array([w[1] for w in joined], dtype=np.int64),
    )


def _overlapping_one(
    start: Int64Array, dur: Int64Array, end: Int64Array, lo: Int64Array, hi: Int64Array
) -> npt.NDArray[np.bool_]:
    """The slices that overlap one of the disjoint windows [lo, hi) (ascending), as
    :func:`overlaps` tests each: a slice that overlaps a later window than the first one
    ending after its start overlaps that first one too, which alone is tested."""
    first = np.searchsorted(hi, start, side="right")  # the first window ending after it
    some = first < hi.size
    opens = lo[np.minimum(first, hi.size - 1)]
    near: npt.NDArray[np.bool_] = some & ((end > opens) | ((dur == 0) & (start >= opens)))
    return near


def _window_of(f: TimelineFile) -> tuple[int, int]:
    """A windowed file's window."""
    assert f.window is not None
    return f.window


def _window_index(
    prepared: PreparedTimeline,
    files: Sequence[TimelineFile],
    shared: tuple[int, CounterIndex, list[SpanIndex]] | None = None,
) -> WindowIndex | None:
    """The preparation indexed for the files' windows, when several files have one (step
    slices): each then tests only the records near its window, not every record.
    ``shared``: the reach, counters' and analysis slices' indexes of its placement
    (:func:`_shared_index`), made once for all its groups of rows."""
    windows = [f.window for f in files if f.window is not None]
    if len(windows) < 2:
        return None
    if shared is None:
        return WindowIndex.of(prepared, reach=max(hi - lo for lo, hi in windows))
    reach, counters, analysis = shared
    return WindowIndex.of(prepared, reach=reach, counters=counters, analysis=analysis)


def _shared_index(
    placement: Placement, files: Sequence[TimelineFile]
) -> tuple[int, CounterIndex, list[SpanIndex]]:
    """What the window indexes of a placement's groups of rows share: a reach for every
    file's window, and the indexes of the counters and analysis slices (the placement's)."""
    reach = max(hi - lo for lo, hi in (_window_of(f) for f in files))
    return (
        reach,
        CounterIndex.of(placement.counters),
        [SpanIndex.of(a.start, a.start + a.dur, reach) for a in placement.analysis],
    )


def _step_hulls(windows: Sequence[StepWindow]) -> dict[int, tuple[int, int]]:
    """Per step, the hull of its windows over all ranks."""
    hulls: dict[int, tuple[int, int]] = {}
    for w in windows:
        lo, hi = hulls.get(w.step, (w.start_ns, w.end_ns))
        hulls[w.step] = (min(lo, w.start_ns), max(hi, w.end_ns))
    return hulls


def _step_pool(files: int, writers: int = STEP_WRITERS) -> ThreadPoolExecutor:
    """Threads for writing step files side by side (the compiled joins and the deflate
    release the GIL)."""
    workers = max(1, min(writers, os.cpu_count() or 1, files))
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="step-timeline")


def _share(cap: int | None, parts: int) -> int | None:
    """A part's share of an event cap: ceil(cap / parts)."""
    if cap is None or cap < 0 or parts <= 1:
        return cap
    return -(-cap // parts)


def _parts_origin(parts: Sequence[TimelinePart], counters: pa.Table | None) -> int:
    """:func:`profile_origin_ns` of all parts together, from each part's first event."""
    firsts = [
        pc.min(part.events.column("start_ns")).as_py() for part in parts if part.events.num_rows
    ]
    if firsts:
        return int(min(firsts))
    return profile_origin_ns(schema.empty_events(), counters)


def _owner_of(ranks: Sequence[int]) -> Callable[[int], int]:
    """The part that shows a rank's counters and spans: the first of that rank, else the last."""
    first: dict[int, int] = {}
    for i, rank in enumerate(ranks):
        first.setdefault(rank, i)
    last = len(ranks) - 1
    return lambda rank: first.get(rank, last)


def _counter_owners(
    counters: pa.Table | None, owner: Callable[[int], int], parts: int
) -> npt.NDArray[np.int32] | None:
    """The part of each counter row (one pass per distinct rank, not per row)."""
    if counters is None or parts == 0:
        return None
    if parts == 1:  # every rank's part is the only one: no column read
        return np.zeros(counters.num_rows, dtype=np.int32)
    rank = int64(counters, "rank") if counters.num_rows else np.zeros(0, np.int64)
    owners = np.empty(rank.size, dtype=np.int32)
    for r in distinct(rank).tolist():
        owners[rank == r] = owner(int(r))
    return owners


def _counters_of(
    counters: pa.Table | None, owners: npt.NDArray[np.int32] | None, part: int
) -> pa.Table | None:
    """The counter rows of ``part`` (:func:`_counter_owners`): the table itself when they are
    all its rows (one rank), not a copy of it."""
    if counters is None or owners is None:
        return None
    mine = owners == part
    return counters if bool(mine.all()) else counters.filter(pa.array(mine))


def _findings_of(
    findings: Sequence[Mapping[str, Any]], owner: Callable[[int], int], part: int
) -> list[dict[str, Any]]:
    """The findings with only the spans that go with ``part`` (findings left without spans
    are left out: they would show nothing)."""
    kept: list[dict[str, Any]] = []
    for finding in findings:
        spans = [
            span
            for span in finding.get("spans") or ()
            if isinstance(span, Mapping) and owner(_span_rank(span)) == part
        ]
        if spans:
            kept.append({**finding, "spans": spans})
    return kept


def _span_rank(span: Mapping[str, Any]) -> int:
    """A span's rank as the findings track reads it (a span it cannot read stays anywhere)."""
    try:
        return int(span.get("rank", 0))
    except (TypeError, ValueError):
        return 0
