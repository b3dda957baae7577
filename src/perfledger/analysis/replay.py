"""Replay a step graph: the earliest-start schedule of its nodes with their durations.

Each node starts at the latest of its predecessors' ends plus the edge's delay (a launch edge
counts from the call's start) and its own earliest start; a change (:class:`WhatIf`) scales
durations, drops the synchronisation waits, or moves collectives into lanes of their own before
the replay. The schedule keeps, for each node, the predecessor that set its start: the critical
path follows those links back (:mod:`perfledger.analysis.critical_path`).

The schedule is one pass over the nodes in topological order (a longest-path recursion is
sequential), in C where ``_schedule.c`` is built; everything around it is vectorised.
docs/whatif.md gives the measured speed.
"""

from __future__ import annotations

import importlib
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.graph import StepGraph
from perfledger.analysis.graph_codes import (
    CLASS_CODE,
    DATALOADER,
    FREE,
    HOST,
    HOST_OP,
    LAUNCH,
    SYNC_CALL,
    SYNC_WAIT,
    TASK,
)
from perfledger.analysis.graph_plain import (
    IntColumn,
    NodeEdges,
    edge_nodes,
    event_edges,
    patched,
    wait_edges,
)
from perfledger.analysis.graph_waits import unique_pairs
from perfledger.analysis.intervals import Int64Array
from perfledger.analysis.replay_gaps import gap_offset, scaled_offset, thread_wait
from perfledger.errors import PerfledgerError
from perfledger.model import whatif
from perfledger.model.whatif import NO_CHANGE, WhatIf

# How a node's start was set.
RELEASE: Final = 0  # its own earliest start (or, with nothing to go by, its observed start)
CHAIN: Final = 1  # its predecessor on its thread or stream
LAUNCHED: Final = 2  # its launch call
WAITED: Final = 3  # a task a synchronisation waited for
WOKEN: Final = 4  # a call of another host thread, which ended this thread's wait
AWAITED: Final = 5  # a task of another stream whose event its stream waited for


@dataclass(frozen=True)
class Schedule:
    """Replayed times of every node of a graph, and what set each start.

    Attributes:
        start, end: replayed times.
        chain_delay: the chain delays after the change (host work scaled with ``host``).
        via: the node whose time set the start (-1: its release).
        how: :data:`RELEASE`, :data:`CHAIN`, :data:`LAUNCHED`, :data:`WAITED`,
            :data:`WOKEN` or :data:`AWAITED`.
        chain_pred: the chain predecessors used (lanes with ``overlap_comm``).
    """

    start: Int64Array
    end: Int64Array
    chain_delay: Int64Array
    via: Int64Array
    how: npt.NDArray[np.int8]
    chain_pred: Int64Array


@dataclass(frozen=True)
class Peers:
    """The other participants of a rank's collectives (several ranks profiled together).

    A collective moves data only once its last participant has arrived: the task waits from
    its own arrival (its start) for the others, then transfers. Per collective task (node):
    ``wait`` is the others' last arrival minus its start in the trace (negative when it came
    last; within its duration it is what it waited), ``shift`` how much the others' last
    arrival moved in the replay.
    The replayed task starts at its own arrival and ends at the later of that and the others'
    arrival (observed start + wait + shift) plus its transfer (duration - wait, scaled as the
    task is).
    """

    node: Int64Array
    wait: Int64Array
    shift: Int64Array


@dataclass(frozen=True)
class NodeChanges:
    """A change as it applies to each node of a graph.

    Attributes:
        dur: the factor each node's duration is multiplied by.
        gap: the factor of the host work before each host node (its chain delay).
        latency: the factor of each task's launch latency.
        fused: tasks that run as the later part of a fused kernel (no launch, no gap).
        waits: which synchronisation edges stay.
    """

    dur: npt.NDArray[np.float64]
    gap: npt.NDArray[np.float64]
    latency: npt.NDArray[np.float64]
    fused: npt.NDArray[np.bool_]
    waits: npt.NDArray[np.bool_]


