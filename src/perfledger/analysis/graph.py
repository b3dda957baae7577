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

from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.beside import beside
from perfledger.analysis.graph_codes import (
    CLASS_CODE,
    DATALOADER,
    FREE,
    HOST,
    HOST_OP,
    LAUNCH,
    LAUNCH_OVERHEAD,
    SYNC,
    SYNC_CALL,
    SYNC_END_TOLERANCE_NS,
    SYNC_WAIT,
    TASK,
)
from perfledger.analysis.graph_plain import PlainColumns
from perfledger.analysis.graph_tasks import RowIndex, running_max, task_part
from perfledger.analysis.graph_tasks import chain as thread_chain
from perfledger.analysis.graph_waits import (
    coded_at,
    strings_at,
    thread_work,
    unique_pairs,
    wake_ups,
)
from perfledger.analysis.intervals import Int64Array, union
from perfledger.model import schema

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
        name_code, names: the node's name (``names[name_code]``: codes, equal where the names
            are, not an object a node).
        host_name: for a task, the host operator that launched it.
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
    name_code: npt.NDArray[np.int32]
    host_name: npt.NDArray[np.object_]
    thread: Int64Array
    thread_keys: tuple[tuple[int, int], ...]
    event_src: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    event_dst: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    event_delay: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    dropped_edges: int = 0
    names: tuple[str | None, ...] = ()

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
    # the task nodes (which read no host node) built on a thread beside the host nodes; the
    # row columns handed over, to be let go before the nodes' columns are joined
    rows: dict[str, Any] = {
        "host": host,
        "device": device,
        "start": start,
        "end": end,
        "corr": correlation,
    }
    del host, device, start, end, correlation
    made = beside(
        task_part,
        events,
        rows["host"],
        rows["device"],
        rows["start"],
        rows["end"],
        rows["corr"],
        task_rows,
        launch_of_task,
    )
    with made as tasks:
        return _with_hosts(events, n, rows, task_rows, launch_of_task, tasks)


def _with_hosts(
    events: pa.Table,
    n: int,
    rows: dict[str, Any],
    task_rows: Int64Array,
    launch_of_task: Int64Array,
    tasks: Future[tuple[dict[str, np.ndarray], int, RowIndex]],
) -> StepGraph:
    """The host nodes, then the graph of them and the task nodes (``tasks``); ``rows``:
    the columns per row (emptied here)."""
    host, device, start = rows.pop("host"), rows.pop("device"), rows.pop("start")
    end, correlation = rows.pop("end"), rows.pop("corr")
    if task_rows.size:
        is_sync = host & columns.isin(events, "kind", [schema.SYNC])
        chosen = is_sync.copy()  # the launches' and synchronisations' rows: a mask, no sort
        chosen[launch_of_task[launch_of_task >= 0]] = True
        host_rows = np.flatnonzero(chosen)
    else:
        is_sync = np.zeros(n, dtype=bool)
        host_rows = _outermost_slices(events, host, start, end)
    thread_keys_arr, thread_of = unique_pairs(
        columns.int64_at(events, "pid", host_rows), columns.int64_at(events, "stream", host_rows)
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
    sync_of = RowIndex(sync_rows)
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
    h_pred, h_delay, h_release = thread_chain(thread_node, h_start, h_dur, pin_first=True)
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
    host_node_of = RowIndex(host_row_of[~second], np.flatnonzero(~second))
    wait_node_of = RowIndex(host_row_of[second], np.flatnonzero(second))

    task_block, ev_contradicted, task_index_of = tasks.result()
    has_launch = launch_of_task >= 0
    task_block["launch_src"] = np.where(has_launch, host_node_of(np.maximum(launch_of_task, 0)), -1)
    task_block["launch_delay"] = np.where(
        task_block["launch_src"] >= 0, task_block["launch_delay"], 0
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
    name_code, names = coded_at(events, "name", row)
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
        name_code=name_code,
        names=names,
        host_name=host_name,
        thread=col("thread"),
        thread_keys=tuple((int(p), int(t)) for p, t in thread_keys_arr.tolist()),
        event_src=task_block["event_src"] + n_host,
        event_dst=task_block["event_dst"] + n_host,
        event_delay=task_block["event_delay"],
        dropped_edges=ev_contradicted,
    )


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
    name_codes = coded_at(events, "name", launches)[0]
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
    pid = columns.int64_at(events, "pid", rows)
    thread = columns.int64_at(events, "stream", rows)
    order = np.lexsort((-(end[rows] - start[rows]), start[rows], thread, pid))
    rows, pid, thread = rows[order], pid[order], thread[order]
    same = np.zeros(rows.size, dtype=bool)
    same[1:] = (pid[1:] == pid[:-1]) & (thread[1:] == thread[:-1])
    reach = running_max(end[rows], same)
    outer = np.ones(rows.size, dtype=bool)
    outer[1:] = ~same[1:] | (start[rows][1:] >= reach[:-1])
    return np.sort(rows[outer])


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
    # take: faster than indexing where the rows scatter (the launches)
    issued = np.where(
        launch_of_task >= 0, start.take(np.maximum(launch_of_task, 0)), start.take(task_rows)
    )
    t_device, t_stream = device.take(task_rows), stream.take(task_rows)
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


def _topological(graph: StepGraph) -> StepGraph:
    """The graph with its nodes sorted so that every edge points forward; the few
    dependencies the trace's times contradict (a cycle through clock skew) are dropped."""
    size = graph.size
    if size == 0:
        return graph
    key = graph.start.copy()
    roots, depth = _chain_positions(graph)
    chain_order = columns.lexsort((depth, roots))
    chain_ids = roots[chain_order]
    same = np.zeros(size, dtype=bool)
    same[1:] = chain_ids[1:] == chain_ids[:-1]
    if not columns.relax_keys(key, graph, chain_order, same, _RELAX_ROUNDS):
        relaxed_keys(key, graph, chain_order, same, _RELAX_ROUNDS)
    order = columns.lexsort((graph.kind, key))
    rank = np.empty(size, dtype=np.int64)
    rank[order] = np.arange(size)
    del key, roots, depth, chain_order, chain_ids, same

    # the unordered columns, each dropped once its sorted one is made: at most one column of
    # the graph held twice rather than the whole graph
    old = dict(vars(graph))
    del graph
    sorted_columns: dict[str, Any] = {}
    dropped = 0
    for key in ("chain_pred", "lane_pred", "launch_src", "wake_src"):
        pointers, backward = moved_pointers(old.pop(key), rank, order)
        dropped += backward
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
        names=old["names"],
        event_src=event_src[event_forward],
        event_dst=event_dst[event_forward],
        event_delay=old["event_delay"][event_forward],
        dropped_edges=old["dropped_edges"] + dropped,
    )


