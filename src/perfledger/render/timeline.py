"""The profile as a Chrome trace (JSON) that Perfetto and chrome://tracing load without errors.

Tracks, in this order for every rank: host threads (ops, runtime calls, annotations), device
streams (with a lane of idle gaps coloured by cause), then an analysis process holding the
counters (host CPU %, RSS, device memory, device busy %) and the spans of findings. Flows join
each launch to the device task it issued.

What keeps Perfetto's importer from truncating or dropping slices:

- ``ts`` and ``dur`` are µs relative to the profile start with three decimals (exact ns).
  Perfetto turns a number into ns as ``trunc(x * 1000)`` in doubles, which loses 1 ns for
  about 1% of three-decimal values; those values get a fourth decimal ``1`` (0.1 ns), so the
  truncation lands on the exact ns again and ends still nest.
- One track holds only slices that nest or are disjoint: a slice that partially overlaps an
  earlier one moves to an overflow lane of its track (durations are never altered).
- Flows use small sequential ids (far below 2^53) and sit at the middle of their slices, so
  they bind to the launch and the task, never to a neighbour starting at the same instant.
- Pids and tids are small synthetic numbers, unique across the file; the real ones are in
  the track names.

Everything is formatted column-wise with pyarrow: the only Python loops run over tracks,
distinct names and output chunks, never over events.

A profile of several ranks (:func:`write_profile_timelines`) is written one rank at a time:
a rank's events, gaps and counters are prepared, appended to the whole timeline and to every
step slice, and let go before the next rank, so memory is that of one rank. Every file has
one time origin, the profile's first event over all ranks (else its first counter sample).
Pids, tids and flow ids are numbered on from the rank before, so they stay unique across the
file (in rank order, pids and tids are those of a file written all at once). Records are in
time order within a rank. Each rank's part holds its own findings' spans and counters;
those of a rank without events of its own go with the last rank.

Caps are shared between ranks: of a file capped at N events, each of R ranks keeps its
earliest ``ceil(N / R)`` events of the file's window (its events starting before the first
one left out; its gaps, spans and counters stop there too), so every rank shows its own
beginning rather than the earliest rank taking the whole cap. ``otherData.ranks`` gives
each rank's total, written count and cut, ``otherData.truncated_at_ns`` the earliest cut.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import queue
import struct
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import busy
from perfledger.errors import PerfledgerError
from perfledger.files import temporary_name
from perfledger.memory import release_freed_memory
from perfledger.model import schema
from perfledger.model.accounts import GAPS_SCHEMA, StepWindow
from perfledger.version import __version__

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

TIMELINE_FORMAT_VERSION: Final = 1
# A step slice holds at most this many trace events, so one step always opens fast.
STEP_MAX_EVENTS: Final = 200_000
# A track needing more overflow lanes than this is pathological; the rest is dropped (counted).
MAX_LANES: Final = 32
_GZIP_LEVEL: Final = 3
_CHUNK_RECORDS: Final = 100_000
_STEP_WRITERS: Final = 4  # step files written at the same time, at most

# Chrome's reserved colour names; Perfetto colours slices by name, so causes also differ there.
IDLE_CAUSE_COLOURS: Final = {
    "host_dispatch": "terrible",
    "sync": "bad",
    "dataloader": "yellow",
    "launch_latency": "olive",
    "other": "grey",
}

# Among slices with the same start and duration on one track, the outer one comes first.
_KIND_NESTING_ORDER: Final = {
    schema.STEP: 0,
    schema.DATALOADER: 1,
    schema.ANNOTATION: 2,
    schema.PYTHON: 3,
    schema.CPU_OP: 4,
    schema.RUNTIME: 5,
    schema.SYNC: 6,
    schema.DEVICE_ANNOTATION: 7,
    schema.KERNEL: 8,
    schema.COMM: 9,
    schema.MEMCPY: 10,
    schema.MEMSET: 11,
    schema.INSTANT: 12,
}

# Process categories, in display order within a rank.
_HOST, _DEVICE, _ANALYSIS = 0, 1, 2
# Thread classes inside a device process, in display order.
_GAPS_LANE, _STREAM_LANE, _ANNOTATION_LANE = 0, 1, 2
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


def profile_origin_ns(events: pa.Table, counters: pa.Table | None = None) -> int:
    """The profile start every timeline time is relative to: the first event (else sample)."""
    if events.num_rows:
        return int(pc.min(events.column("start_ns")).as_py())
    if counters is not None and counters.num_rows:
        return int(pc.min(counters.column("ts_ns")).as_py())
    return 0


def device_busy_counters(device_busy: pa.Table) -> pa.Table:
    """Device busy % (:data:`perfledger.analysis.busy.DEVICE_BUSY_SCHEMA`) as counter rows.

    One sample per bucket at its start, track ``device <d>``, name ``busy % (<width> ms)``,
    value to 0.001 %.
    """
    if device_busy.num_rows == 0:
        return schema.empty_counters()
    devices, device_row = _factorize(_int64(device_busy, "device"))
    widths, width_row = _factorize(_int64(device_busy, "width_ns"))
    tracks = pa.array([f"device {d}" for d in devices.tolist()], pa.string())
    labels = pa.array([f"busy % ({w / 1e6:g} ms)" for w in widths.tolist()], pa.string())
    busy_pct = np.asarray(device_busy.column("busy_pct").to_numpy(), dtype=np.float64)
    return pa.table(
        {
            "rank": device_busy.column("rank"),
            "track": tracks.take(pa.array(device_row)),
            "name": labels.take(pa.array(width_row)),
            "ts_ns": device_busy.column("start_ns"),
            "value": pa.array(np.round(busy_pct, 3)),
        },
        schema=schema.COUNTERS_SCHEMA,
    )


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
    """
    prepared = _prepare_once(
        events,
        gaps=gaps,
        counters=counters,
        findings=findings,
        process_names=process_names,
        origin_ns=origin_ns,
        device_busy=device_busy,
        keep=True,
    )
    stats = _write_one(prepared, Path(path), window=window, max_events=max_events)
    release_freed_memory()
    return stats


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
) -> list[Path]:
    """Write one ``step_<n>.json.gz`` per step (the hull of that step's windows over ranks).

    The tracks, names and time origin are those of the whole profile, so a step slice and
    the full timeline line up; each slice holds at most ``max_events`` events.
    """
    out_dir = Path(dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hulls = _step_hulls(windows)
    if not hulls:
        return []
    prepared = _prepare_once(
        events,
        gaps=gaps,
        counters=counters,
        findings=findings,
        process_names=process_names,
        origin_ns=None,
        device_busy=True,
        keep=False,
    )
    steps = sorted(hulls)
    written = [out_dir / f"step_{step}.json.gz" for step in steps]
    # Files are independent and their formatting and compression release the GIL: a few
    # at a time use the cores the machine has.
    with _step_pool(len(steps)) as pool:
        done = [
            pool.submit(_write_one, prepared, target, window=hulls[step], max_events=max_events)
            for step, target in zip(steps, written, strict=True)
        ]
        for future in done:
            future.result()
    del prepared
    release_freed_memory()
    return written


@dataclass(frozen=True)
class TimelinePart:
    """One rank's share of a profile's timelines: its events and its idle gaps.

    Attributes:
        rank: the rank; the profile's counters and findings' spans of this rank go with it.
        events: the rank's canonical events (:data:`perfledger.model.schema.EVENTS_SCHEMA`).
        gaps: the rank's idle gaps (:data:`perfledger.model.accounts.GAPS_SCHEMA`).
    """

    rank: int
    events: pa.Table
    gaps: pa.Table | None = None


def write_profile_timelines(
    path: Path,
    step_dir: Path,
    parts: Sequence[TimelinePart],
    windows: Sequence[StepWindow],
    *,
    counters: pa.Table | None = None,
    findings: Sequence[Mapping[str, Any]] | None = None,
    process_names: Mapping[int, str] | None = None,
    max_events: int | None = None,
    step_max_events: int | None = STEP_MAX_EVENTS,
) -> tuple[TimelineStats, list[Path]]:
    """Write the whole timeline and one ``step_<n>.json.gz`` per step, one rank at a time.

    Each part (rank) is prepared once, written into every file, and let go before the next:
    memory is that of one rank's preparation, whatever the number of ranks. Ranks are
    written in the order given, their pids and tids numbered on from the rank before (in
    rank order, the numbers of a timeline written all at once). The files share one time
    origin, the profile's first event (else first counter sample). A rank holds at most
    ``ceil(max_events / len(parts))`` events of the whole timeline and
    ``ceil(step_max_events / len(parts))`` of a step slice: its earliest ones (see the
    module doc). Counters and findings' spans go with the part of their rank; those of a
    rank no part has go with the last part.

    Returns:
        the whole timeline's figures and the step files written, in step order.
    """
    for part in parts:
        _check_events(part.events)
    origin = _parts_origin(parts, counters)
    hulls = _step_hulls(windows)
    steps = sorted(hulls)
    whole = _TimelineFile(
        Path(path), origin=origin, window=None, max_events=_share(max_events, len(parts))
    )
    files = [whole]
    try:
        if steps:
            Path(step_dir).mkdir(parents=True, exist_ok=True)
        step_share = _share(step_max_events, len(parts))
        # extended one by one: files opened before a failure are in the list to abort
        files.extend(
            _TimelineFile(
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
        stats = whole.close()
        for f in files[1:]:
            f.close()
        release_freed_memory()
    except BaseException:
        for f in files:
            f.abort()
        raise
    return stats, [f.path for f in files[1:]]


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
    target = _TimelineFile(
        Path(path), origin=origin_ns, window=window, max_events=_share(max_events, len(ranks))
    )
    try:

        def checked(i: int) -> TimelinePart:
            part = load(i)
            _check_events(part.events)
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
    files: Sequence[_TimelineFile],
    ranks: Sequence[int],
    load: Callable[[int], TimelinePart],
    *,
    counters: pa.Table | None,
    findings: Sequence[Mapping[str, Any]] | None,
    process_names: Mapping[int, str] | None,
    origin: int,
) -> None:
    """Prepare each rank's part in turn, add it to every file, let it go."""
    owner = _owner_of(ranks)
    counter_owner = _counter_owners(counters, owner, len(ranks))
    first_pid = first_tid = 1
    with _step_pool(len(files)) as pool:
        for i in range(len(ranks)):
            part = load(i)
            last = i == len(ranks) - 1
            prepared = _prepare(
                part.events,
                gaps=part.gaps,
                counters=(
                    counters.filter(pa.array(counter_owner == i))
                    if counters is not None and counter_owner is not None
                    else None
                ),
                findings=_findings_of(findings or (), owner, i),
                process_names=process_names,
                origin_ns=origin,
                device_busy=True,
                first_pid=first_pid,
                first_tid=first_tid,
            )
            first_pid += sum(1 for m in prepared.metadata if m[4] == "process")
            first_tid += sum(1 for m in prepared.metadata if m[4] == "thread")
            # the whole timeline's part (the largest) first, the step slices beside it
            done = [pool.submit(f.add, prepared, rank=part.rank, last=last) for f in files]
            for future in done:
                future.result()
            del prepared, done, part
            release_freed_memory()


def _step_hulls(windows: Sequence[StepWindow]) -> dict[int, tuple[int, int]]:
    """Per step, the hull of its windows over all ranks."""
    hulls: dict[int, tuple[int, int]] = {}
    for w in windows:
        lo, hi = hulls.get(w.step, (w.start_ns, w.end_ns))
        hulls[w.step] = (min(lo, w.start_ns), max(hi, w.end_ns))
    return hulls


def _step_pool(files: int) -> ThreadPoolExecutor:
    """Threads for writing step files side by side (formatting and zlib release the GIL)."""
    workers = max(1, min(_STEP_WRITERS, os.cpu_count() or 1, files))
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
    rank = _int64(counters, "rank") if counters.num_rows else np.zeros(0, np.int64)
    owners = np.empty(rank.size, dtype=np.int32)
    for r in _distinct(rank).tolist():
        owners[rank == r] = owner(int(r))
    return owners


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


def _write_one(
    prepared: _Prepared, path: Path, *, window: tuple[int, int] | None, max_events: int | None
) -> TimelineStats:
    """One file of one preparation."""
    out = _TimelineFile(path, origin=prepared.origin, window=window, max_events=max_events)
    try:
        out.add(prepared)
    except BaseException:
        out.abort()
        raise
    return out.close()


@dataclass(frozen=True)
class _Inputs:
    """What a preparation was made from: the tables by weak reference (Arrow tables are
    immutable, so the same object means the same content), the other inputs by value."""

    tables: tuple[weakref.ref[pa.Table] | None, ...]
    options: tuple[Any, ...]

    def matches(self, other: _Inputs) -> bool:
        return self.options == other.options and all(
            (mine is None and theirs is None)
            or (mine is not None and theirs is not None and mine() is theirs())
            for mine, theirs in zip(self.tables, other.tables, strict=True)
        )


# The whole timeline and the step slices of a profile are written from the same preparation
# (about 1 s and 100+ MB on a 1.4M-event profile): write_timeline keeps its preparation for
# the step slices that follow, which take it and let it go. The input tables are only
# referenced weakly, so nothing stays alive because of this.
_kept: list[tuple[_Inputs, _Prepared]] = []


def _prepare_once(
    events: pa.Table,
    *,
    gaps: pa.Table | None,
    counters: pa.Table | None,
    findings: Sequence[Mapping[str, Any]] | None,
    process_names: Mapping[int, str] | None,
    origin_ns: int | None,
    device_busy: bool,
    keep: bool,
) -> _Prepared:
    """:func:`_prepare` of these inputs: the kept preparation when it matches, else a new one."""
    inputs = _Inputs(
        tables=tuple(None if t is None else weakref.ref(t) for t in (events, gaps, counters)),
        options=(
            copy.deepcopy(list(findings or ())),
            dict(process_names or {}),
            origin_ns,
            device_busy,
        ),
    )
    found = [prepared for kept, prepared in _kept if kept.matches(inputs)]
    _kept.clear()
    if found:
        return found[0]
    prepared = _prepare(
        events,
        gaps=gaps,
        counters=counters,
        findings=findings,
        process_names=process_names,
        origin_ns=origin_ns,
        device_busy=device_busy,
    )
    if keep:
        _kept.append((inputs, prepared))
    return prepared


# --------------------------------------------------------------------------------------------
# Preparation: tracks, lanes, flows and the record arrays, once per profile.


@dataclass(frozen=True)
class _Slices:
    """Slices and instants of one origin (events, gaps or findings), columns by row."""

    start: Int64Array
    dur: Int64Array
    pid: Int64Array
    tid: Int64Array
    instant: BoolArray
    nesting: Int64Array  # tie-break among equal start and duration
    name_index: Int64Array
    names: pa.Array  # JSON-escaped distinct names, indexed by name_index
    cat_index: Int64Array
    cats: pa.Array
    args: Callable[[Int64Array], pa.Array]  # JSON args objects of the given rows
    # ``,"cname":"..."`` per distinct name (same index as names), or None
    colours: pa.Array | None = None

    @property
    def size(self) -> int:
        return int(self.start.size)


@dataclass(frozen=True)
class _Counters:
    ts: Int64Array
    pid: Int64Array
    series: Int64Array  # index into names/keys
    names: pa.Array  # JSON-escaped track name per series
    keys: pa.Array  # JSON-escaped counter name per series
    value: npt.NDArray[np.float64]


@dataclass(frozen=True)
class _Prepared:
    origin: int
    events: _Slices
    analysis: list[_Slices]
    flow_from: Int64Array  # row of the launch in ``events``
    flow_to: Int64Array  # row of the device task in ``events``
    flow_out_ts: Int64Array  # where each flow leaves its launch
    flow_in_ts: Int64Array  # where it enters its task
    flows_unplaceable: int  # tasks that ended before their launch began (clock skew)
    counters: _Counters
    metadata: list[tuple[int, int, str, int, str]]  # pid, tid (0: process), name, sort, kind
    overlapping: int
    dropped: Int64Array  # rows of ``events`` left out
    event_end: Int64Array  # start + dur of every event row, for the window of each file
    other: dict[str, Any] = field(default_factory=dict)


def _int64(table: pa.Table, column: str) -> Int64Array:
    return np.asarray(table.column(column).to_numpy(), dtype=np.int64)


def dictionary_codes(table: pa.Table, column: str) -> tuple[Int64Array, list[str | None]]:
    """A string column as (codes, distinct values); works on dictionary and plain strings."""
    col = table.column(column)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    col = pa.chunked_array(col.chunks, type=col.type) if col.num_chunks else col
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64), []
    combined = col.unify_dictionaries() if hasattr(col, "unify_dictionaries") else col
    dictionary = combined.chunk(0).dictionary
    codes = np.concatenate(
        [np.asarray(c.indices.fill_null(0).to_numpy(), dtype=np.int64) for c in combined.chunks]
    )
    return codes, dictionary.to_pylist()


def _factorize(values: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Distinct values in ascending order and each row's index among them.

    The same result as ``np.unique(values, return_inverse=True)``, by hashing instead of
    sorting every row: only the distinct values get sorted.
    """
    encoded = pc.dictionary_encode(pa.array(np.asarray(values, dtype=np.int64)))
    distinct = np.asarray(encoded.dictionary.to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(distinct, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return distinct[order], position[codes]


def _distinct(values: Int64Array) -> Int64Array:
    """``np.unique(values)`` by hashing."""
    return _factorize(values)[0] if values.size else np.zeros(0, dtype=np.int64)


def _unique_rows(columns: Sequence[Int64Array]) -> tuple[Int64Array, Int64Array]:
    """Distinct rows of equal-length integer columns, in lexicographic order, and the inverse.

    The same result as ``np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)``
    without sorting rows as bytes (measured 4.4 s against 0.08 s on 1.4M rows of 5 columns):
    each column is numbered by its distinct values, and the numbers are combined.
    """
    n = columns[0].size
    if n == 0:
        return np.zeros((0, len(columns)), dtype=np.int64), np.zeros(0, dtype=np.int64)
    code = np.zeros(n, dtype=np.int64)
    combinations = 1
    for column in columns:
        values, index = _factorize(column)
        if combinations * values.size >= 1 << 62:  # renumber before the product overflows
            code = _factorize(code)[1]
            combinations = int(code.max()) + 1
        code = code * values.size + index
        combinations *= values.size
    distinct, inverse = _factorize(code)
    first = np.empty(distinct.size, dtype=np.int64)
    first[inverse] = np.arange(n, dtype=np.int64)
    keys = np.stack([np.asarray(c, dtype=np.int64)[first] for c in columns], axis=1)
    return keys, inverse


def _kind_mask(events: pa.Table, kinds: Iterable[str]) -> BoolArray:
    codes, values = dictionary_codes(events, "kind")
    wanted = set(kinds)
    hit = np.fromiter((v in wanted for v in values), dtype=bool, count=len(values))
    return hit[codes] if codes.size else np.zeros(0, dtype=bool)


def _json_strings(values: Sequence[str | None]) -> pa.Array:
    """JSON string literals of distinct values (null becomes an empty string)."""
    return pa.array([json.dumps("" if v is None else v, ensure_ascii=False) for v in values])


def _lanes(start: Int64Array, end: Int64Array) -> Int64Array:
    """A lane per interval so that every lane holds only nested or disjoint intervals.

    Lane 0 keeps as many as it can; intervals crossing an earlier one go to lane 1, and so
    on; -1 marks intervals beyond MAX_LANES (left out). Zero-length intervals nest anywhere.
    """
    lane = np.full(start.size, -1, dtype=np.int64)
    pending = np.arange(start.size)
    for k in range(MAX_LANES):
        if pending.size == 0:
            break
        crossing = _crossing(start[pending], end[pending])
        lane[pending[~crossing]] = k
        pending = pending[crossing]
    return lane


def _crossing(start: Int64Array, end: Int64Array) -> BoolArray:
    """Intervals to take out so that the others are laminar (nested or disjoint)."""
    out = np.zeros(start.size, dtype=bool)
    rows = np.flatnonzero(end > start)
    rounds = 0
    while rows.size > 1:
        true_crossing, unsure = _violations(start[rows], end[rows])
        # The first crossing in start order is always a true one; after a few rounds also
        # drop the intervals only suspected, so that the loop ends quickly on odd tracks.
        drop = true_crossing | unsure if rounds >= 8 else true_crossing
        if not drop.any():
            break
        out[rows[drop]] = True
        rows = rows[~drop]
        rounds += 1
    return out


def _violations(start: Int64Array, end: Int64Array) -> tuple[BoolArray, BoolArray]:
    """Intervals (all of positive length) that cross their parent, vectorised.

    In start order (longer first on ties), the depth of interval i is the number of
    intervals open at its start, itself included; in a laminar prefix its parent is the
    last earlier interval one level up. Interval i crosses when it outlives an open parent;
    it is ``unsure`` when that parent is already closed (a crossing happened before it).
    """
    n = start.size
    order = np.lexsort((-end, start))
    s = start[order]
    e = end[order]
    closed = np.searchsorted(np.sort(e), s, side="right")
    depth = np.arange(1, n + 1, dtype=np.int64) - closed
    stride = np.int64(n + 1)
    key = depth * stride + np.arange(n, dtype=np.int64)
    key_sorted = np.sort(key)
    nested = depth >= 2
    target = (depth - 1) * stride + np.arange(n, dtype=np.int64)
    pos = np.searchsorted(key_sorted, target, side="left") - 1
    pos_c = np.clip(pos, 0, n - 1)
    parent = key_sorted[pos_c] % stride
    found = nested & (pos >= 0) & (key_sorted[pos_c] // stride == depth - 1)
    parent_end = e[parent]
    open_parent = found & (parent_end > s)
    true_crossing = open_parent & (e > parent_end)
    unsure = nested & ~open_parent
    result_true = np.zeros(n, dtype=bool)
    result_unsure = np.zeros(n, dtype=bool)
    result_true[order] = true_crossing
    result_unsure[order] = unsure
    return result_true, result_unsure


class _Layout:
    """Synthetic pids/tids and the metadata naming them, in display order."""

    def __init__(self, process_names: Mapping[int, str] | None) -> None:
        self._labels = dict(process_names or {})
        # (rank, category, id) -> name ; threads: (process key, sort tuple) -> name
        self.processes: dict[tuple[int, int, int], str] = {}
        self.threads: dict[tuple[tuple[int, int, int], tuple[Any, ...]], str] = {}

    def label(self, rank: int) -> str:
        return self._labels.get(rank, f"rank {rank}")

    def process(self, rank: int, category: int, ident: int) -> tuple[int, int, int]:
        key = (rank, category, ident)
        if key not in self.processes:
            label = self.label(rank)
            if category == _HOST:
                name = f"{label} host (pid {ident})"
            elif category == _DEVICE:
                name = f"{label} device {ident}"
            else:
                name = f"{label} analysis"
            self.processes[key] = name
        return key

    def thread(self, process: tuple[int, int, int], sort: tuple[Any, ...], name: str) -> None:
        self.threads.setdefault((process, sort), name)

    def assign(
        self, first_pid: int = 1, first_tid: int = 1
    ) -> tuple[dict[Any, int], dict[Any, int], list[tuple[int, int, str, int, str]]]:
        """Number processes and threads in display order from the given first numbers;
        return the maps and metadata."""
        pids: dict[Any, int] = {}
        tids: dict[Any, int] = {}
        metadata: list[tuple[int, int, str, int, str]] = []
        for i, key in enumerate(sorted(self.processes), start=first_pid):
            pids[key] = i
            metadata.append((i, 0, self.processes[key], i, "process"))
        threads = sorted(self.threads, key=lambda t: (t[0], t[1]))
        for j, tkey in enumerate(threads, start=first_tid):
            tids[tkey] = j
            metadata.append((pids[tkey[0]], j, self.threads[tkey], j, "thread"))
        return pids, tids, metadata


def _event_tracks(events: pa.Table, layout: _Layout) -> tuple[Int64Array, list[Any], int]:
    """The thread of every event row (index into the returned keys, -1: left out).

    A track is a host thread or a device stream (device annotations get their own);
    partial overlaps on a track spill into overflow lanes, each its own thread.
    """
    n = events.num_rows
    rank = _int64(events, "rank")
    device = _int64(events, "device")
    stream = _int64(events, "stream")
    on_device = device >= 0
    annotation = _kind_mask(events, (schema.DEVICE_ANNOTATION,)) & on_device
    category = np.where(on_device, _DEVICE, _HOST)
    ident = np.where(on_device, device, _int64(events, "pid"))
    lane_class = np.where(annotation, _ANNOTATION_LANE, _STREAM_LANE)
    start = _int64(events, "start_ns")
    end = start + _int64(events, "dur_ns")
    step_rows = _kind_mask(events, (schema.STEP,))
    row_thread = np.full(n, -1, dtype=np.int64)
    thread_keys: list[Any] = []
    if n == 0:
        return row_thread, thread_keys, 0
    keys, track = _unique_rows([rank, category, ident, stream, lane_class])
    order = np.argsort(track, kind="stable")
    bounds = np.searchsorted(track[order], np.arange(keys.shape[0] + 1))
    overlapping = 0
    for t in range(keys.shape[0]):  # one pass per track, vectorised inside
        r, cat, idn, strm, cls = (int(v) for v in keys[t])
        rows = order[bounds[t] : bounds[t + 1]]
        lane = _lanes(start[rows], end[rows])
        overlapping += int((lane > 0).sum())
        process = layout.process(r, cat, idn)
        # host: the thread holding the step marks (the main thread) first, then by start
        main = 0 if step_rows[rows].any() else 1
        first = int(start[rows].min())
        for k in np.unique(lane[lane >= 0]):
            suffix = f" (overlap {k})" if k else ""
            if cat == _HOST:
                sort: tuple[Any, ...] = (main, first, strm, int(k))
                name = f"thread {strm}{suffix}"
            else:
                sort = (cls, strm, int(k))
                what = " annotations" if cls == _ANNOTATION_LANE else ""
                name = f"stream {strm}{what}{suffix}"
            layout.thread(process, sort, name)
            row_thread[rows[lane == k]] = len(thread_keys)
            thread_keys.append((process, sort))
    return row_thread, thread_keys, overlapping


def _event_slices(
    events: pa.Table,
    row_thread: Int64Array,
    thread_keys: list[Any],
    pids: Mapping[Any, int],
    tids: Mapping[Any, int],
) -> _Slices:
    start = _int64(events, "start_ns")
    thread_pid = np.array([pids[k[0]] for k in thread_keys] + [-1], dtype=np.int64)
    thread_tid = np.array([tids[k] for k in thread_keys] + [-1], dtype=np.int64)
    pid = thread_pid[row_thread]  # -1 picks the sentinel
    tid = thread_tid[row_thread]
    kind_codes, kinds = dictionary_codes(events, "kind")
    nesting_of_kind = np.array([_KIND_NESTING_ORDER.get(k or "", 99) for k in kinds] or [0])
    name_codes, names = dictionary_codes(events, "name")
    step = _int64(events, "step")
    correlation = _int64(events, "correlation")
    external_id = _int64(events, "external_id")
    moved = _int64(events, "bytes")
    # ``,"shapes":"..."`` per distinct value, looked up per row: formatted once, not per file
    optional = [_optional_field(key, events.column(key)) for key in ("shapes", "dtypes")]

    def args(rows: Int64Array) -> pa.Array:
        parts: list[Any] = ['{"step":', _ints(step[rows])]
        for key, values, absent in (
            ("correlation", correlation, schema.NO_ID),
            ("external_id", external_id, schema.NO_ID),
            ("bytes", moved, -1),
        ):
            sel = values[rows]
            parts.append(
                _either(
                    pa.array(sel != absent),
                    _join(f',"{key}":', _ints(sel)),
                    "",
                )
            )
        parts.extend(texts.take(pa.array(codes[rows])) for codes, texts in optional)
        parts.append("}")
        return _join(*parts)

    kind_values = [k or "" for k in kinds]
    return _Slices(
        start=start,
        dur=_int64(events, "dur_ns"),
        pid=pid,
        tid=tid,
        instant=_kind_mask(events, (schema.INSTANT,)),
        nesting=nesting_of_kind[kind_codes] if kind_codes.size else np.zeros(0, np.int64),
        name_index=name_codes,
        names=_json_strings(names),
        cat_index=kind_codes,
        cats=_json_strings(kind_values),
        args=args,
    )


def _optional_field(key: str, column: pa.ChunkedArray) -> tuple[npt.NDArray[np.int32], pa.Array]:
    """Per row, an index into texts ``,"key":"value"``; "" where the value is null or empty."""
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    if column.num_chunks == 0 or len(column) == 0:
        return np.zeros(0, dtype=np.int32), pa.array([""], pa.string())
    encoded = pc.dictionary_encode(column).unify_dictionaries()
    values = encoded.chunk(0).dictionary.to_pylist()
    null = len(values)  # nulls point past the values, at ""
    codes = np.concatenate(
        [
            np.asarray(chunk.indices.fill_null(null).to_numpy(), dtype=np.int32)
            for chunk in encoded.chunks
        ]
    )
    texts = [
        f',"{key}":' + json.dumps(value, ensure_ascii=False) if value else ""
        for value in [*values, None]
    ]
    return codes, pa.array(texts, pa.string())


@functools.lru_cache(maxsize=512)
def _literal(text: str) -> pa.StringScalar:
    """A typed string scalar: an untyped Python str makes pyarrow infer its type, which tries
    to import pandas and dateutil on every call (measured: 10% of a timeline's time here)."""
    return pa.scalar(text, pa.string())


def _join(*parts: Any) -> pa.Array:
    """Row by row concatenation of string columns and literals."""
    return pc.binary_join_element_wise(
        *(_literal(part) if isinstance(part, str) else part for part in parts), _literal("")
    )


def _either(condition: Any, yes: Any, no: Any) -> pa.Array:
    """``pc.if_else`` with literals typed up front (see :func:`_literal`)."""
    return pc.if_else(
        condition,
        _literal(yes) if isinstance(yes, str) else yes,
        _literal(no) if isinstance(no, str) else no,
    )


def _ints(values: Int64Array) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), pa.string())