def node_changes(graph: StepGraph, change: WhatIf) -> NodeChanges:
    """What ``change`` does to each node and edge of ``graph``."""
    factor = np.ones(graph.size, dtype=np.float64)
    gap = np.ones(graph.size, dtype=np.float64)
    latency = np.ones(graph.size, dtype=np.float64)
    is_host_work = (graph.kind == LAUNCH) | (graph.kind == HOST_OP)
    host_gap = (graph.kind != TASK) & (graph.chain_delay > 0)
    for scale in change.scales:
        if scale.factor <= 0 or not np.isfinite(scale.factor):
            raise PerfledgerError(
                f"--scale {scale.selector}={scale.factor}: the factor must be a number above 0"
            )
        selector = scale.selector
        if selector == whatif.COMPUTE:
            chosen = graph.is_kernel
        elif selector == whatif.COMMUNICATION:
            chosen = graph.is_comm
        elif selector == whatif.MEMCPY:
            chosen = graph.is_copy
        elif selector == whatif.HOST:
            chosen = is_host_work
            gap[host_gap] *= scale.factor
        elif selector == whatif.LAUNCH:
            chosen = graph.kind == LAUNCH
            dispatch = (
                host_gap
                & ((graph.kind == LAUNCH) | (graph.kind == SYNC_CALL))
                & (graph.chain_class == CLASS_CODE[HOST])
            )
            gap[dispatch] *= scale.factor
            latency[graph.kind == TASK] *= scale.factor
        elif selector.startswith(whatif.KERNEL_PREFIX) and selector[len(whatif.KERNEL_PREFIX) :]:
            chosen = name_matches(graph, selector[len(whatif.KERNEL_PREFIX) :])
        else:
            raise PerfledgerError(
                f"--scale {selector}=...: unknown selector (one of "
                f"{', '.join(whatif.SELECTORS)}, kernel:GLOB)"
            )
        factor[chosen] *= scale.factor
    if change.no_dataloader:
        # each host gap loses its data-loading part, whatever the rest of its work
        busy = graph.chain_busy
        loading = np.minimum(graph.chain_loader, busy) / np.maximum(busy, 1)
        gap[host_gap] *= 1.0 - loading[host_gap]
        factor[(graph.kind == HOST_OP) & (graph.node_class == CLASS_CODE[DATALOADER])] = 0.0
    fused = np.zeros(graph.size, dtype=bool)
    if change.tasks:  # the tasks by row, sorted only for a change of some tasks
        tasks = np.flatnonzero(graph.kind == TASK)
        task_rows = graph.row.take(tasks)
        by_row = np.argsort(task_rows, kind="stable")
        task_rows = task_rows.take(by_row)
    for task_change in change.tasks:
        rows = np.asarray(task_change.rows, dtype=np.int64)
        factors = np.asarray(task_change.factors, dtype=np.float64)
        if rows.size != factors.size or (factors < 0).any() or not np.isfinite(factors).all():
            raise PerfledgerError("a task change needs one factor >= 0 per task")
        if task_rows.size == 0:
            continue
        at = np.clip(np.searchsorted(task_rows, rows), 0, task_rows.size - 1)
        found = task_rows[at] == rows
        nodes = tasks[by_row[at[found]]]
        factor[nodes] *= factors[found]
        if task_change.fused:
            fused[nodes[np.asarray(task_change.fused, dtype=bool)[found]]] = True
    launched_by_fused = graph.launch_src[fused & (graph.launch_src >= 0)]
    factor[launched_by_fused] = 0.0  # one launch for the fused kernel: the others go
    waits = np.ones(graph.wait_src.size, dtype=bool)
    if change.no_sync:
        waits[:] = False
    elif change.unsynced_rows:
        unsynced = np.asarray(change.unsynced_rows, dtype=np.int64)
        waits &= ~np.isin(graph.row[graph.wait_dst], unsynced)
    return NodeChanges(factor, gap, latency, fused, waits)


def effective_change(change: WhatIf) -> WhatIf:
    """``change`` without its parts that change nothing: scales by exactly 1 of a known
    selector, task changes of no task. Replayed, it gives the same schedule."""

    def known(selector: str) -> bool:
        glob = selector[len(whatif.KERNEL_PREFIX) :]
        return selector in whatif.SELECTORS or (
            selector.startswith(whatif.KERNEL_PREFIX) and bool(glob)
        )

    scales = tuple(s for s in change.scales if not (s.factor == 1.0 and known(s.selector)))
    tasks = tuple(t for t in change.tasks if t.rows or t.factors or t.fused)
    if len(scales) == len(change.scales) and len(tasks) == len(change.tasks):
        return change
    return replace(change, scales=scales, tasks=tasks)


