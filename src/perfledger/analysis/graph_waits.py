"""The step graph's waits between threads and streams (docs/whatif.md, "The graph"): how long
a host thread worked between two of its nodes, which call of another thread woke a waiting one,
and which task a stream waited for through an event recorded on another stream.

Pure functions over the canonical events table, for :mod:`perfledger.analysis.graph`.
"""

from __future__ import annotations

import json
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.intervals import Int64Array, union
from perfledger.model import schema

# A stretch of host time this long with nothing running on a thread is the thread waiting for
# another (a backward thread between two steps), not host work; shorter ones are the
# interpreter's time between operators.
THREAD_WAIT_NS: Final = 1_000_000
# Device-side mark of a stream waiting for an event, with the stream and the record's call in
# its args (Kineto's "Stream Wait Event": wait_on_stream, wait_on_cuda_event_record_corr_id).
STREAM_WAIT_EVENT: Final = "Stream Wait Event"
# Host calls that make a stream wait for an event recorded on another stream.
STREAM_WAIT_CALLS: Final = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
# Host slices that are a thread's own work (annotations and step marks only wrap it).
WORK_KINDS: Final = (schema.CPU_OP, schema.PYTHON, schema.RUNTIME, schema.SYNC, schema.DATALOADER)
# No candidate yet (below every time of a trace).
_NOT_YET: Final = np.iinfo(np.int64).min // 4

_BoolArray = npt.NDArray[np.bool_]