def _us(ns: Int64Array) -> pa.Array:
    """Non-negative ns as µs text with three decimals, Perfetto-exact (see module doc)."""
    ns = np.asarray(ns, dtype=np.int64)
    whole = ns // 1000
    frac = ns - whole * 1000
    # what Perfetto computes: trunc(double(text) * 1000); double(text) == ns / 1000.0
    short = (ns / 1000.0) * 1000.0 < ns
    text = _join(
        _ints(whole),
        ".",
        pc.utf8_lpad(_ints(frac), 3, "0"),
        _either(pa.array(short), "1", ""),
    )
    return text


def _gap_slices(
    gaps: pa.Table, layout: _Layout
) -> tuple[pa.Table, Callable[[Mapping[Any, int], Mapping[Any, int]], _Slices]]:
    missing = [f.name for f in GAPS_SCHEMA if f.name not in gaps.column_names]
    if missing:
        raise PerfledgerError(f"gaps table lacks columns: {', '.join(missing)}")
    rank = _int64(gaps, "rank")
    device = _int64(gaps, "device")
    pairs: list[tuple[int, int]] = (
        [(int(r), int(d)) for r, d in _unique_rows([rank, device])[0]] if gaps.num_rows else []
    )
    for r, d in pairs:
        process = layout.process(int(r), _DEVICE, int(d))
        layout.thread(process, (_GAPS_LANE, -1, 0), "idle gaps")

    def build(pids: Mapping[Any, int], tids: Mapping[Any, int]) -> _Slices:
        n = gaps.num_rows
        pid = np.zeros(n, dtype=np.int64)
        tid = np.zeros(n, dtype=np.int64)
        for r, d in pairs:
            process = (int(r), _DEVICE, int(d))
            sel = (rank == r) & (device == d)
            pid[sel] = pids[process]
            tid[sel] = tids[(process, (_GAPS_LANE, -1, 0))]
        start = _int64(gaps, "start_ns")
        cause_codes, causes = dictionary_codes(gaps, "cause")
        step = _int64(gaps, "step")
        cause_text = [c or "other" for c in causes]

        def args(rows: Int64Array) -> pa.Array:
            causes_json = _json_strings(cause_text)
            return _join(
                '{"step":',
                _ints(step[rows]),
                ',"cause":',
                causes_json.take(pa.array(cause_codes[rows])),
                "}",
            )

        return _Slices(
            start=start,
            dur=np.maximum(_int64(gaps, "end_ns") - start, 0),
            pid=pid,
            tid=tid,
            instant=np.zeros(n, dtype=bool),
            nesting=np.zeros(n, dtype=np.int64),
            name_index=cause_codes,
            names=_json_strings([f"idle: {c}" for c in cause_text]),
            colours=pa.array(
                [f',"cname":"{IDLE_CAUSE_COLOURS.get(c, "grey")}"' for c in cause_text],
                pa.string(),
            ),
            cat_index=np.zeros(n, dtype=np.int64),
            cats=_json_strings(["idle"]),
            args=args,
        )

    return gaps, build