def name_matches(graph: StepGraph, pattern: str) -> npt.NDArray[np.bool_]:
    """Device tasks (and operators of a host-only run) whose name, or the name of the host
    operator that launched them, matches the glob ``pattern`` (case-sensitive)."""
    work = (graph.kind == TASK) | (graph.kind == HOST_OP)
    # the names: each distinct one matched once, the nodes' codes looked up
    hit = np.fromiter(
        (n is not None and fnmatchcase(str(n), pattern) for n in graph.names),
        bool,
        len(graph.names),
    )
    chosen = work & hit[graph.name_code] if hit.any() else np.zeros(graph.size, dtype=bool)
    # the host operators that launched the tasks
    names = graph.host_name
    distinct = {str(n) for n in names[work].tolist() if n is not None}
    hits = {n for n in distinct if fnmatchcase(n, pattern)}
    if hits:
        chosen |= work & np.fromiter(
            (n is not None and str(n) in hits for n in names.tolist()), bool, graph.size
        )
    return chosen


def replay(graph: StepGraph, change: WhatIf = NO_CHANGE, peers: Peers | None = None) -> Schedule:
    """The earliest-start schedule of ``graph`` under ``change`` (``peers``: the arrival of
    the other ranks at its collectives)."""
    inputs = schedule_inputs(graph, change, peers)
    return inputs.schedule(*_schedule(*inputs.lists))


# Nodes per slice of :meth:`ScheduleInputs.links`.
_LINKS_SLICE: Final = 1 << 16


@dataclass(frozen=True)
class ScheduleInputs:
    """What the longest-path loop walks for one graph under one change: plain lists and the
    few edges of the full path (``lists``, in :func:`_schedule`'s order), and the columns
    the schedule keeps or links its nodes with (chain predecessors and delays, launch calls
    and latencies, releases; ``full``: the nodes of the full path)."""

    lists: tuple[
        IntColumn,
        IntColumn,
        IntColumn,
        IntColumn,
        IntColumn,
        IntColumn,
        Int64Array,
        Mapping[int, list[int]],
        Mapping[int, tuple[int, int]],
        Mapping[int, list[tuple[int, int]]],
        dict[int, tuple[int, int]],
    ]
    chain_delay: Int64Array
    chain_pred: Int64Array
    launch_src: Int64Array
    launch_delay: Int64Array
    release: Int64Array
    full: npt.NDArray[np.bool_]

    def schedule(
        self, start: array[int], end: array[int], via: array[int], how: bytearray
    ) -> Schedule:
        """The schedule of the loop's results (the nodes of the short path the Python loop
        walked have no link yet: :meth:`links` gives them; the compiled walk links every node
        itself): arrays over the loop's own C arrays, not copies."""
        schedule = Schedule(
            start=np.frombuffer(start, dtype=np.int64),
            end=np.frombuffer(end, dtype=np.int64),
            chain_delay=self.chain_delay,
            via=np.frombuffer(via, dtype=np.int64),
            how=np.frombuffer(how, dtype=np.int8),
            chain_pred=self.chain_pred,
        )
        self.links(schedule)
        return schedule

    def links(self, schedule: Schedule) -> None:
        """Fill in ``schedule`` what set the start of each node of the short path that has
        no link (a chain predecessor or a launch call, else its release), as the loop decides
        it: the first of the latest, and only above the release (a node the compiled walk
        found started at its release is worked out again, to the same). Worked out a slice of
        nodes at a time: the temporaries stay a few MB whatever the graph's size."""
        for lo in range(0, schedule.via.size, _LINKS_SLICE):
            hi = lo + _LINKS_SLICE
            self._links(
                schedule, lo + np.flatnonzero(~self.full[lo:hi] & (schedule.via[lo:hi] < 0))
            )

    def _links(self, schedule: Schedule, nodes: Int64Array) -> None:
        """:meth:`links` for the nodes ``nodes``."""
        pred, launch = self.chain_pred[nodes], self.launch_src[nodes]
        release = self.release[nodes]
        chained = pred >= 0
        by_chain = np.where(chained, schedule.end[pred] + self.chain_delay[nodes], release)
        chained &= by_chain > release
        best = np.where(chained, by_chain, release)
        launched = launch >= 0
        by_launch = np.where(launched, schedule.start[launch] + self.launch_delay[nodes], best)
        launched &= by_launch > best
        schedule.via[nodes] = np.where(launched, launch, np.where(chained, pred, -1))
        schedule.how[nodes] = np.where(launched, LAUNCHED, np.where(chained, CHAIN, RELEASE))


