"""A profile's timeline records, prepared once: every slice, flow and counter sample placed
on its track, with what formats its JSON, ready to be cut by window into any number of files.

Preparing is the costly part (about 1 s and 100+ MB on a 1.4M-event profile); the whole
timeline and its step slices are written from one :class:`PreparedTimeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import busy
from perfledger.analysis.beside import beside
from perfledger.analysis.columns import dictionary_codes, factorize, take, unique_rows
from perfledger.errors import PerfledgerError
from perfledger.memory import arrow_maps, drop_mapped_pages, release_freed_memory
from perfledger.model import schema
from perfledger.model.accounts import GAPS_SCHEMA
from perfledger.render.timeline.grouping import (
    BoolArray,
    ColumnValues,
    Int64Array,
    KindCodes,
    blocks,
    event_kinds,
    int64,
    kind_mask,
)
from perfledger.render.timeline.layout import (
    ANALYSIS,
    DEVICE,
    GAPS_LANE,
    Metadata,
    RowArray,
    ThreadKey,
    TrackLayout,
    event_tracks,
)
from perfledger.render.timeline.slices import (
    PidMap,
    RankPathSpan,
    Slices,
    TidMap,
    critical_path_slices,
    finding_spans,
)
from perfledger.render.timeline.text import Builder, join, json_strings, optional_field

# Chrome's reserved colour names; Perfetto colours slices by name, so causes also differ there.
IDLE_CAUSE_COLOURS: Final[Mapping[str, str]] = {
    "host_dispatch": "terrible",
    "sync": "bad",
    "dataloader": "yellow",
    "launch_latency": "olive",
    "other": "grey",
}

# Among slices with the same start and duration on one track, the outer one comes first.
_KIND_NESTING_ORDER: Final[Mapping[str, int]] = {
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


@dataclass(frozen=True)
class CounterSeries:
    """Counter samples, columns by row; series index the track and counter names."""

    ts: Int64Array
    pid: npt.NDArray[np.int32]  # small synthetic numbers: a large trace has millions of rows
    series: npt.NDArray[np.int32]  # index into names/keys
    names: pa.Array  # JSON-escaped track name per series
    keys: pa.Array  # JSON-escaped counter name per series
    value: npt.NDArray[np.float64]


@dataclass(frozen=True)
class PreparedTimeline:
    """Every record of one profile (or one rank of it), placed and ready to format.

    Made by :func:`prepare_timeline`; any number of files (the whole timeline, step slices,
    windows) are written from it, which leaves it as it was.

    Attributes:
        origin: time zero of every file written from it (absolute ns).
        events: the events' slices and instants, one row per event row.
        analysis: the idle gaps' and findings' slices.
        flow_from, flow_to: rows in ``events`` of each flow's launch and device task.
        flow_out_ts, flow_in_ts: where each flow leaves its launch and enters its task.
        flows_unplaceable: tasks that ended before their launch began (clock skew).
        counters: the counter samples, device busy % among them.
        metadata: (pid, tid (0: a process), name, sort index, "process" or "thread").
        overlapping: slices moved to overflow lanes.
        dropped: rows of ``events`` left out (their track needed more than MAX_LANES lanes).
        event_end: start + dur of every event row, for the window of each file.
        dropped_count: the event rows left out of the whole profile (or rank), ``dropped``
            among them (a preparation of some rows, :func:`prepare_rows`, lists none).
    """

    origin: int
    events: Slices
    analysis: list[Slices]
    flow_from: Int64Array
    flow_to: Int64Array
    flow_out_ts: Int64Array
    flow_in_ts: Int64Array
    flows_unplaceable: int
    counters: CounterSeries
    metadata: list[Metadata]
    overlapping: int
    dropped: Int64Array
    event_end: Int64Array
    dropped_count: int


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
    devices, device_row = factorize(int64(device_busy, "device"))
    widths, width_row = factorize(int64(device_busy, "width_ns"))
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


def event_slices(
    events: pa.Table,
    row_thread: RowArray,
    thread_keys: list[ThreadKey],
    pids: PidMap,
    tids: TidMap,
) -> Slices:
    """The events' slices and instants on their threads (``row_thread`` from event_tracks)."""
    start = int64(events, "start_ns")
    thread_pid = np.array([pids[k[0]] for k in thread_keys] + [-1], dtype=np.int64)
    thread_tid = np.array([tids[k] for k in thread_keys] + [-1], dtype=np.int64)
    pid = thread_pid[row_thread]  # -1 picks the sentinel
    tid = thread_tid[row_thread]
    kind_codes, kinds = dictionary_codes(events, "kind")
    nesting_of_kind = np.array(
        [_KIND_NESTING_ORDER.get(k or "", 99) for k in kinds] or [0], dtype=np.int8
    )
    name_codes, names = dictionary_codes(events, "name")
    step = int64(events, "step")
    correlation = int64(events, "correlation")
    external_id = int64(events, "external_id")
    moved = int64(events, "bytes")
    # ``,"shapes":"..."`` per distinct value, looked up per row: formatted once, not per file
    optional = [optional_field(key, events.column(key)) for key in ("shapes", "dtypes")]
    # an absent value's text is empty: left out of the record's pieces, not taken as ""
    filled = [np.asarray(pc.binary_length(texts).to_numpy()) > 0 for _, texts in optional]

    def args(line: Builder, rows: Int64Array) -> None:
        line.ints(step[rows], before='{"step":')
        for key, values, absent in (
            ("correlation", correlation, schema.NO_ID),
            ("external_id", external_id, schema.NO_ID),
            ("bytes", moved, -1),
        ):
            sel = values[rows]
            line.ints(sel, sel != absent, before=f',"{key}":')
        for (codes, texts), shown in zip(optional, filled, strict=True):
            at = codes[rows]
            line.table(texts, at, shown[at])
        line.text("}")

    kind_values = [k or "" for k in kinds]
    return Slices(
        start=start,
        dur=int64(events, "dur_ns"),
        pid=pid,
        tid=tid,
        instant=kind_mask(events, (schema.INSTANT,)),
        nesting=nesting_of_kind[kind_codes] if kind_codes.size else np.zeros(0, np.int8),
        name_index=name_codes,
        names=json_strings(names),
        cat_index=kind_codes,
        cats=json_strings(kind_values),
        args=args,
    )