# The rounds of raising the sort keys above their dependencies' (:func:`_topological`); a
# graph whose keys still move after them (a cycle through clock skew) is sorted as they are.
_RELAX_ROUNDS: Final = 4


def relaxed_keys(
    key: Int64Array, graph: StepGraph, chain_order: Int64Array, same: _BoolArray, rounds: int
) -> None:
    """Raise each node's sort ``key`` (in place) above its launch call's and its waker's, the
    waited-for tasks' and the awaited events', then strictly along each chain (``chain_order``:
    the nodes chain by chain; ``same``: where a node's chain is the one before's), round after
    round until a round changes nothing or ``rounds`` have run (numpy's passes, where
    ``columns.relax_keys`` is not built)."""
    position = np.arange(key.size)
    has_launch = graph.launch_src >= 0
    has_wake = graph.wake_src >= 0
    for _ in range(rounds):
        before = key.copy()
        key[has_launch] = np.maximum(key[has_launch], key[graph.launch_src[has_launch]] + 1)
        key[has_wake] = np.maximum(key[has_wake], key[graph.wake_src[has_wake]] + 1)
        np.maximum.at(key, graph.wait_dst, key[graph.wait_src] + 1)
        np.maximum.at(key, graph.event_dst, key[graph.event_src] + 1)
        # strictly increasing along each chain
        ordered = key[chain_order] - position
        key[chain_order] = running_max(ordered, same) + position
        if np.array_equal(before, key):
            break


def moved_pointers(
    pointers: Int64Array, rank: Int64Array, order: Int64Array
) -> tuple[Int64Array, int]:
    """Node pointers of a graph sorted by ``order`` (``rank``: each node's place in it): each
    pointer's new place, -1 where it points nowhere or not to an earlier place (a dependency
    the trace's times contradict), and how many were dropped so."""
    moved = columns.remap_pointers(pointers, rank, order)
    if moved is not None:
        return moved
    found = np.where(pointers >= 0, rank[np.maximum(pointers, 0)], -1)[order]
    backward = found >= np.arange(found.size)
    found[backward] = -1
    return found, int(backward.sum())


# The graph's columns of one item per node (the others are edges, threads and a count).
_NODE_COLUMNS: Final = tuple(
    f.name
    for f in fields(StepGraph)
    if not f.name.startswith(("wait_", "event_"))
    and f.name not in ("thread_keys", "dropped_edges", "names")
)


def _chain_positions(graph: StepGraph) -> tuple[Int64Array, Int64Array]:
    """Each node's chain (the id of its first node) and its place along the chain: one walk
    along each chain where the compiled pass is built (``columns.chain_positions``), else
    :func:`jumped_positions`."""
    walked = columns.chain_positions(graph.chain_pred)
    return walked if walked is not None else jumped_positions(graph.chain_pred)


def jumped_positions(chain_pred: Int64Array) -> tuple[Int64Array, Int64Array]:
    """:func:`_chain_positions` by pointer jumping: log2(chain length) vectorised passes."""
    index = np.arange(chain_pred.size)
    has_pred = chain_pred >= 0
    parent = np.where(has_pred, chain_pred, index)
    depth = has_pred.astype(np.int64)
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return parent, depth
        depth = depth + depth[parent]
        parent = grand
