"""Replay every step of a profile and find the chain of work that sets each step's length.

For each rank: the step graph (:mod:`perfledger.analysis.graph`) is replayed unchanged (the
*baseline*, which should give the measured steps: the difference is the replay error) and
under the change asked for (the *prediction*); both replays' events go through the same step
windows as the measured trace (:func:`perfledger.analysis.steps.step_plan`), so a replayed step
is measured exactly as the real one.

The critical path of a step is followed back from the node that ends last before the step's
end, through the predecessor that set each start, until the step's start. ``bound_by`` adds
its time up by class: host work, data loader, launch overhead (launch calls, launch latency,
the gaps between queued tasks), synchronisation, communication, copies, compute by op class,
host time also before the first node of a thread and after the last node up to the step's
end, and ``other`` before a task that nothing explains; it sums to the step exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.beside import beside
from perfledger.analysis.comm_split import comm_split
from perfledger.analysis.graph import StepGraph, build_graph
from perfledger.analysis.graph_codes import (
    CLASS_CODE,
    CLASSES,
    COMMUNICATION,
    DATALOADER,
    HOST,
    LAUNCH_OVERHEAD,
    OTHER,
    SYNC,
    TASK,
)
from perfledger.analysis.graph_waits import unique_pairs
from perfledger.analysis.intervals import Int64Array
from perfledger.analysis.path_spans import (
    NO_PART,
    TRANSFER_PART,
    WAIT_PART,
    Pieces,
    capped_spans,
    pieces_of_spans,
)
from perfledger.analysis.rank_arrivals import (
    CollectiveArrivals,
    matched_collectives,
    rank_collectives,
)
from perfledger.analysis.replay import (
    AWAITED,
    CHAIN,
    LAUNCHED,
    RELEASE,
    WOKEN,
    Peers,
    Schedule,
    compiled_path,
    replay,
)
from perfledger.analysis.replay_joint import replay_joint
from perfledger.analysis.replay_windows import ReplayWindows
from perfledger.analysis.steps import step_plan
from perfledger.memory import drop_mapped_pages
from perfledger.model.accounts import StepWindow
from perfledger.model.launches import LaunchKeys
from perfledger.model.whatif import (
    MAX_PATH_SPANS,
    NO_CHANGE,
    PathSpan,
    ReplayReport,
    StepGains,
    StepReplay,
    WhatIf,
    communication_parts,
)

# How many critical-path tasks a report names.
TOP_PATH_TASKS: Final = 5


# Rounds of the ranks' replays that pass each rank's new arrivals at its collectives to the
# others (a change on one rank moves the collectives of all of them).
MAX_ARRIVAL_ROUNDS: Final = 8


def replay_profile(
    events: pa.Table,
    change: WhatIf = NO_CHANGE,
    by_rank: Mapping[int, WhatIf] | None = None,
    comm_wait: Int64Array | None = None,
    clocks: Mapping[int, str] | None = None,
) -> ReplayReport:
    """Every step of every rank of ``events`` (the canonical table of a profile), replayed
    unchanged and under ``change`` (``by_rank``: a change of its own for each rank it names,
    such as the advisor's fixes, whose rows are the rank's), with the critical path of each
    predicted step.

    With several ranks, a collective matched across them (:func:`collective_arrivals`) ends
    once its last participant has arrived plus its transfer: the ranks are replayed in one
    joint pass (:func:`perfledger.analysis.replay_joint.replay_joint`), every rank as soon as
    any rank changes; where that walk deadlocks (collectives reached in different orders), in
    rounds, each with the others' arrivals of the round before, until no arrival moves.

    ``comm_wait``: per row of ``events``, how long a communication task waited for its peers
    at its start (:func:`perfledger.analysis.comm_split.comm_split`; None: the collective
    library's own split where the trace has it, else none), what splits the critical path's
    ``communication`` in wait and transfer where no other rank's arrival is known.
    ``clocks``: the clock of each rank known to share one with others
    (:func:`perfledger.analysis.cluster.arrivals.align_arrivals`)."""
    if events.num_rows == 0:
        return ReplayReport((), change)
    ranks = np.unique(columns.int64(events, "rank"))
    mine = by_rank or {}
    if ranks.size == 1:
        only = replay_rank(
            events, mine.get(int(ranks[0]), change), comm_wait=_rank_waits(events, comm_wait)
        )
        return combined_report([only], change)
    rank_of_row = columns.int64(events, "rank")
    tables = [events.filter(pc.equal(events["rank"], int(r))) for r in ranks.tolist()]
    waits = [
        _rank_waits(t, None if comm_wait is None else comm_wait[rank_of_row == r])
        for r, t in zip(ranks.tolist(), tables, strict=True)
    ]
    prepared = [
        prepare_rank(t, comm_wait=w) for t, w in zip(tables, waits, strict=True) if t.num_rows
    ]
    changes = [mine.get(p.rank, change) for p in prepared]
    arrivals = collective_arrivals(prepared, clocks)
    peers = arrivals.peers(None)
    # with a change on any rank every rank is replayed: the others' arrivals move its own
    predicted: Sequence[Schedule | None] = [None] * len(prepared)
    if not all(c.unchanged for c in changes) and arrivals.instances:
        joint = replay_joint([p.graph for p in prepared], changes, arrivals)
        if joint is None:  # the ranks reach their collectives in different orders
            peers = _arrival_rounds(prepared, changes, arrivals)
            joint = [replay(p.graph, changes[i], peers[i]) for i, p in enumerate(prepared)]
        else:
            peers = arrivals.peers(joint)
        predicted = joint
    report = combined_report(
        [rank_report(p, changes[i], peers[i], predicted[i]) for i, p in enumerate(prepared)],
        change,
    )
    return replace(report, unmatched_collectives=arrivals.contradicted + arrivals.unmatched)


def _arrival_rounds(
    prepared: Sequence[RankReplay], changes: Sequence[WhatIf], arrivals: CollectiveArrivals
) -> list[Peers]:
    """The others' arrivals at each rank's collectives after rounds of replays, each with
    the arrivals of the round before, until none moves (at most :data:`MAX_ARRIVAL_ROUNDS`):
    where the joint pass deadlocks."""
    peers = arrivals.peers(None)
    for _ in range(MAX_ARRIVAL_ROUNDS):  # a loop over rounds, while arrivals move
        schedules = [replay(p.graph, changes[i], peers[i]) for i, p in enumerate(prepared)]
        moved = arrivals.peers(schedules)
        if all(np.array_equal(a.shift, b.shift) for a, b in zip(moved, peers, strict=True)):
            break
        peers = moved
    return peers


def _rank_waits(events: pa.Table, given: Int64Array | None) -> Int64Array:
    """Per row of one rank's events, the wait of each communication task at its start:
    ``given``, else the collective library's own split (no link bandwidth to estimate with)."""
    if given is not None:
        return given
    return comm_split(events).wait_by_row(events.num_rows)


def collective_arrivals(
    prepared: Sequence[RankReplay], clocks: Mapping[int, str] | None = None
) -> CollectiveArrivals:
    """The collectives of the prepared ranks matched across them
    (:func:`matched_collectives`; ``clocks`` as there)."""
    return matched_collectives([rank_collectives(p) for p in prepared], clocks)


def combined_report(reports: Sequence[ReplayReport], change: WhatIf = NO_CHANGE) -> ReplayReport:
    """The replays of several ranks (in rank order) as the profile's one report."""
    tops: dict[tuple[str, str], int] = {}
    for report in reports:
        for name, klass, ns in report.top_path_tasks:
            tops[(name, klass)] = tops.get((name, klass), 0) + ns
    return ReplayReport(
        steps=tuple(s for r in reports for s in r.steps),
        change=change,
        dropped_edges=sum(r.dropped_edges for r in reports),
        top_path_tasks=_top(tops),
        unmatched_collectives=sum(r.unmatched_collectives for r in reports),
    )


@dataclass(frozen=True)
class RankReplay:
    """One rank's step graph and its replay unchanged: what every change to that rank is
    replayed against (:func:`prepare_rank`).

    Attributes:
        rank: the rank.
        events: its canonical events.
        graph: its step graph.
        baseline: the graph replayed unchanged.
        baseline_windows: the step windows of the baseline replay, by step.
        measured: the step windows of the trace.
        windows: the step windows of any replay of the graph, by step.
        comm_wait: per node, how long a communication task waited for its peers at its
            start (0 for every other node; None: no wait known, all transfer).
    """

    rank: int
    events: pa.Table
    graph: StepGraph
    baseline: Schedule
    baseline_windows: dict[int, StepWindow]
    measured: tuple[StepWindow, ...]
    windows: ReplayWindows
    comm_wait: Int64Array | None = None


def prepare_rank(
    events: pa.Table,
    measured: Sequence[StepWindow] | None = None,
    comm_wait: Int64Array | None = None,
    launches: LaunchKeys | None = None,
) -> RankReplay:
    """The step graph of one rank's events (not empty) and its baseline replay (``measured``:
    the rank's step windows, if known; ``comm_wait``: per row, how long a communication task
    waited for its peers at its start (``CommSplit.wait_by_row``); ``launches``: the events'
    ``launch_keys``, if found already)."""
    rank = int(events.column("rank")[0].as_py())
    if measured is None:
        measured = step_plan(events).windows
    graph = build_graph(events)
    # the pages of the mapped columns read (a rank task's events) let go after each part:
    # the next reads others (:func:`perfledger.memory.drop_mapped_pages`)
    drop_mapped_pages(events)
    with beside(replay, graph) as replayed:  # the graph alone, beside the rows' windows
        windows = ReplayWindows(events, graph, launches)
        drop_mapped_pages(events)
        baseline = replayed.result()
    node_wait = None
    if comm_wait is not None:
        node_wait = np.where(graph.kind == TASK, comm_wait[graph.row], 0).astype(np.int64)
    return RankReplay(
        rank,
        events,
        graph,
        baseline,
        windows(baseline),
        tuple(measured),
        windows,
        node_wait,
    )


def with_peers(prepared: RankReplay, peers: Peers) -> RankReplay:
    """The prepared rank with its baseline replayed with the others' measured arrivals at
    its collectives (itself when that changes no node's time)."""
    if not peers.node.size:
        return prepared
    baseline = replay(prepared.graph, NO_CHANGE, peers)
    same = np.array_equal(baseline.start, prepared.baseline.start) and np.array_equal(
        baseline.end, prepared.baseline.end
    )
    if same:
        return prepared
    return replace(prepared, baseline=baseline, baseline_windows=prepared.windows(baseline))


def replay_rank(
    events: pa.Table,
    change: WhatIf = NO_CHANGE,
    measured: Sequence[StepWindow] | None = None,
    comm_wait: Int64Array | None = None,
) -> ReplayReport:
    """The steps of one rank's events replayed (``measured``: its step windows, if known;
    ``comm_wait``: as :func:`prepare_rank` takes it)."""
    if events.num_rows == 0:
        return ReplayReport((), change)
    return rank_report(prepare_rank(events, measured, comm_wait), change)


def rank_report(
    prepared: RankReplay,
    change: WhatIf = NO_CHANGE,
    peers: Peers | None = None,
    schedule: Schedule | None = None,
) -> ReplayReport:
    """A prepared rank's steps replayed under ``change``, with their critical paths
    (``peers``: the other ranks' arrival at its collectives; ``schedule``: the rank's replay
    under ``change`` with those arrivals, already made — with the ranks replayed together, a
    rank whose own change is none still moves with the others')."""
    graph, baseline, base_windows = prepared.graph, prepared.baseline, prepared.baseline_windows
    unchanged = change.unchanged and schedule is None
    if unchanged:
        predicted, pred_windows = baseline, base_windows
    else:
        predicted = replay(graph, change, peers) if schedule is None else schedule
        pred_windows = prepared.windows(predicted)
    tops: dict[tuple[str, str], int] = {}
    steps = []
    # without a change the baseline is the prediction: replayed without the others' arrivals
    ends = [w.end_ns for w in pred_windows.values()]
    lanes = _Lanes(prepared.events, graph, predicted, prepared.comm_wait, peers, unchanged, ends)
    drop_mapped_pages(prepared.events)  # the streams of its tasks: read once
    for window in prepared.measured:  # a loop over steps
        base = base_windows.get(window.step)
        pred = pred_windows.get(window.step)
        if base is None or pred is None:
            continue
        bound_by, parts, path_nodes, spans = _critical_path(
            graph, predicted, pred, tops, lanes, window
        )
        steps.append(
            StepReplay(
                rank=prepared.rank,
                step=window.step,
                measured_ns=window.wall_ns,
                baseline_ns=base.wall_ns,
                predicted_ns=pred.wall_ns,
                bound_by_ns=bound_by,
                bound_by_parts_ns=parts,
                path_nodes=path_nodes,
                path_spans=spans,
            )
        )
    return ReplayReport(tuple(steps), change, graph.dropped_edges, _top(tops))


# A replay whose total is longer than its baseline by more than this share is counted.
SLOWER_TOLERANCE: Final = 0.001


def predicted_gains(prepared: RankReplay, change: WhatIf) -> StepGains:
    """What ``change`` gains on a prepared rank's steps, without critical paths (what the
    advisor needs): the steps' baseline and predicted totals, the predicted total kept within
    [0, the baseline's], and whether the replay predicted longer (counted in slower_replays)."""
    return replayed_gains(prepared, None if change.unchanged else replay(prepared.graph, change))


def replayed_gains(prepared: RankReplay, schedule: Schedule | None) -> StepGains:
    """What a replay of a prepared rank (``schedule``; None: its baseline) gains on its
    steps, as :func:`predicted_gains` gives it."""
    pred_windows = prepared.baseline_windows if schedule is None else prepared.windows(schedule)
    steps = baseline_ns = predicted_ns = 0
    for window in prepared.measured:  # a loop over steps
        base = prepared.baseline_windows.get(window.step)
        pred = pred_windows.get(window.step)
        if base is None or pred is None:
            continue
        steps += 1
        baseline_ns += base.wall_ns
        predicted_ns += pred.wall_ns
    slower = int(predicted_ns > baseline_ns * (1 + SLOWER_TOLERANCE))
    return StepGains(steps, baseline_ns, min(max(predicted_ns, 0), baseline_ns), slower)


def _critical_path(
    graph: StepGraph,
    schedule: Schedule,
    window: StepWindow,
    tops: dict[tuple[str, str], int],
    lanes: _Lanes,
    measured: StepWindow,
) -> tuple[dict[str, int], dict[str, dict[str, int]], int, tuple[PathSpan, ...]]:
    """The time of the step's critical path by class, the parts of its classes
    (``bound_by_parts``), how many nodes it holds, and its pieces laid on the measured trace
    (:class:`PathSpan`).

    The path is followed back node by node (:meth:`_Lanes.path`); its pieces — each node's
    own time and the edge that set its start, in the order walked — are then worked out as
    columns: the walk's cursor is the running minimum of the pieces' points, clamped to the
    window."""
    lo, hi = window.start_ns, window.end_ns
    first = lanes.last_node(hi)
    if first < 0:
        pieces = _Walked.unexplained(lo, hi)
        path = np.zeros(0, dtype=np.int64)
    else:
        path, stopped = lanes.path(first, lo)
        pieces = lanes.pieces(first, path, stopped, lo, hi)
    by_class = np.zeros(len(CLASSES), dtype=np.int64)
    np.add.at(by_class, pieces.category, pieces.length)
    lanes.add_tops(tops, pieces)
    waited = int(pieces.length[pieces.part == WAIT_PART].sum())
    bound_by = {name: int(by_class[code]) for code, name in enumerate(CLASSES)}
    parts = communication_parts(waited, int(by_class[CLASS_CODE[COMMUNICATION]]))
    shown = pieces.on_trace(lanes.labels, lanes.lanes)
    return bound_by, parts, int(path.size), _measured_spans(shown, measured)


# Labels of the pieces that are not a node's own time, first in a path's label vocabulary.
_HOST_WORK, _STREAM_GAP, _DATA_LOADER, _LAUNCH_LATENCY, _WAKE_UP, _EVENT_WAIT = range(6)
_SYNC_RETURN, _UNEXPLAINED = 6, 7
_EDGE_LABELS: Final = (
    "host work",
    "stream gap",
    "data loader",
    "launch latency",
    "thread wake-up",
    "event wait",
    "sync return",
    "unexplained",
)


@dataclass(frozen=True)
class _Walked:
    """A path's pieces in the order walked (back from the step's end), as columns: the
    replayed ``point`` and ``cursor`` of each ([point, cursor), of ``length`` cursor - point,
    which may be 0), class, label and lane codes, part code, its shift to measured time, and
    the task (node) whose own time it is (-1: not a task's)."""

    point: Int64Array
    cursor: Int64Array
    category: Int64Array
    label: Int64Array
    lane: Int64Array
    part: Int64Array
    shift: Int64Array
    task: Int64Array

    @property
    def length(self) -> Int64Array:
        return self.cursor - self.point

    @staticmethod
    def unexplained(lo: int, hi: int) -> _Walked:
        """A step no node ends in: before a task that nothing explains."""
        if hi <= lo:
            return _Walked(*(np.zeros(0, dtype=np.int64) for _ in range(8)))

        def one(value: int) -> Int64Array:
            return np.array([value], dtype=np.int64)

        return _Walked(
            one(lo),
            one(hi),
            one(CLASS_CODE[OTHER]),
            one(_UNEXPLAINED),
            one(0),
            one(NO_PART),
            one(0),
            one(-1),
        )

    def on_trace(self, labels: Sequence[str], lanes: Sequence[str]) -> Pieces:
        """The pieces that hold time, moved to measured time, in time order (unclipped)."""
        held = np.flatnonzero(self.cursor > self.point)[::-1]
        shift = self.shift[held]
        return Pieces(
            self.point[held] + shift,
            self.cursor[held] + shift,
            self.category[held],
            self.label[held],
            self.lane[held],
            self.part[held],
            CLASSES,
            labels,
            lanes,
        )


class _Lanes:
    """A schedule's nodes for the walks along the paths: times, links, classes, label and
    lane codes (``labels``, ``lanes``: their texts), each node's shift from replayed to
    measured time, and where a collective's wait for its peers ends (``comm_wait``: each
    node's observed wait; ``peers``: the other ranks' arrivals, which ``schedule`` was
    replayed with unless ``unchanged``)."""

    def __init__(
        self,
        events: pa.Table,
        graph: StepGraph,
        schedule: Schedule,
        comm_wait: Int64Array | None = None,
        peers: Peers | None = None,
        unchanged: bool = True,
        step_ends: Sequence[int] = (),
    ) -> None:
        rows = graph.row
        is_task = graph.kind == TASK
        task_rows = rows[is_task]
        device = columns.int64_at(events, "device", task_rows)
        stream = columns.int64_at(events, "stream", task_rows)
        one_device = np.unique(device).size <= 1
        # a node's lane: its stream (a task), its thread (a host node), else none ("");
        # codes and labels of 4 bytes a node, the rest of a node's columns read from the
        # graph and the schedule as the paths need them: what the walks keep is a few MB
        texts = {"": 0}
        self.lane = np.zeros(graph.size, dtype=np.int32)
        if is_task.any():
            pairs, at = unique_pairs(device, stream)
            codes = [
                texts.setdefault(
                    f"stream {s}" if one_device else f"device {d} stream {s}", len(texts)
                )
                for d, s in pairs.tolist()  # a loop over streams
            ]
            self.lane[is_task] = np.asarray(codes, dtype=np.int32)[at]
        del task_rows, device, stream
        threaded = ~is_task & (graph.thread >= 0)
        if threaded.any():
            codes = [texts.setdefault(f"thread {t}", len(texts)) for _, t in graph.thread_keys]
            self.lane[threaded] = np.asarray(codes, dtype=np.int32)[graph.thread[threaded]]
        self.lanes = list(texts)
        labels = {label: code for code, label in enumerate(_EDGE_LABELS)}
        # each distinct name labelled once, in the order the nodes first give them; then
        # every node's label looked up by its name's code
        label_of = np.zeros(len(graph.names), dtype=np.int32)
        for code in columns.first_seen(graph.name_code).tolist():
            label_of[code] = labels.setdefault(str(graph.names[code]), len(labels))
        self.label = label_of[graph.name_code]
        self.labels = list(labels)
        self.graph = graph
        self.start_ns, self.end_ns = schedule.start, schedule.end
        self.via_node, self.how_node = schedule.via, schedule.how
        # item by item: the walk along each path visits one node at a time (views of the
        # schedule's arrays read as fast as C arrays, not int objects)
        self.start = _items(schedule.start)
        self.end = _items(schedule.end)
        self.via = _items(schedule.via)
        self.how = schedule.how.astype(np.uint8).tobytes()
        self.is_task = is_task
        self.node_class = graph.node_class
        self.chain_class = graph.chain_class
        self._waits = _WaitEnds(graph, schedule, comm_wait, peers, unchanged)
        self._last = _last_nodes(graph.kind, schedule.end, step_ends)

    def last_node(self, hi: int) -> int:
        """The node a step ending at ``hi`` ends with (its path starts there), -1 for none:
        of the nodes that end last by ``hi``, the last task, else the last of them."""
        return self._last[hi]

    def shift(self, nodes: Int64Array) -> Int64Array:
        """Each node's shift from replayed to measured time, at its start."""
        shift: Int64Array = self.graph.start[nodes] - self.start_ns[nodes]
        return shift

    def shift_end(self, nodes: Int64Array) -> Int64Array:
        """Each node's shift from replayed to measured time, at its end."""
        graph = self.graph
        shift: Int64Array = graph.start[nodes] + graph.dur[nodes] - self.end_ns[nodes]
        return shift

    def path(self, v: int, lo: int) -> tuple[Int64Array, bool]:
        """The nodes of the path back from ``v`` (which ends the step) until the step's
        start ``lo``, and whether the walk stopped at the last one's own time (at ``lo``,
        or a node whose start nothing set) rather than on the edge before it."""
        start, end, via, how = self.start, self.end, self.via, self.how
        walked = compiled_path(start, end, via, how, v, lo)
        if walked is not None:
            return np.frombuffer(walked[0], dtype=np.int64), bool(walked[1])
        cursor = max(end[v], lo)
        launched = False  # reached at a launch call's start: its own time is not on the path
        nodes: list[int] = []
        while cursor > lo:  # a walk along the path, not over every event
            nodes.append(v)
            if not launched and start[v] < cursor:
                cursor = max(start[v], lo)
            how_v = how[v]
            if cursor <= lo or how_v == RELEASE:
                return np.asarray(nodes, dtype=np.int64), True
            v = via[v]
            launched = how_v in (LAUNCHED, WOKEN)
            point = start[v] if launched else end[v]
            if point < cursor:
                cursor = max(point, lo)
        return np.asarray(nodes, dtype=np.int64), False

    def pieces(self, first: int, path: Int64Array, stopped: bool, lo: int, hi: int) -> _Walked:
        """The pieces of the path ``path`` (from :meth:`path`) in the order walked: the host's
        time after ``first`` up to the step's end; per node, a collective's transfer, the
        node's own time (its wait, for a collective), then the edge that set its start; the
        host's time before the first node of a thread; the time nothing explains."""
        m = path.size
        how = self.how_node[path].astype(np.int64)
        via = self.via_node[path]
        task = self.is_task[path]
        klass = self.node_class[path].astype(np.int64)
        chain_class = self.chain_class[path].astype(np.int64)
        lane = self.lane[path].astype(np.int64)
        shift = self.shift(path)
        own = np.ones(m, dtype=bool)  # reached at a launch or waking call's start: not on it
        own[1:] = (how[:-1] == LAUNCHED) | (how[:-1] == WOKEN)
        own[1:] = ~own[1:]
        comm = own & (klass == CLASS_CODE[COMMUNICATION])
        edge = np.ones(m, dtype=bool)
        if stopped and m:
            edge[-1] = False
        # per node three slots: its transfer, its own time, its edge
        slot_point = np.zeros((m, 3), dtype=np.int64)
        slot_point[:, 0] = np.maximum(self._waits(path), lo)
        slot_point[:, 1] = self.start_ns[path]
        at_start = (how == LAUNCHED) | (how == WOKEN)
        linked = np.where(via >= 0, via, 0)
        slot_point[:, 2] = np.where(at_start, self.start_ns[linked], self.end_ns[linked])
        chain = how == CHAIN
        edge_class = np.select(
            [chain, how == WOKEN, (how == LAUNCHED) | (how == AWAITED)],
            [chain_class, CLASS_CODE[HOST], CLASS_CODE[LAUNCH_OVERHEAD]],
            CLASS_CODE[SYNC],
        )
        chain_label = np.where(
            task,
            _STREAM_GAP,
            np.where(chain_class == CLASS_CODE[DATALOADER], _DATA_LOADER, _HOST_WORK),
        )
        edge_label = np.select(
            [chain, how == LAUNCHED, how == WOKEN, how == AWAITED],
            [chain_label, _LAUNCH_LATENCY, _WAKE_UP, _EVENT_WAIT],
            _SYNC_RETURN,
        )
        edge_lane = np.where(chain | (how == AWAITED), lane, 0)
        slot_category = np.stack([klass, klass, edge_class], axis=1)
        label = self.label[path].astype(np.int64)
        slot_label = np.stack([label, label, edge_label], axis=1)
        slot_lane = np.stack([lane, lane, edge_lane], axis=1)
        slot_part = np.zeros((m, 3), dtype=np.int64)
        slot_part[:, 1] = np.where(comm, WAIT_PART, NO_PART)
        slot_task = np.full((m, 3), -1, dtype=np.int64)
        slot_task[:, :2] = np.where(own & task, path, -1)[:, None]
        used = np.stack([comm, own, edge], axis=1).reshape(-1)
        last = path[-1:] if stopped and m and not task[-1] else path[:0]

        def column(head: object, slots: Int64Array, tail: object) -> Int64Array:
            # the host's time after ``first``, the slots used, the host's time before
            # ``last`` (the first node of a host thread: the thread ran something else)
            return np.concatenate(
                [
                    np.asarray([head], dtype=np.int64).reshape(-1),
                    slots.reshape(-1)[used].astype(np.int64),
                    np.broadcast_to(np.asarray(tail, dtype=np.int64), last.shape),
                ]
            )

        point = column(self.end_ns[first], slot_point, lo)
        cursor_after = np.maximum(np.minimum.accumulate(np.concatenate([[hi], point])), lo)
        walked = _Walked(
            cursor_after[1:],
            cursor_after[:-1],
            column(CLASS_CODE[HOST], slot_category, CLASS_CODE[HOST]),
            column(_HOST_WORK, slot_label, _HOST_WORK),
            column(0 if self.is_task[first] else self.lane[first], slot_lane, self.lane[last]),
            column(NO_PART, slot_part, NO_PART),
            column(self.shift_end(np.asarray([first]))[0], np.repeat(shift, 3), self.shift(last)),
            column(-1, slot_task, -1),
        )
        # a collective's transfer is a part only where it waited before it
        transfer = np.flatnonzero(walked.part == WAIT_PART) - 1
        walked.part[transfer] = np.where(walked.length[transfer + 1] > 0, TRANSFER_PART, NO_PART)
        if walked.point[-1] > lo:  # before a task that nothing explains
            tail = (lo, walked.point[-1], CLASS_CODE[OTHER], _UNEXPLAINED, 0, NO_PART, 0, -1)
            return _Walked(
                *(
                    np.append(getattr(walked, name), value)
                    for name, value in zip(_Walked.__dataclass_fields__, tail, strict=True)
                )
            )
        return walked

    def add_tops(self, tops: dict[tuple[str, str], int], pieces: _Walked) -> None:
        """The time the tasks' own pieces hold, added to ``tops`` by (name, class)."""
        mine = pieces.task >= 0
        if not mine.any():
            return
        node = pieces.task[mine]
        key = self.label[node].astype(np.int64) * len(CLASSES) + self.node_class[node].astype(
            np.int64
        )
        keys, at = np.unique(key, return_inverse=True)
        held = np.zeros(keys.size, dtype=np.int64)
        np.add.at(held, at.reshape(-1), pieces.length[mine])
        for k, ns in zip(keys.tolist(), held.tolist(), strict=True):  # task names on the path
            name = (self.labels[k // len(CLASSES)], CLASSES[k % len(CLASSES)])
            tops[name] = tops.get(name, 0) + ns


class _WaitEnds:
    """Per node, the replayed time its wait for its peers ends (its start for a node that
    does not wait): the observed wait — the others' last arrival where ranks are matched,
    else ``comm_wait`` — scaled as the task was; in a replay with the others' arrivals, until
    the last of them arrives (:func:`perfledger.analysis.replay.replay`). Worked out for the
    nodes asked for (those of a path), not kept for every node."""

    def __init__(
        self,
        graph: StepGraph,
        schedule: Schedule,
        comm_wait: Int64Array | None,
        peers: Peers | None,
        unchanged: bool,
    ) -> None:
        self.graph, self.schedule, self.comm_wait = graph, schedule, comm_wait
        self.unchanged = unchanged
        self.peers = peers if peers is not None and peers.node.size > 0 else None
        if self.peers is not None:
            # of a node given several times, the last one counts (as assigned in order)
            order = np.argsort(self.peers.node, kind="stable")
            nodes = self.peers.node[order]
            last = np.ones(nodes.size, dtype=bool)
            last[:-1] = nodes[1:] != nodes[:-1]
            self.peer_nodes, self.peer_at = nodes[last], order[last]

    def __call__(self, nodes: Int64Array) -> Int64Array:
        graph, schedule, peers = self.graph, self.schedule, self.peers
        start = schedule.start[nodes]
        span = schedule.end[nodes] - start
        dur = graph.dur[nodes]
        observed = (
            np.zeros(nodes.size, np.int64) if self.comm_wait is None else self.comm_wait[nodes]
        )
        if peers is not None:
            at = np.clip(np.searchsorted(self.peer_nodes, nodes), 0, self.peer_nodes.size - 1)
            mine = np.flatnonzero(self.peer_nodes[at] == nodes)
            peer = self.peer_at[at[mine]]
            observed = observed.copy()
            observed[mine] = np.clip(peers.wait[peer], 0, dur[mine])
        wait = np.rint(observed * (span / np.maximum(dur, 1))).astype(np.int64)
        if peers is not None and not self.unchanged:
            ready = graph.start[nodes[mine]] + np.minimum(peers.wait[peer], dur[mine])
            wait[mine] = ready + peers.shift[peer] - start[mine]
        return np.asarray(start + np.clip(wait, 0, np.maximum(span, 0)), dtype=np.int64)


def _last_nodes(kind: npt.NDArray[np.int8], end: Int64Array, his: Sequence[int]) -> dict[int, int]:
    """For each step end of ``his``, the node the step ends with (-1: none ends by then):
    of the nodes whose replayed end is the latest by the step's end, the last task (in node
    order), else the last of them. The nodes sorted by end once, for every step, and let go."""
    by_end = np.argsort(end, kind="stable")  # by end, then node
    sorted_end = end[by_end]
    found: dict[int, int] = {}
    for hi in dict.fromkeys(his):  # a loop over steps
        ending = int(np.searchsorted(sorted_end, hi, side="right"))
        if not ending:
            found[hi] = -1
            continue
        tie = int(np.searchsorted(sorted_end, sorted_end[ending - 1], side="left"))
        last = by_end[tie:ending]
        # the step ends with its last task when one ends there
        tasks = last[kind[last] == TASK]
        found[hi] = int(tasks[-1] if tasks.size else last[-1])
    return found


def _items(column: Int64Array) -> memoryview:
    """An int64 column read item by item as fast as a C array, without a copy of it."""
    return np.ascontiguousarray(column, dtype=np.int64).data.cast("B").cast("q")


def _measured_spans(pieces: Pieces, measured: StepWindow) -> tuple[PathSpan, ...]:
    """The path's pieces in measured time (in time order) clipped to the measured step
    window without overlap — each starts no earlier than the one kept before it ends —,
    touching pieces of the same work merged, at most :data:`MAX_PATH_SPANS`."""
    floor, ceiling = measured.start_ns, measured.end_ns
    end = np.minimum(pieces.end, ceiling)
    # a piece that ends by its own start once clipped is never kept; of the others, each
    # starts after the latest end before it (the earlier ones left out ended before that)
    rows = np.flatnonzero(end > pieces.start)
    end = end[rows]
    before = np.maximum.accumulate(np.concatenate([[floor], end[:-1]]))
    start = np.maximum(pieces.start[rows], before)
    kept = end > start
    rows, start, end = rows[kept], start[kept], end[kept]
    if rows.size == 0:
        return ()  # nothing of the path inside the measured step
    kept_pieces = pieces.take(rows)
    same = (
        (end[:-1] == start[1:])
        & (kept_pieces.category[:-1] == kept_pieces.category[1:])
        & (kept_pieces.label[:-1] == kept_pieces.label[1:])
        & (kept_pieces.lane[:-1] == kept_pieces.lane[1:])
        & (kept_pieces.part[:-1] == kept_pieces.part[1:])
    )
    first = np.flatnonzero(np.concatenate([[True], ~same]))
    last = np.append(first[1:], rows.size) - 1
    merged = kept_pieces.take(first)
    merged = replace(merged, start=start[first], end=end[last])
    return capped_spans(merged, MAX_PATH_SPANS)


def _capped(spans: Sequence[PathSpan], cap: int) -> tuple[PathSpan, ...]:
    """At most ``cap`` of adjacent ``spans`` (:func:`capped_spans`)."""
    return capped_spans(pieces_of_spans(spans), cap)


def _top(tops: dict[tuple[str, str], int]) -> tuple[tuple[str, str, int], ...]:
    ranked = sorted(tops.items(), key=lambda item: (-item[1], item[0]))
    return tuple((name, klass, ns) for (name, klass), ns in ranked[:TOP_PATH_TASKS])