def gap_slices(gaps: pa.Table, layout: TrackLayout) -> Callable[[PidMap, TidMap], Slices]:
    """Register an ``idle gaps`` lane per device; the builder of the gaps' slices, to call
    once pids and tids are numbered."""
    missing = [f.name for f in GAPS_SCHEMA if f.name not in gaps.column_names]
    if missing:
        raise PerfledgerError(f"gaps table lacks columns: {', '.join(missing)}")
    rank = int64(gaps, "rank")
    device = int64(gaps, "device")
    pairs: list[tuple[int, int]] = (
        [(int(r), int(d)) for r, d in unique_rows([rank, device])[0]] if gaps.num_rows else []
    )
    for r, d in pairs:
        process = layout.process(int(r), DEVICE, int(d))
        layout.thread(process, (GAPS_LANE, -1, 0), "idle gaps")

    def build(pids: PidMap, tids: TidMap) -> Slices:
        n = gaps.num_rows
        pid = np.zeros(n, dtype=np.int64)
        tid = np.zeros(n, dtype=np.int64)
        for r, d in pairs:
            process = (int(r), DEVICE, int(d))
            sel = (rank == r) & (device == d)
            pid[sel] = pids[process]
            tid[sel] = tids[(process, (GAPS_LANE, -1, 0))]
        start = int64(gaps, "start_ns")
        cause_codes, causes = dictionary_codes(gaps, "cause")
        step = int64(gaps, "step")
        cause_text = [c or "other" for c in causes]

        causes = join(',"cause":', json_strings(cause_text), "}")

        def args(line: Builder, rows: Int64Array) -> None:
            line.ints(step[rows], before='{"step":')
            line.table(causes, cause_codes[rows])

        return Slices(
            start=start,
            dur=np.maximum(int64(gaps, "end_ns") - start, 0),
            pid=pid,
            tid=tid,
            instant=np.zeros(n, dtype=bool),
            nesting=np.zeros(n, dtype=np.int8),
            name_index=cause_codes,
            names=json_strings([f"idle: {c}" for c in cause_text]),
            colours=pa.array(
                [f',"cname":"{IDLE_CAUSE_COLOURS.get(c, "grey")}"' for c in cause_text],
                pa.string(),
            ),
            cat_index=np.zeros(n, dtype=np.int8),
            cats=json_strings(["idle"]),
            args=args,
        )

    return build


