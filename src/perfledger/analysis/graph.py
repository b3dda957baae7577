"""The step graph of one rank: what had to happen before each piece of work could start.

Nodes (docs/whatif.md, "The graph"):

- on each host thread that issued device work, its launch and sync calls in order; between two
  of them *host work*, a fixed delay on the thread's chain, part of it in the data loader. A
  sync call is two nodes: the call (a blocking copy's issue) and the wait's end, after the tasks
  it waited for;
- on each device stream, its tasks in the order they ran; a task starts after its predecessor
  on the stream and after its launch call began plus the launch latency;
- a host-only run (no device task): the outermost operators and data-loader slices of each
  thread.

Every start of the trace is explained by one binding edge with its observed delay, so the
graph replays the trace as measured; the edges that did not bind carry typical delays (median
launch latency, median gap between queued tasks), binding only once a change moves the binding
edge away. Pure functions over the canonical events table; vectorised with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns, opclass
from perfledger.analysis.graph_plain import PlainColumns
from perfledger.analysis.graph_waits import (
    codes_at,
    event_edges,
    host_ops,
    is_kind,
    strings_at,
    thread_work,
    unique_pairs,
    wake_ups,
)
from perfledger.analysis.intervals import Int64Array, union
from perfledger.model import schema, vendors

# Node kinds.
HOST_OP: Final = 0  # an outermost host slice of a host-only run
LAUNCH: Final = 1  # a host call that issued a device task
SYNC_CALL: Final = 2  # a synchronisation call where the host reaches it
SYNC_WAIT: Final = 3  # the end of its wait, after the tasks it waited for
TASK: Final = 4  # a device task

# What a node's time, or the delay of the edge that started it, is spent on (``bound_by``).
HOST: Final = "host"
DATALOADER: Final = "dataloader"
LAUNCH_OVERHEAD: Final = "launch"
SYNC: Final = "sync"
COMMUNICATION: Final = "communication"
COPIES: Final = "copies"
OTHER: Final = "other"
COMPUTE_CLASSES: Final = tuple(
    c
    for c in opclass.OP_CLASSES
    if c not in (opclass.COMMUNICATION, opclass.MEMCPY, opclass.MEMSET)
)
# COMMUNICATION's wait for peers and its transfer are parts of it, not classes of their own:
# ``bound_by_parts`` beside ``bound_by`` (perfledger.model.whatif.communication_parts).
CLASSES: Final = (
    HOST,
    DATALOADER,
    LAUNCH_OVERHEAD,
    SYNC,
    COMMUNICATION,
    COPIES,
    OTHER,
    *(f"compute:{c}" for c in COMPUTE_CLASSES),
)
CLASS_CODE: Final = {name: code for code, name in enumerate(CLASSES)}

# A task that starts within this of its stream predecessor's end was queued behind it.
QUEUED_GAP_NS: Final = 2_000
# A synchronisation call waited for a task that ended at most this after the call returned
# (clock jitter between the host and the device).
SYNC_END_TOLERANCE_NS: Final = 1_000
# No earliest start: the node starts when its predecessors let it.
FREE: Final = np.iinfo(np.int64).min // 4

_BoolArray = npt.NDArray[np.bool_]
# Class codes (into CLASSES, a few dozen): one byte a node.
_ClassArray = npt.NDArray[np.int8]


@dataclass(frozen=True)
class StepGraph:
    """The dependency graph of one rank's events, nodes in a topological order.

    Attributes:
        kind: node kind (:data:`HOST_OP` ... :data:`TASK`).
        row: the events row of each node.
        start, dur: the observed start and duration.
        chain_pred, chain_delay: the node before it on its thread or stream (-1 none) and the
            delay from that node's end (host work on a thread, the gap on a stream).
        chain_busy: of a host node's chain delay, the time its thread worked (what a faster
            host shortens); the rest is the thread waiting for another one.
        chain_loader: of that work, the time in the data loader (what prefetching removes).
        chain_class: what the chain delay is spent on (code into :data:`CLASSES`).
        lane_pred, lane_delay: as chain_pred/delay, but communication tasks and the other
            tasks of a stream in two lanes of their own (``--overlap-comm``).
        launch_src, launch_delay: the launch call of a task (-1 none) and the latency from
            the call's start to the task's start.
        wake_src, wake_delay: for a host node whose thread waited before it (1 ms or more with
            nothing running), the node of another thread that began last before it, during the
            wait (-1 none), and the time from that node's start to this one's: the wait ends
            when the other thread gets there (an autograd thread woken by ``backward()``).
        release: the earliest possible start (:data:`FREE` when none): the first node of a
            thread, a task without a launch that did not queue.
        wait_src, wait_dst: synchronisation edges, task -> :data:`SYNC_WAIT` node.
        event_src, event_dst, event_delay: cross-stream event edges, task -> task: the task a
            stream waited for (the last one before the event's record) and the first task
            after the wait on the waiting stream, which starts no earlier than the first one's
            end plus the delay.
        node_class: what the node's own time is spent on (code into :data:`CLASSES`).
        is_kernel, is_comm, is_copy: device task masks (compute kernels, communication,
            copies and sets).
        name, host_name: the node's name and, for a task, the host operator that launched it.
        thread: the host chain of a host node (-1 for tasks); ``thread_keys[thread]`` is its
            (pid, thread id).
        dropped_edges: dependencies left out because the trace's times contradict them.
    """

    kind: npt.NDArray[np.int8]
    row: Int64Array
    start: Int64Array
    dur: Int64Array
    chain_pred: Int64Array
    chain_delay: Int64Array
    chain_busy: Int64Array
    chain_loader: Int64Array
    chain_class: _ClassArray
    lane_pred: Int64Array
    lane_delay: Int64Array
    launch_src: Int64Array
    launch_delay: Int64Array
    wake_src: Int64Array
    wake_delay: Int64Array
    release: Int64Array
    wait_src: Int64Array
    wait_dst: Int64Array
    node_class: _ClassArray
    is_kernel: _BoolArray
    is_comm: _BoolArray
    is_copy: _BoolArray
    name: npt.NDArray[np.object_]
    host_name: npt.NDArray[np.object_]
    thread: Int64Array
    thread_keys: tuple[tuple[int, int], ...]
    event_src: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    event_dst: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    event_delay: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    dropped_edges: int = 0

    @property
    def size(self) -> int:
        return int(self.kind.size)

    @property
    def end(self) -> Int64Array:
        return self.start + self.dur

    @cached_property
    def plain(self) -> PlainColumns:
        """The columns the replay's loop reads, as plain lists (made once, shared)."""
        return PlainColumns.of(self)


@dataclass
class _Nodes:
    """Nodes under construction (unordered), as parallel lists of arrays."""

    parts: dict[str, list[np.ndarray]]

    def add(self, **arrays: np.ndarray) -> int:
        """Append a block of nodes; return the index of its first node."""
        first = sum(a.size for a in self.parts.get("kind", []))
        for key, value in arrays.items():
            self.parts.setdefault(key, []).append(value)
        return first

    def column(self, key: str) -> np.ndarray:
        return np.concatenate(self.parts[key])


def build_graph(events: pa.Table) -> StepGraph:
    """The step graph of one rank's canonical events (any order)."""
    # the unordered graph's temporaries (a column of each kind per row of the events) are
    # freed before the graph is sorted
    return _topological(_unordered_graph(events))


def _unordered_graph(events: pa.Table) -> StepGraph:
    """The step graph's nodes, host nodes first, not yet in a topological order."""
    n = events.num_rows
    device = columns.int64(events, "device")
    start = columns.int64(events, "start_ns")
    # a row's duration is end - start (no column of its own kept)
    end = start + np.maximum(columns.int64(events, "dur_ns"), 0)
    correlation = columns.int64(events, "correlation")
    host = device < 0

    # masks of the kind column read on its dictionary: a test per distinct kind, not per row
    task_rows = np.flatnonzero(columns.isin(events, "kind", schema.DEVICE_TASK_KINDS))
    launch_of_task = _launch_rows(events, host, correlation, start, task_rows)
    if task_rows.size:
        is_sync = host & columns.isin(events, "kind", [schema.SYNC])
        chosen = is_sync.copy()  # the launches' and synchronisations' rows: a mask, no sort
        chosen[launch_of_task[launch_of_task >= 0]] = True
        host_rows = np.flatnonzero(chosen)
    else:
        is_sync = np.zeros(n, dtype=bool)
        host_rows = _outermost_slices(events, host, start, end)
    thread_keys_arr, thread_of = unique_pairs(
        columns.int64(events, "pid")[host_rows], columns.int64(events, "stream")[host_rows]
    )
    order = np.lexsort((host_rows, start[host_rows], thread_of))
    host_rows, thread_of = host_rows[order], thread_of[order]

    waits_task_row, waits_sync_row = _sync_waits(
        events,
        device,
        start,
        end,
        correlation,
        task_rows,
        launch_of_task,
        host_rows,
        is_sync,
    )
    sync_here = is_sync[host_rows]
    del is_sync
    sync_rows = host_rows[sync_here]
    sync_of = _RowIndex(sync_rows)
    # the wait of a synchronisation call ends `ret` after the last task it waited for
    waited_end = np.full(sync_rows.size, FREE, dtype=np.int64)
    np.maximum.at(waited_end, sync_of(waits_sync_row), end[waits_task_row])
    ret = end[sync_rows] - np.clip(waited_end, start[sync_rows], end[sync_rows])

    nodes = _Nodes({})
    # host nodes: a synchronisation row becomes its call and its wait, in that order
    copies = np.where(sync_here, 2, 1)
    host_row_of = np.repeat(host_rows, copies)
    thread_node = np.repeat(thread_of, copies)
    second = np.zeros(host_row_of.size, dtype=bool)
    second[np.cumsum(copies) - 1] = sync_here  # the wait part of each synchronisation row
    first_of_sync = np.zeros(host_row_of.size, dtype=bool)
    first_of_sync[(np.cumsum(copies) - copies)[sync_here]] = True
    sync_of_node = sync_of(host_row_of)
    ret_of_node = np.zeros(host_row_of.size, dtype=np.int64)
    ret_of_node[sync_of_node >= 0] = ret[sync_of_node[sync_of_node >= 0]]
    h_kind = np.where(
        second,
        SYNC_WAIT,
        np.where(first_of_sync, SYNC_CALL, HOST_OP if not task_rows.size else LAUNCH),
    ).astype(np.int8)
    h_start = np.where(second, end[host_row_of] - ret_of_node, start[host_row_of])
    h_dur = np.where(
        second, ret_of_node, np.where(first_of_sync, 0, end[host_row_of] - start[host_row_of])
    )
    h_pred, h_delay, h_release = _chain(thread_node, h_start, h_dur, pin_first=True)
    # the wait of a synchronisation call starts when its tasks end, not after host work
    h_delay[second] = 0
    loader = host & columns.isin(events, "kind", [schema.DATALOADER])
    dataloader = union(start[loader], end[loader])
    loader_node = loader[host_row_of]  # host nodes are host rows: of the data loader's kind
    del loader
    gap_start = np.where(h_pred >= 0, h_start - h_delay, h_start)
    h_busy = thread_work(events, host, start, end, thread_keys_arr, thread_node, gap_start, h_start)
    h_wake, h_wake_delay = wake_ups(
        thread_node, h_kind == SYNC_WAIT, h_pred, h_start, gap_start, h_delay, h_busy
    )
    # a woken node's wait is its wake-up's, not a delay of its own thread
    h_delay = np.where(h_wake >= 0, h_busy, h_delay)
    loader_share = dataloader.covered(gap_start, h_start)
    gap_class = np.where(
        2 * loader_share >= np.maximum(h_busy, 1), CLASS_CODE[DATALOADER], CLASS_CODE[HOST]
    )
    h_class = np.select(
        [h_kind == LAUNCH, (h_kind == SYNC_CALL) | (h_kind == SYNC_WAIT)],
        [CLASS_CODE[LAUNCH_OVERHEAD], CLASS_CODE[SYNC]],
        np.where(loader_node, CLASS_CODE[DATALOADER], CLASS_CODE[HOST]),
    )
    n_host = host_row_of.size
    nodes.add(
        kind=h_kind,
        row=host_row_of,
        start=h_start,
        dur=h_dur,
        chain_pred=h_pred,
        chain_delay=h_delay,
        chain_busy=h_busy,
        chain_loader=np.minimum(loader_share, h_busy),
        chain_class=gap_class,
        lane_pred=h_pred,
        lane_delay=h_delay,
        release=h_release,
        thread=thread_node,
    )
    host_node_of = _RowIndex(host_row_of[~second], np.flatnonzero(~second))
    wait_node_of = _RowIndex(host_row_of[second], np.flatnonzero(second))

    ev_src_row, ev_dst_row, ev_contradicted = event_edges(
        events, host, device, start, end, correlation, task_rows, launch_of_task
    )
    task_index_of = _RowIndex(task_rows)
    task_block = _task_nodes(
        events,
        device,
        start,
        end,
        task_rows,
        launch_of_task,
        host_node_of,
        task_index_of(ev_src_row),
        task_index_of(ev_dst_row),
    )
    nodes.add(
        kind=np.full(task_rows.size, TASK, dtype=np.int8),
        row=task_rows,
        start=start[task_rows],
        dur=end[task_rows] - start[task_rows],
        chain_pred=np.where(task_block["chain_pred"] >= 0, task_block["chain_pred"] + n_host, -1),
        chain_delay=task_block["chain_delay"],
        chain_busy=np.zeros(task_rows.size, dtype=np.int64),
        chain_loader=np.zeros(task_rows.size, dtype=np.int64),
        chain_class=np.full(task_rows.size, CLASS_CODE[LAUNCH_OVERHEAD]),
        lane_pred=np.where(task_block["lane_pred"] >= 0, task_block["lane_pred"] + n_host, -1),
        lane_delay=task_block["lane_delay"],
        release=task_block["release"],
        thread=np.full(task_rows.size, -1, dtype=np.int64),
    )
    del device, start, end, correlation, host
    size = n_host + task_rows.size
    kind = nodes.column("kind") if size else np.zeros(0, dtype=np.int8)
    row = nodes.column("row") if size else np.zeros(0, dtype=np.int64)

    def col(key: str) -> Int64Array:
        return np.asarray(nodes.column(key), dtype=np.int64) if size else np.zeros(0, np.int64)

    wake_src = np.full(size, -1, dtype=np.int64)
    wake_src[:n_host] = h_wake
    wake_delay = np.zeros(size, dtype=np.int64)
    wake_delay[:n_host] = h_wake_delay
    launch_src = np.full(size, -1, dtype=np.int64)
    launch_src[n_host:] = task_block["launch_src"]
    launch_delay = np.zeros(size, dtype=np.int64)
    launch_delay[n_host:] = task_block["launch_delay"]
    node_class = np.zeros(size, dtype=np.int8)
    node_class[:n_host] = h_class
    node_class[n_host:] = task_block["node_class"]
    task_of_wait = task_index_of(waits_task_row)
    wait_src = np.where(task_of_wait >= 0, n_host + task_of_wait, -1)
    wait_dst = wait_node_of(waits_sync_row)
    keep = (wait_src >= 0) & (wait_dst >= 0)
    wait_src, wait_dst = wait_src[keep], wait_dst[keep]
    flags = {key: np.zeros(size, dtype=bool) for key in ("is_kernel", "is_comm", "is_copy")}
    for key in flags:
        flags[key][n_host:] = task_block[key]
    name = strings_at(events, "name", row) if size else np.zeros(0, dtype=object)
    host_name = np.full(size, None, dtype=object)
    host_name[n_host:] = task_block["host_name"]

    return StepGraph(
        kind=kind.astype(np.int8),
        row=row,
        start=col("start"),
        dur=col("dur"),
        chain_pred=col("chain_pred"),
        chain_delay=col("chain_delay"),
        chain_busy=col("chain_busy"),
        chain_loader=col("chain_loader"),
        chain_class=np.asarray(nodes.column("chain_class"), np.int8)
        if size
        else np.zeros(0, np.int8),
        lane_pred=col("lane_pred"),
        lane_delay=col("lane_delay"),
        launch_src=launch_src,
        launch_delay=launch_delay,
        wake_src=wake_src,
        wake_delay=wake_delay,
        release=col("release"),
        wait_src=wait_src,
        wait_dst=wait_dst,
        node_class=node_class,
        is_kernel=flags["is_kernel"],
        is_comm=flags["is_comm"],
        is_copy=flags["is_copy"],
        name=name,
        host_name=host_name,
        thread=col("thread"),
        thread_keys=tuple((int(p), int(t)) for p, t in thread_keys_arr.tolist()),
        event_src=task_block["event_src"] + n_host,
        event_dst=task_block["event_dst"] + n_host,
        event_delay=task_block["event_delay"],
        dropped_edges=ev_contradicted,
    )


class _RowIndex:
    """Rows of the events (each once) -> a value each (their position by default), -1 else."""

    def __init__(self, rows: Int64Array, values: Int64Array | None = None) -> None:
        order = np.argsort(rows, kind="stable")
        self.rows = rows[order]
        self.values = order if values is None else values[order]

    def __call__(self, rows: Int64Array) -> Int64Array:
        if self.rows.size == 0:
            return np.full(rows.size, -1, dtype=np.int64)
        at = np.clip(np.searchsorted(self.rows, rows), 0, self.rows.size - 1)
        return np.where(self.rows[at] == rows, self.values[at], -1).astype(np.int64)


def _launch_rows(
    events: pa.Table,
    host: _BoolArray,
    correlation: Int64Array,
    start: Int64Array,
    task_rows: Int64Array,
) -> Int64Array:
    """For each task row, the row of the host call that launched it (-1 when none is known).

    As :func:`perfledger.analysis.steps.launch_starts`: the earliest call carrying the task's
    correlation id, none when calls of one name share it.
    """
    result = np.full(task_rows.size, -1, dtype=np.int64)
    launches = np.flatnonzero(
        columns.isin(events, "kind", schema.LAUNCH_KINDS) & host & (correlation >= 0)
    )
    if launches.size == 0 or task_rows.size == 0:
        return result
    keys = correlation[launches]
    name_codes = columns.dictionary_codes(events, "name")[0][launches]
    by_name = columns.pair_order(keys, name_codes)  # ids almost in order: one stable sort
    k_sorted, n_sorted = keys[by_name], name_codes.reshape(-1)[by_name]
    ambiguous = np.unique(
        k_sorted[1:][(k_sorted[1:] == k_sorted[:-1]) & (n_sorted[1:] == n_sorted[:-1])]
    )
    order = np.lexsort((start[launches], keys))
    k_sorted = keys[order]
    first = np.ones(k_sorted.size, dtype=bool)
    first[1:] = k_sorted[1:] != k_sorted[:-1]
    first &= ~np.isin(k_sorted, ambiguous)
    unique_keys, unique_rows = k_sorted[first], launches[order][first]
    if unique_keys.size == 0:
        return result
    task_keys = correlation[task_rows]
    pos = np.clip(np.searchsorted(unique_keys, task_keys), 0, unique_keys.size - 1)
    found = (unique_keys[pos] == task_keys) & (task_keys >= 0)
    result[found] = unique_rows[pos[found]]
    return result


def _outermost_slices(
    events: pa.Table,
    host: _BoolArray,
    start: Int64Array,
    end: Int64Array,
) -> Int64Array:
    """The operator and data-loader slices of each host thread that no other one encloses."""
    rows = np.flatnonzero(host & columns.isin(events, "kind", [schema.CPU_OP, schema.DATALOADER]))
    if rows.size == 0:
        return rows
    pid = columns.int64(events, "pid")[rows]
    thread = columns.int64(events, "stream")[rows]
    order = np.lexsort((-(end[rows] - start[rows]), start[rows], thread, pid))
    rows, pid, thread = rows[order], pid[order], thread[order]
    same = np.zeros(rows.size, dtype=bool)
    same[1:] = (pid[1:] == pid[:-1]) & (thread[1:] == thread[:-1])
    reach = _running_max(end[rows], same)
    outer = np.ones(rows.size, dtype=bool)
    outer[1:] = ~same[1:] | (start[rows][1:] >= reach[:-1])
    return np.sort(rows[outer])


def _running_max(values: Int64Array, same_as_previous: _BoolArray) -> Int64Array:
    """The running maximum of ``values``, restarted where a row starts a new group."""
    if values.size == 0:
        return values
    group = np.cumsum(~same_as_previous)
    low = int(values.min())
    span = int(values.max()) - low + 1
    shifted = (values - low) + group * span
    return np.asarray(np.maximum.accumulate(shifted) - group * span + low, dtype=np.int64)


def _chain(
    chain: Int64Array, start: Int64Array, dur: Int64Array, *, pin_first: bool
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """For nodes sorted by (chain, start): each one's predecessor, the delay from its end, and
    the release (the observed start for the first node of a chain when ``pin_first``)."""
    size = chain.size
    pred = np.full(size, -1, dtype=np.int64)
    delay = np.zeros(size, dtype=np.int64)
    release = np.full(size, FREE, dtype=np.int64)
    if size == 0:
        return pred, delay, release
    same = np.zeros(size, dtype=bool)
    same[1:] = chain[1:] == chain[:-1]
    index = np.arange(size)
    pred[same] = index[same] - 1
    delay[same] = start[same] - (start + dur)[index[same] - 1]
    if pin_first:
        release[~same] = start[~same]
    return pred, delay, release


def _sync_waits(
    events: pa.Table,
    device: Int64Array,
    start: Int64Array,
    end: Int64Array,
    correlation: Int64Array,
    task_rows: Int64Array,
    launch_of_task: Int64Array,
    host_rows: Int64Array,
    is_sync: _BoolArray,
) -> tuple[Int64Array, Int64Array]:
    """(task row, sync row) of every wait: on each stream the call synchronised, the last
    task issued by the time the call began that ended before the call returned.

    The stream comes from the device-side mark of the call (Kineto's "Stream Sync", same
    correlation id); a device-wide mark ("Context Sync") or none means every stream of its
    device, or of the rank when the device is unknown. A blocking copy waits for its own copy.
    """
    syncs = host_rows[is_sync[host_rows]]
    empty = np.zeros(0, dtype=np.int64)
    if syncs.size == 0 or task_rows.size == 0:
        return empty, empty
    stream = columns.int64(events, "stream")
    marks = np.flatnonzero(
        columns.isin(events, "kind", [schema.DEVICE_ANNOTATION]) & (correlation >= 0)
    )
    mark_names = strings_at(events, "name", marks)
    mark_by_corr = dict(zip(correlation[marks].tolist(), range(marks.size), strict=False))
    scope_device = np.full(syncs.size, -1, dtype=np.int64)
    scope_stream = np.full(syncs.size, -1, dtype=np.int64)
    for i, corr in enumerate(correlation[syncs].tolist()):  # a loop over sync calls
        at = mark_by_corr.get(corr) if corr >= 0 else None
        if at is None:
            continue
        mark = marks[at]
        scope_device[i] = device[mark]
        if "stream" in str(mark_names[at]).lower():
            scope_stream[i] = stream[mark]
    issued = np.where(launch_of_task >= 0, start[np.maximum(launch_of_task, 0)], start[task_rows])
    t_device, t_stream = device[task_rows], stream[task_rows]
    lanes = unique_pairs(t_device, t_stream)[0]
    src: list[Int64Array] = []
    dst: list[Int64Array] = []
    s_start, s_end = start[syncs], end[syncs]
    for d, st in lanes.tolist():  # a loop over streams
        mine = np.flatnonzero((t_device == d) & (t_stream == st))
        mine = mine[np.lexsort((issued[mine], start[task_rows[mine]]))]
        lane_issued = np.maximum.accumulate(issued[mine])
        lane_end = np.maximum.accumulate(end[task_rows[mine]])
        in_scope = ((scope_device < 0) | (scope_device == d)) & (
            (scope_stream < 0) | (scope_stream == st)
        )
        k_issued = np.searchsorted(lane_issued, s_start, side="right")
        k_ended = np.searchsorted(lane_end, s_end + SYNC_END_TOLERANCE_NS, side="right")
        k = np.minimum(k_issued, k_ended) - 1
        ok = in_scope & (k >= 0)
        src.append(task_rows[mine[k[ok]]])
        dst.append(syncs[ok])
    return np.concatenate(src), np.concatenate(dst)


def _task_nodes(
    events: pa.Table,
    device: Int64Array,
    start: Int64Array,
    end: Int64Array,
    task_rows: Int64Array,
    launch_of_task: Int64Array,
    host_node_of: _RowIndex,
    event_src: Int64Array,
    event_dst: Int64Array,
) -> dict[str, np.ndarray]:
    """The task nodes (in ``task_rows`` order): stream chains, launch edges, event edges
    (``event_src`` -> ``event_dst``, indices into ``task_rows``), classes."""
    size = task_rows.size
    stream = columns.int64(events, "stream")[task_rows]
    t_start = start[task_rows]
    t_dur = end[task_rows] - t_start
    # the tasks' kinds and names, and the names of the host operators that launched them, as
    # codes into their distinct values: each test made once per distinct value
    kind_code, kinds = codes_at(events, "kind", task_rows)
    host_op = host_ops(events, task_rows)
    launched = np.flatnonzero(host_op >= 0)
    name_code, names = codes_at(events, "name", np.concatenate([task_rows, host_op[launched]]))
    host_code = np.full(size, len(names), dtype=np.int64)  # len(names): no host operator
    host_code[launched] = name_code[size:]
    name_code = name_code[:size]
    # a collective's kernel by its name: the pattern tried once per distinct name
    comm_named = np.array(
        [n is not None and vendors.COMM_KERNEL.search(n) is not None for n in names] or [False]
    )[name_code]
    is_comm = is_kind(kinds, kind_code, schema.COMM) | comm_named
    is_copy = is_kind(kinds, kind_code, schema.MEMCPY, schema.MEMSET)
    is_kernel = is_kind(kinds, kind_code, schema.KERNEL) & ~is_comm
    lane_key = unique_pairs(device[task_rows], stream)[1]
    order = np.lexsort((task_rows, t_start, lane_key))
    pred_sorted, _, _ = _chain(lane_key[order], t_start[order], t_dur[order], pin_first=False)
    chain_pred = np.full(size, -1, dtype=np.int64)
    chain_pred[order] = np.where(pred_sorted >= 0, order[np.maximum(pred_sorted, 0)], -1)
    has_pred = chain_pred >= 0
    pred_end = np.where(has_pred, (t_start + t_dur)[np.maximum(chain_pred, 0)], FREE)
    stream_gap = np.where(has_pred, t_start - pred_end, 0)
    has_launch = launch_of_task >= 0
    launch_latency = np.where(has_launch, t_start - start[np.maximum(launch_of_task, 0)], 0)
    queued = has_pred & (stream_gap <= QUEUED_GAP_NS)
    t_end = t_start + t_dur
    waits_event = np.zeros(size, dtype=bool)
    waits_event[event_dst] = True
    bound = has_launch & ~queued
    plain = bound & ~waits_event
    typical_latency = (
        int(np.median(launch_latency[plain]))
        if plain.any()
        else int(np.median(launch_latency[bound]))
        if bound.any()
        else (int(np.median(launch_latency[has_launch])) if has_launch.any() else 0)
    )
    # a task that did not queue and whose awaited event came after its launch would have let
    # it start: the event's edge binds it (the latest awaited task when it waited for several)
    awaited_end = np.full(size, FREE, dtype=np.int64)
    np.maximum.at(awaited_end, event_dst, t_end[event_src])
    launch_ready = np.where(has_launch, t_start - launch_latency + typical_latency, FREE)
    event_bound = waits_event & ~queued & (awaited_end >= launch_ready)
    event_gap = t_start[event_dst] - t_end[event_src]
    binding_edge = event_bound[event_dst] & (t_end[event_src] == awaited_end[event_dst])
    typical_event_gap = int(np.median(event_gap[binding_edge])) if binding_edge.any() else 0
    event_delay = np.where(binding_edge, event_gap, np.minimum(event_gap, typical_event_gap))
    typical_gap = int(np.median(np.maximum(stream_gap[queued], 0))) if queued.any() else 0
    slack = queued | event_bound
    launch_delay = np.where(slack, np.minimum(launch_latency, typical_latency), launch_latency)
    chain_delay = np.where(queued, stream_gap, np.minimum(stream_gap, typical_gap))
    release = np.where(~has_launch & ~slack, t_start, FREE)

    # lanes for --overlap-comm: communication beside the rest of its stream
    split_key = lane_key * 2 + is_comm
    order2 = np.lexsort((task_rows, t_start, split_key))
    pred2_sorted, _, _ = _chain(split_key[order2], t_start[order2], t_dur[order2], pin_first=False)
    lane_pred = np.full(size, -1, dtype=np.int64)
    lane_pred[order2] = np.where(pred2_sorted >= 0, order2[np.maximum(pred2_sorted, 0)], -1)
    lane_delay = np.where(lane_pred == chain_pred, chain_delay, np.maximum(chain_delay, 0))

    named = np.asarray([*names, None], dtype=object)  # the last: no host operator
    host_name = named[host_code]
    codes = np.full(size, CLASS_CODE[OTHER], dtype=np.int64)
    codes[is_copy] = CLASS_CODE[COPIES]
    codes[is_comm] = CLASS_CODE[COMMUNICATION]
    rest = np.flatnonzero(~is_copy & ~is_comm)
    if rest.size:
        # a class per distinct (name, kind, host operator), the triple as one integer
        triple = (name_code[rest] * (len(kinds) + 1) + kind_code[rest]) * (len(names) + 1)
        distinct, inverse = np.unique(triple + host_code[rest], return_inverse=True)
        pair, host_of = np.divmod(distinct, len(names) + 1)
        name_of, kind_of = np.divmod(pair, len(kinds) + 1)
        classes = [
            _class_code(opclass.op_class(str(named[n]), str(kinds[k]), _text(named[h])))
            for n, k, h in zip(name_of.tolist(), kind_of.tolist(), host_of.tolist(), strict=True)
        ]
        codes[rest] = np.asarray(classes, dtype=np.int64)[inverse.reshape(-1)]
    launch_src = np.where(has_launch, host_node_of(np.maximum(launch_of_task, 0)), -1)
    return {
        "chain_pred": chain_pred,
        "chain_delay": chain_delay,
        "lane_pred": lane_pred,
        "lane_delay": lane_delay,
        "release": release,
        "launch_src": launch_src,
        "launch_delay": np.where(launch_src >= 0, launch_delay, 0),
        "node_class": codes,
        "is_kernel": is_kernel,
        "is_comm": is_comm,
        "is_copy": is_copy,
        "host_name": host_name,
        "event_src": event_src,
        "event_dst": event_dst,
        "event_delay": np.asarray(event_delay, dtype=np.int64),
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _class_code(op_class: str) -> int:
    """The graph's class code of an operator class (:func:`opclass.op_class`)."""
    if op_class == opclass.COMMUNICATION:
        return CLASS_CODE[COMMUNICATION]
    if op_class in (opclass.MEMCPY, opclass.MEMSET):
        return CLASS_CODE[COPIES]
    return CLASS_CODE[f"compute:{op_class}"]


def _topological(graph: StepGraph) -> StepGraph:
    """The graph with its nodes sorted so that every edge points forward; the few
    dependencies the trace's times contradict (a cycle through clock skew) are dropped."""
    size = graph.size
    if size == 0:
        return graph
    key = graph.start.copy()
    roots, depth = _chain_positions(graph)
    chain_order = np.lexsort((depth, roots))
    chain_ids = roots[chain_order]
    same = np.zeros(size, dtype=bool)
    same[1:] = chain_ids[1:] == chain_ids[:-1]
    position = np.arange(size)
    has_launch = graph.launch_src >= 0
    has_wake = graph.wake_src >= 0
    for _ in range(4):
        before = key.copy()
        key[has_launch] = np.maximum(key[has_launch], key[graph.launch_src[has_launch]] + 1)
        key[has_wake] = np.maximum(key[has_wake], key[graph.wake_src[has_wake]] + 1)
        np.maximum.at(key, graph.wait_dst, key[graph.wait_src] + 1)
        np.maximum.at(key, graph.event_dst, key[graph.event_src] + 1)
        # strictly increasing along each chain
        ordered = key[chain_order] - position
        key[chain_order] = _running_max(ordered, same) + position
        if np.array_equal(before, key):
            break
    order = np.lexsort((graph.kind, key))
    rank = np.empty(size, dtype=np.int64)
    rank[order] = np.arange(size)
    del key, before, roots, depth, chain_order, chain_ids, same, position, has_launch, has_wake

    def moved(pointers: Int64Array) -> Int64Array:
        return np.where(pointers >= 0, rank[np.maximum(pointers, 0)], -1)[order]

    # the unordered columns, each dropped once its sorted one is made: at most one column of
    # the graph held twice rather than the whole graph
    old = dict(vars(graph))
    del graph
    sorted_columns: dict[str, Any] = {}
    here = np.arange(size)
    dropped = 0
    for key in ("chain_pred", "lane_pred", "launch_src", "wake_src"):
        pointers = moved(old.pop(key))
        backward = pointers >= here
        dropped += int(backward.sum())
        pointers[backward] = -1
        sorted_columns[key] = pointers
    wait_src, wait_dst = rank[old.pop("wait_src")], rank[old.pop("wait_dst")]
    forward = wait_src < wait_dst
    dropped += int((~forward).sum())
    event_src, event_dst = rank[old.pop("event_src")], rank[old.pop("event_dst")]
    event_forward = event_src < event_dst
    dropped += int((~event_forward).sum())
    for key in _NODE_COLUMNS:
        if key not in sorted_columns:
            sorted_columns[key] = old.pop(key)[order]
    # communication in lanes of its own (--overlap-comm) changes nothing where no stream
    # runs both: the lanes are then the chains themselves, one array kept for both
    for lane, chain in (("lane_pred", "chain_pred"), ("lane_delay", "chain_delay")):
        if np.array_equal(sorted_columns[lane], sorted_columns[chain]):
            sorted_columns[lane] = sorted_columns[chain]
    return StepGraph(
        **sorted_columns,
        wait_src=wait_src[forward],
        wait_dst=wait_dst[forward],
        thread_keys=old["thread_keys"],
        event_src=event_src[event_forward],
        event_dst=event_dst[event_forward],
        event_delay=old["event_delay"][event_forward],
        dropped_edges=old["dropped_edges"] + dropped,
    )


# The graph's columns of one item per node (the others are edges, threads and a count).
_NODE_COLUMNS: Final = tuple(
    f.name
    for f in fields(StepGraph)
    if not f.name.startswith(("wait_", "event_")) and f.name not in ("thread_keys", "dropped_edges")
)


def _chain_positions(graph: StepGraph) -> tuple[Int64Array, Int64Array]:
    """Each node's chain (the id of its first node) and its place along the chain, by
    pointer jumping: log2(chain length) vectorised passes."""
    index = np.arange(graph.size)
    has_pred = graph.chain_pred >= 0
    parent = np.where(has_pred, graph.chain_pred, index)
    depth = has_pred.astype(np.int64)
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return parent, depth
        depth = depth + depth[parent]
        parent = grand