def schedule_inputs(
    graph: StepGraph, change: WhatIf = NO_CHANGE, peers: Peers | None = None
) -> ScheduleInputs:
    """The inputs of :func:`replay`'s loop (the ranks replayed together walk them jointly:
    :mod:`perfledger.analysis.replay_joint`)."""
    changes = node_changes(graph, change)
    plain = graph.plain
    # each changed column is made a column of the loop at once, its temporaries freed (the
    # products rounded in place)
    dur_list: IntColumn = plain.dur
    if (changes.dur != 1.0).any():
        scaled = graph.dur * changes.dur
        dur_list = patched(plain.dur, graph.dur, np.rint(scaled, out=scaled).astype(np.int64))
        del scaled
    transfers: dict[int, tuple[int, int]] = {}
    if peers is not None and peers.node.size:
        # the others' arrival, before its own when it came last (the others waited for it)
        ready = graph.start[peers.node] + np.minimum(peers.wait, graph.dur[peers.node])
        ready = ready + peers.shift
        wait = np.clip(peers.wait, 0, graph.dur[peers.node])
        transfer = np.rint((graph.dur[peers.node] - wait) * changes.dur[peers.node])
        transfers = dict(
            zip(
                peers.node.tolist(),
                zip(ready.tolist(), transfer.astype(np.int64).tolist(), strict=True),
                strict=True,
            )
        )
    if (changes.gap == 1.0).all():
        delay = graph.chain_delay
    else:
        host_gap = (graph.kind != TASK) & (graph.chain_delay > 0)
        # only the thread's own work between two nodes scales, not its waits for other threads
        scaled = graph.chain_busy * changes.gap
        scaled_work = np.rint(scaled, out=scaled).astype(np.int64)
        del scaled
        delay = np.where(
            host_gap, graph.chain_delay - graph.chain_busy + scaled_work, graph.chain_delay
        )
        del scaled_work, host_gap
    if change.overlap_comm:
        pred = graph.lane_pred
        delay = np.where(graph.kind == TASK, graph.lane_delay, delay)
    else:
        pred = graph.chain_pred
    launch_src = graph.launch_src
    launch_delay = graph.launch_delay
    release = graph.release
    if (changes.latency != 1.0).any():
        scaled = launch_delay * changes.latency
        launch_delay = np.rint(scaled, out=scaled).astype(np.int64)
        del scaled
    fused, kept = changes.fused, changes.waits
    del changes  # the factors (24 bytes a node) are all read
    if fused.any():
        # the later parts of a fused kernel follow the part before them at once
        launch_src = np.where(fused, -1, launch_src)
        delay = np.where(fused, 0, delay)
        release = np.where(fused, FREE, release)
    events = plain.events
    if change.overlap_comm:
        # communication neither waits for the compute before it nor holds the compute after
        keep_event = ~(graph.is_comm[graph.event_src] | graph.is_comm[graph.event_dst])
        events = event_edges(
            graph.size,
            graph.event_src[keep_event],
            graph.event_dst[keep_event],
            graph.event_delay[keep_event],
        )
    waits = plain.waits
    if not kept.all():
        waits = wait_edges(graph.size, graph.wait_src[kept], graph.wait_dst[kept])
    pred_list, pred = _loop_column(plain.chain_pred, graph.chain_pred, pred)
    delay_list, delay = _loop_column(plain.chain_delay, graph.chain_delay, delay)
    launch_list, launch_src = _loop_column(plain.launch_src, graph.launch_src, launch_src)
    lag_list, launch_delay = _loop_column(plain.launch_delay, graph.launch_delay, launch_delay)
    release_list, release = _loop_column(plain.release, graph.release, release)
    lists = (
        pred_list,
        delay_list,
        launch_list,
        lag_list,
        release_list,
        dur_list,
        graph.start,  # read only where nothing else sets a start: not made a list
        waits,
        plain.wakes,
        events,
        transfers,
    )
    full = np.zeros(graph.size, dtype=bool)
    full[edge_nodes(waits, plain.wakes, events, transfers)] = True
    return ScheduleInputs(lists, delay, pred, launch_src, launch_delay, release, full)