def counter_series(
    counters: pa.Table, layout: TrackLayout, origin: int
) -> Callable[[PidMap], CounterSeries]:
    """Register the analysis process of each rank with counters; the builder of the samples.

    Non-finite values are left out; of the samples before ``origin``, each series keeps its
    last one, moved to ``origin``.
    """
    missing = [f.name for f in schema.COUNTERS_SCHEMA if f.name not in counters.column_names]
    if missing:
        raise PerfledgerError(f"counters table lacks columns: {', '.join(missing)}")
    value = np.asarray(counters.column("value").to_numpy(), dtype=np.float64)
    finite = np.isfinite(value)
    if not finite.all():  # else the same table, not a copy of it
        counters = counters.filter(pa.array(finite))
        value = value[finite]
    del finite
    rank = int64(counters, "rank")
    ts = int64(counters, "ts_ns")
    track_codes, tracks = dictionary_codes(counters, "track")
    name_codes, names = dictionary_codes(counters, "name")
    uniq, series_codes = unique_rows([rank, track_codes, name_codes])
    del track_codes, name_codes
    series = series_codes.astype(np.int32)  # far fewer series than 2**31
    del series_codes
    for r in np.unique(rank):
        layout.process(int(r), ANALYSIS, 0)
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

    def build(pids: PidMap) -> CounterSeries:
        pid_of_series = [pids[(int(r), ANALYSIS, 0)] for r in uniq[:, 0]] or [0]
        pid = np.array(pid_of_series, dtype=np.int32)[series]
        return CounterSeries(
            ts=ts,
            pid=pid if series.size else np.zeros(0, np.int32),
            series=series,
            names=json_strings([tracks[int(t)] or "counter" for t in uniq[:, 1]]),
            keys=json_strings([names[int(n)] or "value" for n in uniq[:, 2]]),
            value=value,
        )

    return build


# The events' columns a timeline is made from: every canonical one but the args text and the
# flops (the slices' args are made from the other columns), so that a reader of a stored
# profile leaves the largest column on disk.
EVENT_COLUMNS: Final = tuple(
    name for name in schema.EVENTS_SCHEMA.names if name not in ("args", "flops")
)


def check_events(events: pa.Table) -> None:
    """Raise when ``events`` lacks a column of :data:`EVENT_COLUMNS`."""
    missing = [name for name in EVENT_COLUMNS if name not in events.column_names]
    if missing:
        raise PerfledgerError(f"events table lacks columns: {', '.join(missing)}")


def flows(events: pa.Table, kinds: KindCodes | None = None) -> tuple[Int64Array, Int64Array]:
    """(launch row, task row) per device task whose launch is known, by (rank, correlation).
    ``kinds``: the events' kind codes, when made already.

    The rows are read a block at a time (:func:`blocks`): only the launches' and tasks'
    keys are gathered, not full-length copies of the columns."""
    launch_kind = kind_mask(events, schema.LAUNCH_KINDS, kinds)
    task_kind = kind_mask(events, schema.DEVICE_TASK_KINDS, kinds)
    # per block: launch rows, keys and starts; task rows and keys
    parts: list[list[Int64Array]] = [[], [], [], [], []]
    for low, block in blocks(events):
        high = low + block.num_rows
        correlation = int64(block, "correlation")
        device = int64(block, "device")
        rank = int64(block, "rank")
        known = correlation >= 0
        launch = np.flatnonzero(launch_kind[low:high] & (device < 0) & known)
        task = np.flatnonzero(task_kind[low:high] & (device >= 0) & known)
        parts[0].append(launch + low)
        parts[1].append(rank[launch] * (1 << 40) + correlation[launch])
        parts[2].append(int64(block, "start_ns")[launch])
        parts[3].append(task + low)
        parts[4].append(rank[task] * (1 << 40) + correlation[task])
    del launch_kind, task_kind
    launch_rows, launch_keys, launch_start, task_rows, task_keys = (
        _joined(parts, i) for i in range(5)
    )
    if launch_rows.size == 0 or task_rows.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    # the earliest launch wins when a source repeats an id (as in the step analysis)
    order = np.lexsort((launch_start, launch_keys))
    del launch_start
    keys_sorted = launch_keys[order]
    del launch_keys
    first = np.ones(keys_sorted.size, dtype=bool)
    first[1:] = keys_sorted[1:] != keys_sorted[:-1]
    keys_unique = keys_sorted[first]
    del keys_sorted
    rows_unique = launch_rows[order[first]]
    del launch_rows, order, first
    pos = np.clip(np.searchsorted(keys_unique, task_keys), 0, keys_unique.size - 1)
    found = keys_unique[pos] == task_keys
    return rows_unique[pos[found]], task_rows[found]