def _finding_spans(
    findings: Sequence[Mapping[str, Any]], layout: _Layout
) -> Callable[[Mapping[Any, int], Mapping[Any, int]], _Slices] | None:
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
        lane[sel] = _lanes(start[sel], end[sel])
        process = layout.process(int(r), _ANALYSIS, 0)
        for k in np.unique(lane[sel]):
            if k >= 0:
                suffix = f" (overlap {k})" if k else ""
                layout.thread(process, (1, int(k)), f"findings{suffix}")
    ids = [r[3] for r in rows]
    titles = [r[4] for r in rows]

    def build(pids: Mapping[Any, int], tids: Mapping[Any, int]) -> _Slices:
        n = len(rows)
        pid = np.zeros(n, dtype=np.int64)
        tid = np.zeros(n, dtype=np.int64)
        for i in range(n):  # one row per finding span: a handful
            if lane[i] < 0:
                pid[i] = -1
                continue
            process = (int(rank[i]), _ANALYSIS, 0)
            pid[i] = pids[process]
            tid[i] = tids[(process, (1, int(lane[i])))]
        title_json = _json_strings(titles)

        def args(sel: Int64Array) -> pa.Array:
            return _join('{"title":', title_json.take(pa.array(sel)), "}")

        keep = pid >= 0
        return _Slices(
            start=start[keep],
            dur=(end - start)[keep],
            pid=pid[keep],
            tid=tid[keep],
            instant=np.zeros(int(keep.sum()), dtype=bool),
            nesting=np.zeros(int(keep.sum()), dtype=np.int64),
            name_index=np.arange(n, dtype=np.int64)[keep],
            names=_json_strings(ids),
            cat_index=np.zeros(int(keep.sum()), dtype=np.int64),
            cats=_json_strings(["finding"]),
            args=args,
        )

    return build