def _loop_column(base: IntColumn, old: Int64Array, new: Int64Array) -> tuple[IntColumn, Int64Array]:
    """``new`` as a column of the loop (:func:`patched`) and as an array; the array is a view
    of the loop's column where that is a new C array: the column is not held twice."""
    column = patched(base, old, new)
    if column is not base and isinstance(column, array):
        return column, np.frombuffer(column, dtype=np.int64)
    return column, new


def _schedule(
    pred: IntColumn,
    delay: IntColumn,
    launch_src: IntColumn,
    launch_delay: IntColumn,
    release: IntColumn,
    dur: IntColumn,
    observed: Int64Array,
    waits: Mapping[int, list[int]],
    wakes: Mapping[int, tuple[int, int]],
    events: Mapping[int, list[tuple[int, int]]],
    transfers: dict[int, tuple[int, int]],
) -> tuple[array[int], array[int], array[int], bytearray]:
    """The longest-path recursion over plain lists (nodes in topological order).

    Most nodes have at most a chain predecessor and a launch call: they take the short path
    (one flag read), which in the Python loop keeps only their times (what set their start is
    left unset, -1, for :meth:`ScheduleInputs.links`; the compiled walk records it as it
    goes); the few with wake-ups, event edges, synchronisation waits or a transfer take the
    full one."""
    n = len(dur)
    state = ScheduleState.of(n, waits, wakes, events, transfers)
    schedule_span(
        state,
        (pred, delay, launch_src, launch_delay, release, dur, observed),
        (waits, wakes, events, transfers),
        0,
        n,
    )
    return state.start, state.end, state.via, state.how


# A walk's node columns (pred, delay, launch_src, launch_delay, release, dur, observed) and
# its edge tables by node (waits, wakes, events, transfers).
NodeColumns = tuple[IntColumn, IntColumn, IntColumn, IntColumn, IntColumn, IntColumn, Int64Array]
EdgeTables = tuple[
    Mapping[int, list[int]],
    Mapping[int, tuple[int, int]],
    Mapping[int, list[tuple[int, int]]],
    dict[int, tuple[int, int]],
]


@dataclass(frozen=True)
class ScheduleState:
    """The loop's results so far (filled in node order) and which nodes take the full path:
    what a walk that pauses between spans of nodes keeps. Times and links are C arrays of
    int64 and the rest one byte a node, rather than lists of int objects (about 100 bytes a
    node): the schedule's arrays are made over them without a copy."""

    start: array[int]
    end: array[int]
    via: array[int]
    how: bytearray
    more: bytearray
    # the compiled walk's inputs (:func:`_compiled_inputs`), made at its first span
    buffers: list[tuple[Any, ...]] = field(default_factory=list)

    @staticmethod
    def of(
        n: int,
        waits: Mapping[int, list[int]],
        wakes: Mapping[int, tuple[int, int]],
        events: Mapping[int, list[tuple[int, int]]],
        transfers: dict[int, tuple[int, int]],
    ) -> ScheduleState:
        """The state before the first node of a graph of ``n`` nodes."""
        marks = np.zeros(n, dtype=np.uint8)
        marks[edge_nodes(waits, wakes, events, transfers)] = 1
        more = bytearray(marks.data)
        zeros = array("q", [0]) * n
        return ScheduleState(
            zeros, array("q", zeros), array("q", [-1]) * n, bytearray([RELEASE]) * n, more
        )