def _joined(parts: list[list[Int64Array]], i: int) -> Int64Array:
    """The blocks' arrays ``parts[i]`` one after the other (empty when there is none),
    the blocks' own let go."""
    joined = np.concatenate(parts[i]) if parts[i] else np.zeros(0, dtype=np.int64)
    parts[i] = []
    return joined


@dataclass(frozen=True)
class Placement:
    """Where every record of a profile (or one rank of it) goes, found over all its events.

    A preparation of all the event rows (:func:`prepare_timeline`) and one of some of them
    (:func:`prepare_rows`, e.g. the rows near a few steps) share it, so the tracks, numbers,
    flows and counters of a file do not depend on how many rows were prepared with it.

    Attributes:
        row_thread: per event row, its index into ``thread_keys`` (-1: left out).
        flow_from, flow_to: event rows of each flow's launch and device task (placeable
            flows whose both ends are on a track), with ``flow_out_ts`` and ``flow_in_ts``.
        dropped: the number of event rows left out.
        Others: as :class:`PreparedTimeline`'s.
    """

    origin: int
    row_thread: RowArray
    thread_keys: list[ThreadKey]
    pids: PidMap
    tids: TidMap
    metadata: list[Metadata]
    analysis: list[Slices]
    counters: CounterSeries
    flow_from: Int64Array
    flow_to: Int64Array
    flow_out_ts: Int64Array
    flow_in_ts: Int64Array
    flows_unplaceable: int
    overlapping: int
    dropped: int


def place_timeline(
    events: pa.Table,
    *,
    gaps: pa.Table | None = None,
    counters: pa.Table | None = None,
    findings: Sequence[Mapping[str, Any]] | None = None,
    process_names: Mapping[int, str] | None = None,
    origin_ns: int | None = None,
    device_busy: bool = True,
    first_pid: int = 1,
    first_tid: int = 1,
    critical_path: Sequence[RankPathSpan] = (),
) -> Placement:
    """The tracks, numbers, flows, counters and analysis slices of a profile: everything of
    its preparation but the events' own slices (arguments as :func:`prepare_timeline`)."""
    check_events(events)
    origin = profile_origin_ns(events, counters) if origin_ns is None else origin_ns
    layout = TrackLayout(process_names)
    kinds = event_kinds(events)
    # the flows and the device busy % (which read no track) beside the tracks: their passes
    # spend most of their time in numpy and Arrow kernels, outside the GIL
    with beside(_flows_and_busy, events, kinds, origin, device_busy) as beside_tracks:
        row_thread, thread_keys, overlapping = event_tracks(events, layout, kinds)
        (flow_from, flow_to, out_ts, in_ts, placeable), busy_counters = beside_tracks.result()
    del kinds
    # the pages of the events' mapped files read so far (each pass reads a few columns),
    # and the blocks the tracks' passes freed (the next passes allocate elsewhere)
    drop_mapped_pages(events)
    release_freed_memory()
    gap_build = gap_slices(gaps, layout) if gaps is not None and gaps.num_rows else None
    finding_build = finding_spans(findings or (), layout)
    path_build = critical_path_slices(critical_path, layout)
    all_counters = [c for c in (counters,) if c is not None and c.num_rows]
    if busy_counters is not None and busy_counters.num_rows:
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
    counter_build = counter_series(counter_table, layout, origin)
    del counter_table, all_counters
    release_freed_memory()  # the counters' temporaries, before the flows' pass
    pids, tids, metadata = layout.assign(first_pid, first_tid)
    analysis = [b(pids, tids) for b in (gap_build, finding_build, path_build) if b is not None]
    kept = (row_thread[flow_from] >= 0) & (row_thread[flow_to] >= 0) & placeable
    return Placement(
        origin=origin,
        row_thread=row_thread,
        thread_keys=thread_keys,
        pids=pids,
        tids=tids,
        metadata=metadata,
        analysis=analysis,
        counters=counter_build(pids),
        flow_from=flow_from[kept],
        flow_to=flow_to[kept],
        flow_out_ts=out_ts[kept],
        flow_in_ts=in_ts[kept],
        flows_unplaceable=int((~placeable).sum()),
        overlapping=overlapping,
        dropped=int((row_thread < 0).sum()),
    )