def _counter_series(
    counters: pa.Table, layout: _Layout, origin: int
) -> Callable[[Mapping[Any, int]], _Counters]:
    missing = [f.name for f in schema.COUNTERS_SCHEMA if f.name not in counters.column_names]
    if missing:
        raise PerfledgerError(f"counters table lacks columns: {', '.join(missing)}")
    value = np.asarray(counters.column("value").to_numpy(), dtype=np.float64)
    finite = np.isfinite(value)
    counters = counters.filter(pa.array(finite))
    value = value[finite]
    rank = _int64(counters, "rank")
    ts = _int64(counters, "ts_ns")
    track_codes, tracks = dictionary_codes(counters, "track")
    name_codes, names = dictionary_codes(counters, "name")
    uniq, series = _unique_rows([rank, track_codes, name_codes])
    for r in np.unique(rank):
        layout.process(int(r), _ANALYSIS, 0)
    # samples before the origin: only the last of each series is kept, at the origin
    before = ts < origin
    if before.any():
        last_before = np.zeros(ts.size, dtype=bool)
        rows = np.flatnonzero(before)
        order = rows[np.lexsort((ts[rows], series[rows]))]
        is_last = np.ones(order.size, dtype=bool)
        is_last[:-1] = series[order][1:] != series[order][:-1]
        last_before[order[is_last]] = True
        keep = ~before | last_before
        ts = np.where(before, origin, ts)[keep]
        value = value[keep]
        series = series[keep]
        rank = rank[keep]

    def build(pids: Mapping[Any, int]) -> _Counters:
        pid = np.array([pids[(int(r), _ANALYSIS, 0)] for r in uniq[:, 0]] or [0])[series]
        return _Counters(
            ts=ts,
            pid=pid if series.size else np.zeros(0, np.int64),
            series=series,
            names=_json_strings([tracks[int(t)] or "counter" for t in uniq[:, 1]]),
            keys=_json_strings([names[int(n)] or "value" for n in uniq[:, 2]]),
            value=value,
        )

    return build