def schedule_span(
    state: ScheduleState,
    nodes: NodeColumns,
    edges: EdgeTables,
    lo: int,
    hi: int,
) -> None:
    """:func:`_schedule`'s loop over the nodes ``lo`` to ``hi`` (excluded), every node before
    ``lo`` already in ``state``: ``nodes`` are its plain lists (pred, delay, launch_src,
    launch_delay, release, dur, observed), ``edges`` its waits, wakes, events and transfers.

    Where the compiled walk is built (``_schedule.c``), it takes every node but a collective's
    transfer (and any whose sums leave int64), which this loop takes one at a time: the same
    times either way."""
    if _COMPILED is not None and hi > lo:
        if not state.buffers:
            state.buffers.append(_compiled_inputs(state, nodes, edges))
        inputs = state.buffers[0]
        if inputs:
            made = (state.start, state.end, state.via, state.how)
            v = lo
            while v < hi:
                v = _COMPILED.walk(*inputs[:8], *made, *inputs[8:], v, hi, FREE)
                if v < hi:
                    _walk(state, nodes, edges, v, v + 1)
                    v += 1
            return
    _walk(state, nodes, edges, lo, hi)


def _compiled_inputs(
    state: ScheduleState,
    nodes: NodeColumns,
    edges: EdgeTables,
) -> tuple[Any, ...]:
    """The compiled walk's inputs (see ``_schedule.c``): the node columns as int64 buffers,
    the nodes' marks (1: the walk takes their wake-ups, event edges and waits; 2: the loop
    takes them: transfers), the wake-ups by node and the event edges and waits as compressed
    rows. Empty where an edge names a node outside the graph: the loop then walks alone."""
    waits, wakes, events, transfers = edges
    n = len(state.more)
    if any(_made(table, n) is None and not _keys_within(table, n) for table in edges):
        return ()
    marks = bytearray(state.more)
    for v in transfers:
        marks[v] = 2
    made_wakes = _made(wakes, n)
    if made_wakes is not None:  # the graph's own wake-ups, as made with it
        wake_src, wake_gap = made_wakes[1:]
    else:
        wake_src = np.full(n, -1, np.int64)
        wake_gap = np.zeros(n, np.int64)
        for v, (src, gap) in wakes.items():
            wake_src[v], wake_gap[v] = src, gap
    event_ptr, awaited, event_gap = _rows(n, events)
    wait_ptr, waited, _ = _rows(n, waits, lambda ws: [(w, 0) for w in ws])
    return (
        *(_int64_buffer(column) for column in nodes),
        marks,
        wake_src,
        wake_gap,
        event_ptr,
        awaited,
        event_gap,
        wait_ptr,
        waited,
    )


def _made(table: Mapping[int, Any], n: int) -> tuple[Any, ...] | None:
    """The compressed rows a graph's edge table was made with (:class:`NodeEdges`), when
    made for ``n`` nodes; else None."""
    rows = table.rows if isinstance(table, NodeEdges) else None
    return rows if rows is not None and rows[0] == n else None


def _keys_within(table: Mapping[int, Any], n: int) -> bool:
    return all(0 <= v < n for v in table)