def _flows_and_busy(
    events: pa.Table, kinds: KindCodes, origin: int, device_busy: bool
) -> tuple[tuple[Int64Array, Int64Array, Int64Array, Int64Array, BoolArray], pa.Table | None]:
    """The flows' ends and their points (:func:`flows`, :func:`flow_points`), and (with
    ``device_busy``) the device busy % counters."""
    flow_from, flow_to = flows(events, kinds)
    ends = np.concatenate([flow_from, flow_to])
    out_ts, in_ts, placeable = flow_points(
        ColumnValues(events, "start_ns").at(ends),
        ColumnValues(events, "dur_ns").at(ends),
        np.arange(flow_from.size, dtype=np.int64),
        np.arange(flow_from.size, flow_from.size * 2, dtype=np.int64),
    )
    del ends
    busy_counters = None
    if device_busy:
        tasks = _device_tasks(events, kinds)
        busy_counters = device_busy_counters(busy.device_busy(tasks, origin_ns=origin))
    return (flow_from, flow_to, out_ts, in_ts, placeable), busy_counters


# The columns the device busy % is computed from (busy.device_busy).
_BUSY_COLUMNS: Final = ("rank", "device", "kind", "start_ns", "dur_ns")


def _device_tasks(events: pa.Table, kinds: KindCodes) -> pa.Table:
    """The device tasks' rows of the columns the device busy % reads: what
    :func:`busy.device_busy` takes of the events (host events are not device time), without
    its full-length copies of every row's columns."""
    task = kind_mask(events, schema.DEVICE_TASK_KINDS, kinds)
    for low, block in blocks(events):
        task[low : low + block.num_rows] &= int64(block, "device") >= 0
    return events.select(list(_BUSY_COLUMNS)).filter(pa.array(task))


def prepare_timeline(
    events: pa.Table,
    *,
    gaps: pa.Table | None = None,
    counters: pa.Table | None = None,
    findings: Sequence[Mapping[str, Any]] | None = None,
    process_names: Mapping[int, str] | None = None,
    origin_ns: int | None = None,
    device_busy: bool = True,
    first_pid: int = 1,
    first_tid: int = 1,
    critical_path: Sequence[RankPathSpan] = (),
) -> PreparedTimeline:
    """Place every record of a profile on its track, once for all the files written from it.

    Args:
        events: canonical events (:data:`perfledger.model.schema.EVENTS_SCHEMA`).
        gaps: idle gaps (:data:`perfledger.model.accounts.GAPS_SCHEMA`), shown by cause.
        counters: counter samples (:data:`perfledger.model.schema.COUNTERS_SCHEMA`).
        findings: findings whose ``spans`` (``[{rank, start_ns, end_ns}]``) become slices.
        process_names: a label per rank (host name, job name), else ``rank <n>``.
        origin_ns: time zero of the files; the first event (else counter sample) by default.
        device_busy: add the device busy % (:func:`perfledger.analysis.busy.device_busy`)
            of the device tasks as counters.
        first_pid, first_tid: the first synthetic pid and tid, so that the ranks of one file
            prepared one by one keep numbers unique across it.
        critical_path: (rank, step, span) of the steps' critical paths, shown on a
            ``critical path`` track of each rank's analysis process.
    """
    placement = place_timeline(
        events,
        gaps=gaps,
        counters=counters,
        findings=findings,
        process_names=process_names,
        origin_ns=origin_ns,
        device_busy=device_busy,
        first_pid=first_pid,
        first_tid=first_tid,
        critical_path=critical_path,
    )
    return prepare_all_rows(placement, events)


def prepare_all_rows(placement: Placement, events: pa.Table) -> PreparedTimeline:
    """The preparation of every row of ``events``, the table ``placement`` was made from."""
    slices = event_slices(
        events, placement.row_thread, placement.thread_keys, placement.pids, placement.tids
    )
    return _prepared(
        placement,
        slices,
        placement.flow_from,
        placement.flow_to,
        np.ones(placement.flow_from.size, dtype=bool),
        np.flatnonzero(placement.row_thread < 0),
    )


# The columns an event's slice is formatted from (event_slices).
_SLICE_COLUMNS: Final = (
    "start_ns",
    "dur_ns",
    "kind",
    "name",
    "step",
    "correlation",
    "external_id",
    "bytes",
    "shapes",
    "dtypes",
)