def _check_events(events: pa.Table) -> None:
    missing = [f.name for f in schema.EVENTS_SCHEMA if f.name not in events.column_names]
    if missing:
        raise PerfledgerError(f"events table lacks columns: {', '.join(missing)}")


def _flows(events: pa.Table) -> tuple[Int64Array, Int64Array]:
    """(launch row, task row) per device task whose launch is known, by (rank, correlation)."""
    correlation = _int64(events, "correlation")
    device = _int64(events, "device")
    rank = _int64(events, "rank")
    start = _int64(events, "start_ns")
    launch = _kind_mask(events, schema.LAUNCH_KINDS) & (device < 0) & (correlation >= 0)
    task = _kind_mask(events, schema.DEVICE_TASK_KINDS) & (device >= 0) & (correlation >= 0)
    launch_rows = np.flatnonzero(launch)
    task_rows = np.flatnonzero(task)
    if launch_rows.size == 0 or task_rows.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    # the earliest launch wins when a source repeats an id (as in the step analysis)
    launch_keys = rank[launch_rows] * (1 << 40) + correlation[launch_rows]
    order = np.lexsort((start[launch_rows], launch_keys))
    keys_sorted = launch_keys[order]
    first = np.ones(keys_sorted.size, dtype=bool)
    first[1:] = keys_sorted[1:] != keys_sorted[:-1]
    keys_unique = keys_sorted[first]
    rows_unique = launch_rows[order][first]
    task_keys = rank[task_rows] * (1 << 40) + correlation[task_rows]
    pos = np.clip(np.searchsorted(keys_unique, task_keys), 0, keys_unique.size - 1)
    found = keys_unique[pos] == task_keys
    return rows_unique[pos[found]], task_rows[found]