def unique_pairs(first: Int64Array, second: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The distinct (first, second) pairs in order and each row's index among them: what
    ``np.unique`` of the stacked rows gives, by numbering each column's distinct values
    (:func:`~perfledger.analysis.columns.unique_rows`: hashed, not sorted row by row)."""
    return columns.unique_rows([np.asarray(first, np.int64), np.asarray(second, np.int64)])


def strings_at(table: pa.Table, column: str, rows: Int64Array) -> npt.NDArray[np.object_]:
    """A string column's values at ``rows`` as an object array, decoded once per distinct
    value (:func:`perfledger.analysis.columns.strings` at some rows, without a pointer per row
    of the table)."""
    result = np.full(rows.size, None, dtype=object)
    offset = 0
    for chunk in table.column(column).chunks:  # a loop over chunks
        size = len(chunk)
        here = np.flatnonzero((rows >= offset) & (rows < offset + size))
        if here.size:
            local = rows[here] - offset
            if pa.types.is_dictionary(chunk.type):
                values = np.asarray(chunk.dictionary.to_pylist(), dtype=object)
                result[here] = values[chunk.indices.to_numpy(zero_copy_only=False)[local]]
            else:
                result[here] = np.asarray(chunk.take(pa.array(local)).to_pylist(), dtype=object)
        offset += size
    return result


def coded_at(
    table: pa.Table, column: str, rows: Int64Array
) -> tuple[npt.NDArray[np.int32], tuple[str | None, ...]]:
    """A string column's values at ``rows`` as codes into distinct values (``values[code]``;
    equal codes for equal values), without an object a row: read from the chunks' codes
    (:func:`codes_at`) where the column is a dictionary one."""
    if pa.types.is_dictionary(table.schema.field(column).type):
        codes, values = columns.codes_at(table, column, rows)
        return codes.astype(np.int32), tuple(values)
    texts = pa.array(strings_at(table, column, rows), pa.string())
    encoded = texts.dictionary_encode(null_encoding="encode")
    return np.asarray(encoded.indices, np.int32), tuple(encoded.dictionary.to_pylist())


def wake_ups(
    thread: Int64Array,
    wait_end: _BoolArray,
    pred: Int64Array,
    start: Int64Array,
    gap_start: Int64Array,
    delay: Int64Array,
    busy: Int64Array,
) -> tuple[Int64Array, Int64Array]:
    """For each host node (sorted by thread, start) whose thread waited before it, the node of
    another thread that began last before it and after the wait began (-1 none), and the time
    from that node's start to this one's. ``wait_end``: the nodes that end a synchronisation
    wait (not their thread's own steps)."""
    wake = np.full(thread.size, -1, dtype=np.int64)
    wake_delay = np.zeros(thread.size, dtype=np.int64)
    waited = (pred >= 0) & (delay > busy) & (~wait_end)
    if not waited.any() or np.unique(thread).size < 2:
        return wake, wake_delay
    # the wait ends are not their thread's own steps: only calls can wake another thread
    callers = np.flatnonzero(~wait_end)
    for t in np.unique(thread[waited]).tolist():  # a loop over threads
        others = callers[thread[callers] != t]
        others = others[np.argsort(start[others], kind="stable")]
        mine = np.flatnonzero(waited & (thread == t))
        at = np.searchsorted(start[others], start[mine], side="left") - 1
        found = at >= 0
        source = others[np.maximum(at, 0)]
        found &= start[source] >= gap_start[mine]
        wake[mine[found]] = source[found]
        wake_delay[mine[found]] = start[mine[found]] - start[source[found]]
    return wake, wake_delay


def thread_work(
    events: pa.Table,
    host: _BoolArray,
    start: Int64Array,
    end: Int64Array,
    thread_keys: Int64Array,
    thread_node: Int64Array,
    gap_start: Int64Array,
    gap_end: Int64Array,
) -> Int64Array:
    """Of each host gap [gap_start, gap_end) on its thread, the time the thread worked: what
    its own slices cover, plus what they leave uncovered when that is under
    :data:`THREAD_WAIT_NS` (else the uncovered time is a wait for another thread)."""
    gap = gap_end - gap_start
    covered = np.zeros(gap.size, dtype=np.int64)
    if gap.size == 0 or not (gap > 0).any():
        return np.asarray(np.maximum(gap, 0), np.int64)
    work = host & columns.isin(events, "kind", WORK_KINDS)
    pid = columns.int64(events, "pid")
    thread_id = columns.int64(events, "stream")
    for i, (p, t) in enumerate(thread_keys.tolist()):  # a loop over threads
        mine = np.flatnonzero(thread_node == i)
        rows = work & (pid == p) & (thread_id == t)
        covered[mine] = union(start[rows], end[rows]).covered(gap_start[mine], gap_end[mine])
    idle = gap - covered
    return np.asarray(np.where(idle >= THREAD_WAIT_NS, covered, np.maximum(gap, 0)), np.int64)


def event_edges(
    events: pa.Table,
    host: _BoolArray,
    device: Int64Array,
    start: Int64Array,
    end: Int64Array,
    correlation: Int64Array,
    task_rows: Int64Array,
    launch_of_task: Int64Array,
) -> tuple[Int64Array, Int64Array, int]:
    """(awaited task row, waiting task row) of every cross-stream event wait, and how many
    waits the trace's times contradict (the waiting task began before the awaited one ended).

    A wait is a device-side "Stream Wait Event" mark (its stream waits; its args name the
    recording stream and the record's call) or, without such a mark, a host call
    ``cudaStreamWaitEvent`` whose args name no stream: then the waiting stream is the one of
    the next task the same thread launched, and the recording stream the other stream of that
    device that was last launched to before the call (the record precedes its wait on the
    same thread). The awaited task is the last one launched to the recording stream before
    the record (or the wait call); the waiting one, the first launched to the waiting stream
    after the wait call.
    """
    empty = np.zeros(0, dtype=np.int64)
    calls = np.flatnonzero(host & columns.isin(events, "name", STREAM_WAIT_CALLS))
    marks = np.flatnonzero(
        ~host
        & columns.isin(events, "kind", [schema.DEVICE_ANNOTATION])
        & columns.isin(events, "name", [STREAM_WAIT_EVENT])
    )
    if task_rows.size == 0 or (calls.size == 0 and marks.size == 0):
        return empty, empty, 0
    stream = columns.int64(events, "stream")
    pid = columns.int64(events, "pid")
    has_launch = launch_of_task >= 0
    launch = np.maximum(launch_of_task, 0)
    issued = np.where(has_launch, start[launch], start[task_rows])
    t_device, t_stream = device[task_rows], stream[task_rows]
    lanes, lane_of = unique_pairs(t_device, t_stream)
    by_lane = [
        (mine := np.flatnonzero(lane_of == i))[np.argsort(issued[mine], kind="stable")]
        for i in range(lanes.shape[0])
    ]

    def last_before(lane: int, when: Int64Array) -> Int64Array:
        """Per time, the index into task_rows of the lane's last task issued by then (-1)."""
        mine = by_lane[lane]
        k = np.searchsorted(issued[mine], when, side="right") - 1
        return np.where(k >= 0, mine[np.maximum(k, 0)], -1)

    def first_after(lane: int, when: Int64Array) -> Int64Array:
        mine = by_lane[lane]
        k = np.searchsorted(issued[mine], when, side="left")
        return np.where(k < mine.size, mine[np.minimum(k, max(mine.size - 1, 0))], -1)

    lane_index = {(d, st): i for i, (d, st) in enumerate(lanes.tolist())}
    src: list[int] = []
    dst: list[int] = []
    marked: list[bool] = []
    runtime = np.flatnonzero(host & (correlation >= 0)) if marks.size else np.zeros(0, np.int64)
    row_by_corr = dict(zip(correlation[runtime].tolist(), runtime.tolist(), strict=False))
    explained: set[int] = set()
    # the args of the marks only (ascending rows, taken chunk by chunk: Arrow's take would
    # join the whole args column first), not a Python string per row of the events
    args = columns.take(events.column("args"), marks).to_pylist() if marks.size else []
    for m, text in zip(marks.tolist(), args, strict=True):  # the marks (a few per step)
        try:
            detail = json.loads(text or "{}")
        except ValueError:
            continue
        on = detail.get("wait_on_stream") if isinstance(detail, dict) else None
        waiting = lane_index.get((int(device[m]), int(stream[m])))
        recording = lane_index.get((int(device[m]), int(on))) if isinstance(on, int) else None
        if waiting is None or recording is None or waiting == recording:
            continue
        call = row_by_corr.get(int(correlation[m]))
        explained.add(int(correlation[m]))
        at = np.asarray([start[call] if call is not None else start[m]], dtype=np.int64)
        record = row_by_corr.get(detail.get("wait_on_cuda_event_record_corr_id", -1))
        recorded = np.asarray([start[record]], dtype=np.int64) if record is not None else at
        a, b = int(last_before(recording, recorded)[0]), int(first_after(waiting, at)[0])
        if a >= 0 and b >= 0:
            src.append(a)
            dst.append(b)
            marked.append(True)
    bare = calls[~np.isin(correlation[calls], np.asarray(sorted(explained), dtype=np.int64))]
    if bare.size and has_launch.any():
        launched = np.flatnonzero(has_launch)
        threads, thread_of = unique_pairs(pid[launch[launched]], stream[launch[launched]])
        for i, (p, t) in enumerate(threads.tolist()):  # a loop over launching threads
            mine = launched[thread_of == i]
            mine = mine[np.argsort(issued[mine], kind="stable")]
            here = bare[(pid[bare] == p) & (stream[bare] == t)]
            k = np.searchsorted(issued[mine], start[here], side="left")
            ok = k < mine.size
            here, nxt = here[ok], mine[k[ok]]
            best = np.full(here.size, -1, dtype=np.int64)
            best_issued = np.full(here.size, _NOT_YET, dtype=np.int64)
            for j in range(lanes.shape[0]):  # a loop over streams
                cand = last_before(j, start[here])
                ok = (cand >= 0) & (lane_of[nxt] != j) & (t_device[nxt] == lanes[j, 0])
                when = np.where(ok, issued[np.maximum(cand, 0)], _NOT_YET)
                better = when > best_issued
                best[better], best_issued[better] = cand[better], when[better]
            found = best >= 0
            src.extend(best[found].tolist())
            dst.extend(nxt[found].tolist())
            marked.extend([False] * int(found.sum()))
    if not src:
        return empty, empty, 0
    a, b = task_rows[np.asarray(src)], task_rows[np.asarray(dst)]
    possible = end[a] <= start[b]
    # an inferred wait the times contradict was not one (the stream was a guess)
    contradicted = int((~possible & np.asarray(marked)).sum())
    pairs = columns.unique_rows([a[possible], b[possible]])[0]
    return pairs[:, 0].copy(), pairs[:, 1].copy(), contradicted


def is_kind(kinds: list[str | None], code: Int64Array, *wanted: str) -> _BoolArray:
    """Whether each task's kind (``code`` into ``kinds``) is one of ``wanted``."""
    return np.asarray([k in wanted for k in kinds] or [False], dtype=bool)[code]


def host_ops(events: pa.Table, task_rows: Int64Array) -> Int64Array:
    """The row of the host operator each task's external id names (the first such operator
    row; -1 when none does)."""
    result = np.full(task_rows.size, -1, dtype=np.int64)
    external = columns.int64(events, "external_id")
    ops = np.flatnonzero(columns.isin(events, "kind", [schema.CPU_OP]) & (external >= 0))
    if ops.size == 0 or task_rows.size == 0:
        return result
    keys, first = np.unique(external[ops], return_index=True)
    wanted = external[task_rows]
    pos = np.clip(np.searchsorted(keys, wanted), 0, keys.size - 1)
    found = (keys[pos] == wanted) & (wanted >= 0)
    result[found] = ops[first[pos[found]]]
    return result