def prepare_rows(
    placement: Placement,
    events: pa.Table,
    rows: Int64Array,
    *,
    maps: list[tuple[int, int]] | None = None,
) -> PreparedTimeline:
    """The preparation of some event rows only (ascending, none left out by the placement).

    A file whose records all lie among these rows (its window's events, and the flows
    between them) is written from it with the bytes it has when written from the
    preparation of every row: the rows keep their order, the tracks, numbers, counters,
    analysis slices and file figures are the placement's, made over all the rows.
    ``maps``: the maps of the events' files as :func:`~perfledger.memory.arrow_maps` read
    them while ``events`` was already held (read here when not given).
    """
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and int(placement.row_thread[rows].min()) < 0:
        raise ValueError("a preparation of some rows holds no row the placement left out")
    # column by column, chunk by chunk (Arrow's take of a chunked column first joins its
    # chunks: a copy of the whole column for each step's few thousand rows). The pages of
    # the events' mapped files read for one column are let go before the next: rows near
    # some steps lie all over the file (a few hundred MB read).
    taken: dict[str, pa.ChunkedArray] = {}
    if maps is None:  # read once: the events' maps stay while they are held here
        maps = arrow_maps()
    for name in _SLICE_COLUMNS:
        taken[name] = take(events.column(name), rows)
        drop_mapped_pages(events.column(name), maps=maps)
    subset = pa.table(taken)
    del taken
    slices = event_slices(
        subset, placement.row_thread[rows], placement.thread_keys, placement.pids, placement.tids
    )
    del subset
    # a flow goes with these rows when both its ends are among them
    member = np.zeros(placement.row_thread.size, dtype=bool)
    member[rows] = True
    kept = member[placement.flow_from] & member[placement.flow_to]
    del member
    local_from = np.zeros(placement.flow_from.size, dtype=np.int64)
    local_to = np.zeros(placement.flow_to.size, dtype=np.int64)
    local_from[kept] = np.searchsorted(rows, placement.flow_from[kept])
    local_to[kept] = np.searchsorted(rows, placement.flow_to[kept])
    return _prepared(placement, slices, local_from, local_to, kept, np.zeros(0, dtype=np.int64))


def _prepared(
    placement: Placement,
    slices: Slices,
    flow_from: Int64Array,
    flow_to: Int64Array,
    flow_kept: BoolArray,
    dropped: Int64Array,
) -> PreparedTimeline:
    """A preparation of the placement's events whose slices are ``slices`` (rows of which
    ``flow_from`` and ``flow_to`` give the flows' ends, those ``flow_kept``)."""
    return PreparedTimeline(
        origin=placement.origin,
        events=slices,
        analysis=placement.analysis,
        flow_from=flow_from[flow_kept],
        flow_to=flow_to[flow_kept],
        flow_out_ts=placement.flow_out_ts[flow_kept],
        flow_in_ts=placement.flow_in_ts[flow_kept],
        flows_unplaceable=placement.flows_unplaceable,
        counters=placement.counters,
        metadata=placement.metadata,
        overlapping=placement.overlapping,
        dropped=dropped,
        event_end=slices.start + slices.dur,
        dropped_count=placement.dropped,
    )


def flow_points(
    start: Int64Array, dur: Int64Array, launch: Int64Array, task: Int64Array
) -> tuple[Int64Array, Int64Array, BoolArray]:
    """Where each flow leaves its launch and enters its task, and whether it can be placed.

    ``start`` and ``dur``: of the slices that ``launch`` and ``task`` index. A flow must not
    go back in time (Perfetto meets its end before its start and drops it), and each end
    must lie inside its own slice, away from a neighbour starting at the same instant. It
    leaves the launch at the task's start, but no later than the launch's middle, and
    enters the task at its middle, but no earlier than it left. Tasks that ended before
    their launch began (clock skew between host and device) get no flow.
    """
    l_start = start[launch]
    l_mid = l_start + dur[launch] // 2
    t_start = start[task]
    t_dur = dur[task]
    t_mid = t_start + t_dur // 2
    out_ts = np.minimum(l_mid, np.maximum(t_start, l_start))
    in_ts = np.maximum(t_mid, out_ts)
    placeable = (in_ts < t_start + t_dur) | ((t_dur == 0) & (in_ts == t_start))
    return out_ts, in_ts, placeable