def _prepare(
    events: pa.Table,
    *,
    gaps: pa.Table | None,
    counters: pa.Table | None,
    findings: Sequence[Mapping[str, Any]] | None,
    process_names: Mapping[int, str] | None,
    origin_ns: int | None,
    device_busy: bool,
    first_pid: int = 1,
    first_tid: int = 1,
) -> _Prepared:
    _check_events(events)
    origin = profile_origin_ns(events, counters) if origin_ns is None else origin_ns
    layout = _Layout(process_names)
    row_thread, thread_keys, overlapping = _event_tracks(events, layout)
    gap_build = _gap_slices(gaps, layout)[1] if gaps is not None and gaps.num_rows else None
    finding_build = _finding_spans(findings or (), layout)
    all_counters = [c for c in (counters,) if c is not None and c.num_rows]
    if device_busy:
        busy_counters = device_busy_counters(busy.device_busy(events, origin_ns=origin))
        if busy_counters.num_rows:
            all_counters.append(busy_counters)
    counter_table = (
        pa.concat_tables(
            [
                c.select(schema.COUNTERS_SCHEMA.names).cast(schema.COUNTERS_SCHEMA)
                for c in all_counters
            ]
        )
        if all_counters
        else schema.empty_counters()
    )
    counter_build = _counter_series(counter_table, layout, origin)
    pids, tids, metadata = layout.assign(first_pid, first_tid)
    event_slices = _event_slices(events, row_thread, thread_keys, pids, tids)
    analysis = [b(pids, tids) for b in (gap_build, finding_build) if b is not None]
    flow_from, flow_to = _flows(events)
    out_ts, in_ts, placeable = _flow_points(event_slices, flow_from, flow_to)
    kept = (row_thread[flow_from] >= 0) & (row_thread[flow_to] >= 0) & placeable
    return _Prepared(
        origin=origin,
        events=event_slices,
        analysis=analysis,
        flow_from=flow_from[kept],
        flow_to=flow_to[kept],
        flow_out_ts=out_ts[kept],
        flow_in_ts=in_ts[kept],
        flows_unplaceable=int((~placeable).sum()),
        counters=counter_build(pids),
        metadata=metadata,
        overlapping=overlapping,
        dropped=np.flatnonzero(row_thread < 0),
        event_end=event_slices.start + event_slices.dur,
    )


