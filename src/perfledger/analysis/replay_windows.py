"""Step windows of a replay, straight from its schedule.

A replayed step is measured as the real one: its window is what
:func:`perfledger.analysis.steps.step_plan` finds on the events with their replayed times
(:func:`perfledger.analysis.replay.replayed_events`). A replay moves times only: which rows
are step marks, which are tasks, which call launched each task, which thread or task each row
moves with, do not change. :class:`ReplayWindows` works all of that out once per rank and
then, for each schedule, replays only the rows the windows read (the driving thread's step
marks, the device tasks and their launch calls) with gathers from the schedule, instead of a
whole replayed events table. The windows are the same ones, step for step
(``tests/unit/test_replay_windows.py`` compares both on every trace of the test data).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.graph import StepGraph
from perfledger.analysis.graph_codes import HOST_OP, LAUNCH, SYNC_CALL, SYNC_WAIT, TASK
from perfledger.analysis.intervals import Int64Array
from perfledger.analysis.replay import Schedule, host_threads
from perfledger.analysis.replay_gaps import gap_offset, scaled_offset, thread_wait
from perfledger.analysis.steps import (
    annotations_at,
    comm_rows,
    launch_keys,
    mark_names,
    step_mark_rows,
    whole_window,
    windows_at,
)
from perfledger.memory import drop_mapped_pages
from perfledger.model import schema
from perfledger.model.accounts import StepWindow
from perfledger.model.launches import LaunchKeys

_BoolArray = npt.NDArray[np.bool_]
# Rows per slice of :class:`_ThreadTimes`' work on a schedule.
_SLICE: Final = 1 << 16


class ReplayWindows:
    """The step windows of one rank's replays (:meth:`__call__`), prepared from its events
    and step graph."""

    def __init__(self, events: pa.Table, graph: StepGraph, keys: LaunchKeys | None = None) -> None:
        """``keys``: the events' :func:`~perfledger.analysis.steps.launch_keys`, if found
        already (by the rank's analysis)."""
        self.rank = int(events.column("rank")[0].as_py()) if events.num_rows else 0
        self._events = events
        self._graph = graph
        marks = step_mark_rows(events)
        self.annotated = bool(marks.size)
        if not self.annotated:
            return  # one window over every row: replayed whole on each call
        self._names = mark_names(events, marks)
        # the launch keys first: their temporaries do not stack on the rows' times below
        keys = launch_keys(events) if keys is None else keys
        # the pages of the mapped columns read (a rank task's events) let go after each
        # part: the next reads others (:func:`perfledger.memory.drop_mapped_pages`)
        drop_mapped_pages(events)
        task_rows = np.flatnonzero(columns.isin(events, "kind", schema.DEVICE_TASK_KINDS))
        # the tasks with a launch key, as positions among task_rows (both sorted rows)
        self._keyed = _narrow(np.searchsorted(task_rows, keys.task_rows))
        self._is_comm = _task_comm(events, graph, task_rows)
        rows = RankRows(events, graph)
        self._marks = RowTimes(rows, marks)
        self._tasks = RowTimes(rows, task_rows)
        del task_rows
        drop_mapped_pages(events)
        self._launches = RowTimes(rows, keys.launch_rows, ends=False)  # their starts only
        # rows and positions kept for the rank's life: 4 bytes each where the rows allow
        self._keys = replace(
            keys,
            task_rows=_narrow(keys.task_rows),
            task_key=_narrow(keys.task_key),
            launch_rows=_narrow(keys.launch_rows),
            bounds=_narrow(keys.bounds),
        )

    def __call__(self, schedule: Schedule) -> dict[int, StepWindow]:
        """The step windows of ``schedule``, by step."""
        if self._events.num_rows == 0:
            return {}
        if not self.annotated:
            start, end = RowTimes(RankRows(self._events, self._graph), None)(schedule)
            is_task = columns.isin(self._events, "kind", schema.DEVICE_TASK_KINDS)
            window = whole_window(self.rank, start, end, is_task, f"rank {self.rank}").windows
            return {w.step: w for w in window}
        mark_start, mark_end = self._marks(schedule)
        annotations = annotations_at(self._names, mark_start, mark_end)
        del mark_start, mark_end
        task_start, task_end = self._tasks(schedule)
        launch = np.full(task_start.size, -1, dtype=np.int64)
        launch[self._keyed] = self._keys.starts(self._launches.starts(schedule))
        # a task with no known launch counts as issued when it starts
        issued = np.where(launch >= 0, launch, task_start)
        del launch
        windows = windows_at(self.rank, annotations, issued, task_start, task_end, self._is_comm)
        return {w.step: w for w in windows}


def _task_comm(events: pa.Table, graph: StepGraph, task_rows: Int64Array) -> _BoolArray:
    """Which of the task rows are communication: the graph's flags of their nodes where its
    task nodes are those rows (no second pass of the collective name pattern over every
    name of the events)."""
    tasks = np.flatnonzero(graph.kind == TASK)
    by_row = tasks[np.argsort(graph.row[tasks], kind="stable")]
    if np.array_equal(graph.row[by_row], task_rows):
        return np.asarray(graph.is_comm[by_row], dtype=bool)
    return np.asarray(comm_rows(events)[task_rows], dtype=bool)


class RowTimes:
    """The replayed start and end of some rows of a rank's events, as
    :func:`perfledger.analysis.replay.replayed_events` gives them: nodes take their
    scheduled times; other host rows move with the nodes of their thread (the busiest
    thread's when theirs has none), piecewise between them; other device rows with the task
    that starts last before them. Everything but the schedule's times is worked out here
    (``ends``: also what the rows' ends need; without it, only :meth:`starts` is called)."""

    def __init__(self, rows: RankRows, at: Int64Array | None, ends: bool = True) -> None:
        graph = rows.graph
        self.start, self.end, host = rows.times(at)
        start_node, end_node = rows.nodes(at)
        if not ends:  # the rows' ends are not read: nothing of theirs kept
            self.end = np.zeros(0, dtype=np.int64)
            end_node = np.full(start_node.size, -1, dtype=start_node.dtype)
        node_row = (start_node >= 0) | (end_node >= 0)
        self.start_from = np.flatnonzero(start_node >= 0)
        self.start_node = start_node[self.start_from]
        self.end_from = np.flatnonzero(end_node >= 0)
        self.end_node = end_node[self.end_from]
        if not ends or (
            np.array_equal(self.end_from, self.start_from)
            and np.array_equal(self.end_node, self.start_node)
        ):
            # rows whose start and end are one node's (tasks, launch calls): kept once
            self.end_from, self.end_node = self.start_from, self.start_node
        del start_node, end_node
        # every row takes both its times from one node: gathered, nothing copied or moved
        self.nodes_only = self.start_from.size == self.start.size and (
            self.end_from is self.start_from
        )
        # host rows that are not nodes: moved with their thread's nodes
        candidates = np.flatnonzero(host & ~node_row)
        at_candidates = candidates if at is None else at[candidates]
        thread = rows.thread_of(at_candidates)
        kept = thread >= 0  # rows of a thread without nodes keep their times
        self.threaded = candidates[kept]
        self.thread_start = _ThreadTimes(graph, thread[kept], self.start[self.threaded])
        self.thread_end = (
            _ThreadTimes(graph, thread[kept], self.end[self.threaded]) if ends else None
        )
        self.shifted = np.zeros(0, dtype=np.int64)
        self.shift_start = self.shift_end = self.shifted
        if rows.by_start.size:
            self.shifted = np.flatnonzero(~host & ~node_row)
            self.shift_start = rows.task_before(self.start[self.shifted])
            self.shift_end = (
                rows.task_before(self.end[self.shifted]) if ends else self.shift_start[:0]
            )
        if self.nodes_only:  # the observed times and the rows are not read again
            self.start = self.end = self.start_from = self.end_from = np.zeros(0, np.int64)
        self.graph = graph

    def starts(self, schedule: Schedule) -> Int64Array:
        """The start of the rows under ``schedule``."""
        if self.nodes_only:
            gathered: Int64Array = schedule.start[self.start_node]
            return gathered
        new_start: Int64Array = self.start.copy()
        if self.threaded.size:
            new_start[self.threaded] = self.thread_start(schedule)
        if self.shifted.size:
            # moved as far as the task that starts last before them
            observed = self.graph.start
            moved_start = schedule.start[self.shift_start] - observed[self.shift_start]
            new_start[self.shifted] = self.start[self.shifted] + moved_start
        new_start[self.start_from] = schedule.start[self.start_node]
        return new_start

    def __call__(self, schedule: Schedule) -> tuple[Int64Array, Int64Array]:
        """(start, end) of the rows under ``schedule`` (end no earlier than start)."""
        if self.thread_end is None:
            raise ValueError("the rows' times were prepared without their ends")
        # the rows moved with threads or tasks and the nodes' rows are apart: each row's
        # start is final before the ends are worked out
        new_start = self.starts(schedule)
        if self.nodes_only:
            new_end = schedule.end[self.end_node]
        else:
            new_end = self.end.copy()
            if self.threaded.size:
                rows = self.threaded
                new_end[rows] = np.maximum(self.thread_end(schedule), new_start[rows])
            if self.shifted.size:
                rows = self.shifted
                observed = self.graph.start
                moved_end = schedule.start[self.shift_end] - observed[self.shift_end]
                new_end[rows] = self.end[rows] + moved_end
                new_end[rows] = np.maximum(new_end[rows], new_start[rows])
            new_end[self.end_from] = schedule.end[self.end_node]
        # start + max(end - start, 0), in place
        np.subtract(new_end, new_start, out=new_end)
        np.maximum(new_end, 0, out=new_end)
        new_end += new_start
        return new_start, new_end


class _ThreadTimes:
    """Observed times on host threads -> replayed times, as ``replay._ThreadMap`` maps them:
    inside a node of the thread in proportion to its replayed length, between two as
    :func:`perfledger.analysis.replay_gaps.gap_offset` says, before the first moved as the first.
    Indices into the nodes, found once; the schedule's times gathered on each call."""

    def __init__(self, graph: StepGraph, thread: Int64Array, times: Int64Array) -> None:
        size = times.size
        self.times = times
        self.node = np.zeros(size, dtype=np.int64)  # the node it is in or after
        self.next = np.zeros(size, dtype=np.int64)  # the node after that one
        self.first = np.zeros(size, dtype=np.int64)  # the thread's first node
        self.before = np.zeros(size, dtype=bool)  # before the thread's first node
        self.has_next = np.zeros(size, dtype=bool)
        graph_end = graph.end
        for t in np.unique(thread).tolist():  # a loop over threads
            mine = np.flatnonzero(graph.thread == t)
            at = np.flatnonzero(thread == t)
            obs_start, obs_end = graph.start[mine], graph_end[mine]
            i = np.searchsorted(obs_start, times[at], side="right") - 1
            self.before[at] = i < 0
            i = np.clip(i, 0, None)
            last = obs_start.size - 1
            nxt = np.minimum(i + 1, last)
            self.has_next[at] = (i < last) & (obs_start[nxt] - obs_end[i] > 0)
            self.node[at] = mine[i]
            self.next[at] = mine[nxt]
            self.first[at] = mine[0]
        self.inside = times <= graph_end[self.node]
        # node indices kept for the rank's life: 4 bytes each where the graph allows
        self.node, self.next, self.first = (_narrow(a) for a in (self.node, self.next, self.first))
        # the observed times of the nodes are gathered again on each call, not kept: a few
        # gathers per replay rather than five more columns per row for the rank's life
        self.graph = graph

    def __call__(self, schedule: Schedule) -> Int64Array:
        """The replayed times, worked out a slice of rows at a time: a dozen temporaries of
        a slice each rather than of every row (launch calls: a million rows)."""
        mapped = np.empty(self.times.size, dtype=np.int64)
        for lo in range(0, self.times.size, _SLICE):  # a loop over slices of rows
            mapped[lo : lo + _SLICE] = self._mapped(schedule, slice(lo, lo + _SLICE))
        return mapped

    def _mapped(self, schedule: Schedule, rows: slice) -> Int64Array:
        graph = self.graph
        node, following, first_node = self.node[rows], self.next[rows], self.first[rows]
        obs_start = graph.start[node]
        obs_len = graph.dur[node]
        obs_end = obs_start + obs_len
        rep_start = schedule.start[node]
        rep_end = schedule.end[node]
        times = self.times[rows]
        within = rep_start + scaled_offset(times - obs_start, rep_end - rep_start, obs_len)
        gap_rep = schedule.start[following] - rep_end
        gap_obs = graph.start[following] - obs_end
        after = rep_end + np.where(
            self.has_next[rows],
            gap_offset(times - obs_end, gap_rep, gap_obs, thread_wait(graph, node, following)),
            times - obs_end,
        )
        mapped = np.where(self.inside[rows], within, after)
        first = schedule.start[first_node] + (times - graph.start[first_node])
        return np.asarray(np.where(self.before[rows], first, mapped), dtype=np.int64)


class RankRows:
    """What :class:`RowTimes` of one rank's events share: which node's time each row takes,
    host threads, and the observed times of the rows asked for."""

    def __init__(self, events: pa.Table, graph: StepGraph) -> None:
        self.events = events
        self.graph = graph
        # which node's scheduled time each row takes (assigned in replayed_events' order),
        # looked up among the nodes' rows: no column as long as the events
        nodes = np.arange(graph.size, dtype=np.int64)
        kind = graph.kind
        single = (kind == LAUNCH) | (kind == HOST_OP) | (kind == TASK)
        starts, ends = single | (kind == SYNC_CALL), single | (kind == SYNC_WAIT)
        self._start_node = _RowNodes(graph.row[starts], nodes[starts])
        self._end_node = _RowNodes(graph.row[ends], nodes[ends])
        tasks = np.flatnonzero(kind == TASK)
        self.by_start = tasks[np.argsort(graph.start[tasks], kind="stable")]
        self.task_start = graph.start[self.by_start]

    def task_before(self, times: Int64Array) -> Int64Array:
        """The task (node) that starts last by each of ``times`` (the first task before all)."""
        at = np.searchsorted(self.task_start, times, side="right") - 1
        before: Int64Array = self.by_start[np.clip(at, 0, None)]
        return before

    def times(self, at: Int64Array | None) -> tuple[Int64Array, Int64Array, _BoolArray]:
        """The observed start and end of the rows ``at`` (None: every row), and which are
        host rows."""

        def read(column: str) -> Int64Array:
            # the rows asked for gathered from the column's chunks: no copy of the column
            return (
                columns.int64(self.events, column)
                if at is None
                else columns.int64_at(self.events, column, at)
            )

        start = read("start_ns")
        end = start + np.maximum(read("dur_ns"), 0)
        host = read("device") < 0
        drop_mapped_pages(self.events)  # the pages read of the (mapped) columns
        return start, end, host

    def nodes(
        self, at: Int64Array | None
    ) -> tuple[npt.NDArray[np.signedinteger[Any]], npt.NDArray[np.signedinteger[Any]]]:
        """The node whose start, and the one whose end, each row ``at`` (None: every row)
        takes; -1 where none."""
        if at is None:  # every row: each table spread out, no search
            rows = self.events.num_rows
            return self._start_node.every(rows), self._end_node.every(rows)
        return self._start_node(at), self._end_node(at)

    def thread_of(self, rows: Int64Array) -> Int64Array:
        """The graph's thread whose nodes each host row moves with (its own, else the busiest
        one); -1 where that thread has no node, or the graph none."""
        graph = self.graph
        if not graph.thread_keys:
            return np.full(rows.size, -1, dtype=np.int64)
        thread, counts = host_threads(self.events, graph, rows)
        drop_mapped_pages(self.events)  # the pages read of the (mapped) threads' columns
        return np.where(counts[thread] > 0, thread, -1)


class _RowNodes:
    """Rows of the events -> the node whose time each takes (-1 for none; of a row given
    several times, the last node given), as node indices of 4 bytes where the graph allows."""

    def __init__(self, rows: Int64Array, nodes: Int64Array) -> None:
        order = np.argsort(rows, kind="stable")
        rows, nodes = rows[order], nodes[order]
        last = np.ones(rows.size, dtype=bool)
        last[:-1] = rows[1:] != rows[:-1]
        self.rows = rows[last]
        index = np.int32 if nodes.size < np.iinfo(np.int32).max else np.int64
        self.nodes = nodes[last].astype(index)

    def every(self, rows: int) -> npt.NDArray[np.signedinteger[Any]]:
        """The node of each of the first ``rows`` rows (as ``self(np.arange(rows))``)."""
        nodes = np.full(rows, -1, dtype=self.nodes.dtype)
        low, high = np.searchsorted(self.rows, [0, rows])  # the rows known among them
        nodes[self.rows[low:high]] = self.nodes[low:high]
        return nodes

    def __call__(self, at: Int64Array) -> npt.NDArray[np.signedinteger[Any]]:
        """The node of each row ``at``."""
        if self.rows.size == 0:
            return np.full(at.size, -1, dtype=self.nodes.dtype)
        pos = np.clip(np.searchsorted(self.rows, at), 0, self.rows.size - 1)
        return np.where(self.rows[pos] == at, self.nodes[pos], -1).astype(self.nodes.dtype)


def _narrow(values: Int64Array) -> npt.NDArray[np.signedinteger[Any]]:
    """Indices (rows, positions) as 4 bytes each where they all fit, else as they are."""
    if values.size and int(values.max()) >= np.iinfo(np.int32).max:
        return values
    return values.astype(np.int32)