def _rows(
    n: int,
    table: Mapping[int, Any],
    pairs_of: Callable[[Any], list[tuple[int, int]]] | None = None,
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Each node's (source, gap) pairs (``pairs_of`` a node's entry, else the entry itself)
    as compressed rows: where each node's pairs begin (n + 1 offsets), and the sources and
    gaps in node order, each node's in its own order. Those the table was made with, where it
    was (:class:`NodeEdges`)."""
    made = _made(table, n)
    if made is not None:
        return made[1], made[2], made[3]
    ptr = np.zeros(n + 1, np.int64)
    nodes = sorted(table)
    if not nodes:
        return ptr, np.zeros(0, np.int64), np.zeros(0, np.int64)
    entries = [table[v] if pairs_of is None else pairs_of(table[v]) for v in nodes]
    ptr[np.asarray(nodes, np.int64) + 1] = [len(entry) for entry in entries]
    np.cumsum(ptr, out=ptr)
    pairs = np.asarray([pair for entry in entries for pair in entry], np.int64).reshape(-1, 2)
    return ptr, np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])


def _int64_buffer(column: IntColumn | Int64Array) -> Any:
    """A node column as a C-contiguous int64 buffer (a C array or numpy array as it is)."""
    if isinstance(column, array) and column.typecode == "q":
        return column
    return np.ascontiguousarray(column, dtype=np.int64)


def _compiled() -> Any:
    """The compiled walk; None where it was not built (then the loop below walks alone)."""
    try:
        return importlib.import_module("perfledger.analysis._schedule")
    except ImportError:
        return None


_COMPILED = _compiled()


def compiled_path(start: Any, end: Any, via: Any, how: bytes, v: int, lo: int) -> Any:
    """The walk back along a step's critical path in C (``_schedule.c``'s ``path``): the
    nodes (int64 bytes) and whether it stopped at the last one's own time; None where the
    module is not built or a node lies outside the arrays (the Python walk decides then)."""
    return None if _COMPILED is None else _COMPILED.path(start, end, via, how, v, lo)


def _walk(
    state: ScheduleState,
    nodes: NodeColumns,
    edges: EdgeTables,
    lo: int,
    hi: int,
) -> None:
    """:func:`schedule_span` in Python."""
    start, end, via, how, more = state.start, state.end, state.via, state.how, state.more
    waits, wakes, events, transfers = edges
    pred, delay, launch_src, launch_delay, release, dur, observed = nodes
    spans = (pred, delay, launch_src, launch_delay, release, dur, more)
    if lo or hi < len(dur):
        spans = tuple(column[lo:hi] for column in spans)  # type: ignore[assignment]
    for v, p, d, q, lag, s, length, full in zip(range(lo, hi), *spans, strict=True):
        if full:
            by, kind = -1, RELEASE
            if p >= 0:
                t = end[p] + d
                if t > s:
                    s, by, kind = t, p, CHAIN
            if q >= 0:
                t = start[q] + lag
                if t > s:
                    s, by, kind = t, q, LAUNCHED
            woken = wakes.get(v)
            if woken is not None:
                t = start[woken[0]] + woken[1]
                if t > s:
                    s, by, kind = t, woken[0], WOKEN
            for w, gap in events.get(v, ()):
                t = end[w] + gap
                if t > s:
                    s, by, kind = t, w, AWAITED
            for w in waits.get(v, ()):
                if end[w] > s:
                    s, by, kind = end[w], w, WAITED
            if s == FREE:
                s = int(observed[v])  # nothing to go by: where it was
            start[v] = s
            peer = transfers.get(v)
            # a collective: waits for the other ranks' arrival, then transfers
            end[v] = s + length if peer is None else max(s, peer[0]) + peer[1]
            if by >= 0:
                via[v] = by
                how[v] = kind
            continue
        # the short path: what set the start is worked out afterwards, vectorised
        # (ScheduleInputs.links), from the times this loop gives
        if p >= 0:
            t = end[p] + d
            if t > s:
                s = t
        if q >= 0:
            t = start[q] + lag
            if t > s:
                s = t
        if s == FREE:
            s = int(observed[v])
        start[v] = s
        end[v] = s + length


def host_threads(
    events: pa.Table, graph: StepGraph, rows: Int64Array
) -> tuple[Int64Array, Int64Array]:
    """The graph's thread each host row of ``events`` moves with in a replay (its own thread,
    else the busiest one), and the count of host nodes of each graph thread. The graph must
    have threads (``graph.thread_keys`` not empty)."""
    pid = columns.int64_at(events, "pid", rows)
    thread_id = columns.int64_at(events, "stream", rows)
    host_nodes = graph.thread >= 0
    counts = np.bincount(graph.thread[host_nodes], minlength=len(graph.thread_keys))
    busiest = int(np.argmax(counts))
    known = np.asarray(graph.thread_keys, dtype=np.int64).reshape(-1, 2)
    distinct, inverse = unique_pairs(pid, thread_id)
    of_distinct = np.full(distinct.shape[0], busiest, dtype=np.int64)
    for i, (p, t) in enumerate(known.tolist()):  # a loop over threads
        of_distinct[(distinct[:, 0] == p) & (distinct[:, 1] == t)] = i
    return of_distinct[inverse.reshape(-1)], counts


def replayed_events(events: pa.Table, graph: StepGraph, schedule: Schedule) -> pa.Table:
    """The events with their times replayed: nodes take their scheduled times; other host
    events move with the nodes of their thread (the busiest thread's when theirs has none);
    other device events with the task that starts last before them."""
    n = events.num_rows
    start = columns.int64(events, "start_ns")
    end = start + np.maximum(columns.int64(events, "dur_ns"), 0)
    new_start = start.copy()
    new_end = end.copy()
    device = columns.int64(events, "device")
    host = device < 0
    is_node = np.zeros(n, dtype=bool)
    is_node[graph.row] = True
    if graph.thread_keys:
        row_thread, _ = host_threads(events, graph, np.arange(n, dtype=np.int64))
        others = np.flatnonzero(host & ~is_node)
        for thread in range(len(graph.thread_keys)):  # a loop over threads
            mine = np.flatnonzero(graph.thread == thread)
            rows = others[row_thread[others] == thread]
            if rows.size == 0 or mine.size == 0:
                continue
            mapping = _ThreadMap(graph, mine, schedule)
            new_start[rows] = mapping(start[rows])
            new_end[rows] = np.maximum(mapping(end[rows]), new_start[rows])
    tasks = np.flatnonzero(graph.kind == TASK)
    if tasks.size:
        rows = np.flatnonzero(~host & ~is_node)
        order = np.argsort(graph.start[tasks], kind="stable")
        t_start = graph.start[tasks][order]
        shift = (schedule.start - graph.start)[tasks][order]
        for times, out in ((start, new_start), (end, new_end)):
            nearest = np.clip(np.searchsorted(t_start, times[rows], side="right") - 1, 0, None)
            out[rows] = times[rows] + shift[nearest]
        new_end[rows] = np.maximum(new_end[rows], new_start[rows])
    # the nodes: a synchronisation row spans its call and the end of its wait
    kind = graph.kind
    single = (kind == LAUNCH) | (kind == HOST_OP) | (kind == TASK)
    new_start[graph.row[single]] = schedule.start[single]
    new_end[graph.row[single]] = schedule.end[single]
    calls, waits = kind == SYNC_CALL, kind == SYNC_WAIT
    new_start[graph.row[calls]] = schedule.start[calls]
    new_end[graph.row[waits]] = schedule.end[waits]
    index = events.schema.get_field_index
    table = events.set_column(
        index("start_ns"), events.schema.field("start_ns"), pa.array(new_start, pa.int64())
    )
    return table.set_column(
        index("dur_ns"),
        events.schema.field("dur_ns"),
        pa.array(np.maximum(new_end - new_start, 0), pa.int64()),
    )


class _ThreadMap:
    """Observed time on a host thread -> replayed time, piecewise between its nodes: inside a
    node in proportion to its replayed length, between two as :func:`gap_offset` says."""

    def __init__(self, graph: StepGraph, nodes: Int64Array, schedule: Schedule) -> None:
        self.obs_start = graph.start[nodes]
        self.obs_end = graph.end[nodes]
        self.rep_start = schedule.start[nodes]
        self.rep_end = schedule.end[nodes]
        following = np.append(nodes[1:], nodes[-1:])
        self.wait = thread_wait(graph, nodes, following)

    def __call__(self, times: Int64Array) -> Int64Array:
        i = np.searchsorted(self.obs_start, times, side="right") - 1
        before = i < 0
        i = np.clip(i, 0, None)
        last = self.obs_start.size - 1
        nxt = np.minimum(i + 1, last)
        inside = times <= self.obs_end[i]
        obs_len = self.obs_end[i] - self.obs_start[i]
        rep_len = self.rep_end[i] - self.rep_start[i]
        within = self.rep_start[i] + scaled_offset(times - self.obs_start[i], rep_len, obs_len)
        gap_obs = self.obs_start[nxt] - self.obs_end[i]
        gap_rep = self.rep_start[nxt] - self.rep_end[i]
        has_next = (i < last) & (gap_obs > 0)
        after = self.rep_end[i] + np.where(
            has_next,
            gap_offset(times - self.obs_end[i], gap_rep, gap_obs, self.wait[i]),
            times - self.obs_end[i],
        )
        mapped = np.where(inside, within, after)
        first = self.rep_start[0] + (times - self.obs_start[0])
        return np.asarray(np.where(before, first, mapped), dtype=np.int64)