# --------------------------------------------------------------------------------------------
# Writing: select the window, cut at max_events, format column-wise, stream out in order.


def _overlaps(
    start: Int64Array, dur: Int64Array, lo: int, hi: int, end: Int64Array | None = None
) -> BoolArray:
    end = start + dur if end is None else end
    inside: BoolArray = (start < hi) & ((end > lo) | ((dur == 0) & (start >= lo)))
    return inside


def _slice_lines(s: _Slices, rows: Int64Array, origin: int) -> pa.Array:
    ts = _us(s.start[rows] - origin)
    names = s.names.take(pa.array(s.name_index[rows]))
    cats = s.cats.take(pa.array(s.cat_index[rows]))
    args = s.args(rows)
    instant = s.instant[rows]
    head = _either(pa.array(instant), ',\n{"ph":"i","s":"t","pid":', ',\n{"ph":"X","pid":')
    dur = _either(pa.array(instant), "", _join(',"dur":', _us(s.dur[rows])))
    return _join(
        head,
        _ints(s.pid[rows]),
        ',"tid":',
        _ints(s.tid[rows]),
        ',"ts":',
        ts,
        dur,
        ',"name":',
        names,
        ',"cat":',
        cats,
        ',"args":',
        args,
        s.colours.take(pa.array(s.name_index[rows])) if s.colours is not None else "",
        "}",
    )


def _flow_points(
    ev: _Slices, launch: Int64Array, task: Int64Array
) -> tuple[Int64Array, Int64Array, BoolArray]:
    """Where each flow leaves its launch and enters its task, and whether it can be placed.

    A flow must not go back in time (Perfetto meets its end before its start and drops it),
    and each end must lie inside its own slice, away from a neighbour starting at the same
    instant. It leaves the launch at the task's start, but no later than the launch's middle,
    and enters the task at its middle, but no earlier than it left. Tasks that ended before
    their launch began (clock skew between host and device) get no flow.
    """
    l_start = ev.start[launch]
    l_mid = l_start + ev.dur[launch] // 2
    t_start = ev.start[task]
    t_dur = ev.dur[task]
    t_mid = t_start + t_dur // 2
    out_ts = np.minimum(l_mid, np.maximum(t_start, l_start))
    in_ts = np.maximum(t_mid, out_ts)
    placeable = (in_ts < t_start + t_dur) | ((t_dur == 0) & (in_ts == t_start))
    return out_ts, in_ts, placeable


def _flow_lines(
    s: _Slices, rows: Int64Array, ts: Int64Array, ids: Int64Array, phase: str, origin: int
) -> pa.Array:
    bind = ',"bp":"e"' if phase == "f" else ""
    return _join(
        f',\n{{"ph":"{phase}"{bind},"id":',
        _ints(ids),
        ',"pid":',
        _ints(s.pid[rows]),
        ',"tid":',
        _ints(s.tid[rows]),
        ',"ts":',
        _us(ts - origin),
        ',"name":"launch","cat":"flow"}',
    )


def _counter_lines(c: _Counters, rows: Int64Array, origin: int) -> pa.Array:
    values = np.round(c.value[rows], 6)
    values = np.where(values == 0, 0.0, values)  # no "-0"
    series = pa.array(c.series[rows])
    return _join(
        ',\n{"ph":"C","pid":',
        _ints(c.pid[rows]),
        ',"ts":',
        _us(c.ts[rows] - origin),
        ',"name":',
        c.names.take(series),
        ',"args":{',
        c.keys.take(series),
        ":",
        pc.cast(pa.array(values), pa.string()),
        "}}",
    )


def _metadata_lines(prepared: _Prepared, pids: set[int], tids: set[tuple[int, int]]) -> list[str]:
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


def _string_bytes(lines: pa.Array) -> memoryview:
    """The UTF-8 bytes of a string array's values, concatenated, without copying."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if len(lines) == 0:
        return memoryview(b"")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    first = int(offsets[lines.offset])
    last = int(offsets[lines.offset + len(lines)])
    return memoryview(lines.buffers()[2]).cast("B")[first:last]


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


class _TimelineFile:
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
        if window is not None and window[1] <= window[0]:
            raise PerfledgerError(f"empty timeline window [{window[0]}, {window[1]}) for {path}")
        self.path = path
        self.origin = origin
        self.window = window
        self.max_events = max_events  # per part
        self.parts: list[_PartFigures] = []
        self._gzip = path.name.endswith(".gz")
        self._deflate = _Deflate() if self._gzip else None
        self._pending = '{"traceEvents":[\n'  # written with the first part's metadata
        self._empty = True  # no record yet: the next one has no leading ",\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temporary_name(path)
        try:
            with self._tmp.open("wb") as raw:
                if self._gzip:
                    raw.write(_GZIP_HEADER)
        except BaseException:
            self.abort()
            raise

    @property
    def flows(self) -> int:
        return sum(p.flows for p in self.parts)

    def _sink(self, raw: IO[bytes]) -> _Writable:
        """Where the bytes of a part go: through the deflate stream for a gzip file."""
        if self._deflate is None:
            return raw
        self._deflate.attach(raw)
        return self._deflate

    def add(self, prepared: _Prepared, *, rank: int | None = None, last: bool = True) -> None:
        """Append the records of one preparation (a rank's) that fall in this file.

        ``last``: no part follows (the deflate segment stays open for the trailer).
        """
        if prepared.origin != self.origin:
            raise ValueError("every part of a timeline file has the file's origin")
        with self._tmp.open("ab") as raw:
            with _background_writes(self._sink(raw)) as write:
                self._add(prepared, write, rank)
            if self._deflate is not None and not last:
                self._deflate.end_segment()

    def _add(
        self, prepared: _Prepared, write: Callable[[memoryview], None], rank: int | None
    ) -> None:
        origin = prepared.origin
        ev = prepared.events
        window = self.window
        max_events = self.max_events
        lo, hi = window if window is not None else (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
        in_window = _overlaps(ev.start, ev.dur, lo, hi, prepared.event_end)
        in_window[prepared.dropped] = False
        event_rows = np.flatnonzero(in_window)
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
            rows = np.flatnonzero(_overlaps(a.start, a.dur, lo, cut))
            records.append((i, rows))

        # flows whose both ends are written
        kept = np.zeros(ev.size, dtype=bool)
        kept[event_rows] = True
        flow_sel = np.flatnonzero(kept[prepared.flow_from] & kept[prepared.flow_to])
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
        counter_rows = np.flatnonzero((c.ts >= max(lo, origin)) & (c.ts < cut))
        counter_ts = c.ts[counter_rows]
        if window is not None and c.ts.size:
            # the value each series holds when the window opens
            before = np.flatnonzero(c.ts < lo)
            if before.size:
                order = before[np.lexsort((c.ts[before], c.series[before]))]
                last = np.ones(order.size, dtype=bool)
                last[:-1] = c.series[order][1:] != c.series[order][:-1]
                carried = order[last]
                counter_rows = np.concatenate([carried, counter_rows])
                counter_ts = np.concatenate([np.full(carried.size, lo, np.int64), counter_ts])

        # one global order: time, then record class (slices before flow ends), longer first.
        # The sort spans every record of the file (1.8M for the bench trace): narrow key types,
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
        order = np.lexsort(
            (
                local_all,
                src_all,
                np.concatenate(nest_list),
                longer_first,
                np.concatenate(cls_list),
                np.concatenate(ts_list),
            )
        )
        del longer_first, nest_list, cls_list, ts_list

        def lines_of(src: int, local: Int64Array) -> pa.Array:
            if src < len(records):
                s = ev if src == 0 else prepared.analysis[src - 1]
                return _slice_lines(s, records[src][1][local], origin)
            if src == n_parts - 3:
                return _flow_lines(ev, f_from[local], f_out_ts[local], flow_ids[local], "s", origin)
            if src == n_parts - 2:
                return _flow_lines(ev, f_to[local], f_in_ts[local], flow_ids[local], "f", origin)
            return _counter_lines_at(c, counter_rows[local], counter_ts[local], origin)

        used_pids = set(_distinct(ev.pid[event_rows]).tolist())
        used_threads = _used_threads(ev.pid[event_rows], ev.tid[event_rows])
        for src, rows in records[1:]:
            a = prepared.analysis[src - 1]
            used_pids |= set(_distinct(a.pid[rows]).tolist())
            used_threads |= _used_threads(a.pid[rows], a.tid[rows])
        used_pids |= set(_distinct(c.pid[counter_rows]).tolist())
        metadata = _metadata_lines(prepared, used_pids, used_threads)

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
            pieces: list[pa.Array] = []
            positions: list[Int64Array] = []
            for value in np.unique(chunk_src):
                where = np.flatnonzero(chunk_src == value)
                pieces.append(lines_of(int(value), local[where]))
                positions.append(where)
            merged = pa.concat_arrays(pieces).take(
                pa.array(np.argsort(np.concatenate(positions), kind="stable"))
            )
            del pieces
            data = _string_bytes(merged)  # keeps the array's buffer alive
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
                dropped=int(prepared.dropped.size),
                flows_unplaceable=prepared.flows_unplaceable,
            )
        )

    def close(self) -> TimelineStats:
        """Write otherData and end the file; rename it into place."""
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
            + '\n],\n"otherData":'
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
        return stats

    def abort(self) -> None:
        """Leave nothing behind (an interrupted file must not look whole)."""
        self._deflate = None
        self._tmp.unlink(missing_ok=True)


class _Writable(Protocol):
    def write(self, data: memoryview, /) -> object: ...


class _Deflate:
    """A gzip member's deflate stream, written in segments into a file reopened for each.

    Within a segment one compressor runs; a segment that more follow ends with a sync flush
    (a byte-aligned, non-final block) and lets its compressor go (about 300 KB of zlib
    state); the next starts a fresh one. The concatenation is one valid deflate stream.
    """

    def __init__(self) -> None:
        self.crc = 0
        self.size = 0
        self._raw: IO[bytes] | None = None
        self._compressor: Any = None  # zlib's compressor type is not public

    def attach(self, raw: IO[bytes]) -> None:
        """Write into ``raw`` from now on; start a segment when none is open."""
        self._raw = raw
        if self._compressor is None:
            self._compressor = zlib.compressobj(
                _GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0
            )

    def write(self, data: memoryview) -> None:
        assert self._raw is not None and self._compressor is not None
        self.crc = zlib.crc32(data, self.crc)
        self.size += data.nbytes
        self._raw.write(self._compressor.compress(data))

    def end_segment(self) -> None:
        """End the open segment on a byte boundary, leaving the stream open."""
        assert self._raw is not None and self._compressor is not None
        self._raw.write(self._compressor.flush(zlib.Z_SYNC_FLUSH))
        self._compressor = None
        self._raw = None

    def finish(self) -> None:
        """End the stream and the gzip member (CRC and size, as gzip.GzipFile does)."""
        assert self._raw is not None and self._compressor is not None
        self._raw.write(self._compressor.flush())
        self._raw.write(struct.pack("<LL", self.crc, self.size & 0xFFFFFFFF))
        self._compressor = None
        self._raw = None


# What gzip.GzipFile writes with no file name, mtime 0 and a middle compression level.
_GZIP_HEADER: Final = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x00\xff"


@contextmanager
def _background_writes(out: _Writable) -> Iterator[Callable[[memoryview], None]]:
    """Hand chunks to a second thread that compresses and writes them, in order.

    zlib and file writes release the GIL, so the next chunk is formatted while the previous
    one is compressed (compression is about a third of a timeline's time). At most one chunk
    waits in the queue, so memory stays that of a few chunks.
    """
    pending: queue.Queue[memoryview | None] = queue.Queue(maxsize=1)
    failure: list[BaseException] = []

    def drain() -> None:
        while (data := pending.get()) is not None:
            if not failure:
                try:
                    out.write(data)
                except BaseException as error:  # raised again in the calling thread
                    failure.append(error)

    worker = threading.Thread(target=drain, name="timeline-writer", daemon=True)
    worker.start()

    def write(data: memoryview) -> None:
        if failure:
            raise failure[0]
        pending.put(data)

    try:
        yield write
    finally:
        pending.put(None)
        worker.join()
    if failure:
        raise failure[0]


def _used_threads(pid: Int64Array, tid: Int64Array) -> set[tuple[int, int]]:
    if pid.size == 0:
        return set()
    pairs = _unique_rows([pid, tid])[0]
    return {(int(p), int(t)) for p, t in pairs}


def _counter_lines_at(c: _Counters, rows: Int64Array, ts: Int64Array, origin: int) -> pa.Array:
    shifted = _Counters(
        ts=ts,
        pid=c.pid[rows],
        series=c.series[rows],
        names=c.names,
        keys=c.keys,
        value=c.value[rows],
    )
    return _counter_lines(shifted, np.arange(rows.size, dtype=np.int64), origin)
