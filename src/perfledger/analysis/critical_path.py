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
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.comm_split import comm_split
from perfledger.analysis.graph import (
    CLASS_CODE,
    CLASSES,
    COMMUNICATION,
    DATALOADER,
    HOST,
    LAUNCH_OVERHEAD,
    OTHER,
    SYNC,
    TASK,
    StepGraph,
    build_graph,
)
from perfledger.analysis.intervals import Int64Array
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
    replay,
)
from perfledger.analysis.replay_joint import replay_joint
from perfledger.analysis.replay_windows import ReplayWindows
from perfledger.analysis.steps import step_plan
from perfledger.model.accounts import StepWindow
from perfledger.model.whatif import (
    MAX_PATH_SPANS,
    NO_CHANGE,
    TRANSFER,
    WAIT,
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
    ``communication`` in wait and transfer where no other rank's arrival is known."""
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
    arrivals = collective_arrivals(prepared)
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


def collective_arrivals(prepared: Sequence[RankReplay]) -> CollectiveArrivals:
    """The collectives of the prepared ranks matched across them
    (:func:`matched_collectives`)."""
    return matched_collectives([rank_collectives(p) for p in prepared])


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
) -> RankReplay:
    """The step graph of one rank's events (not empty) and its baseline replay
    (``measured``: the rank's step windows, if known; ``comm_wait``: per row of ``events``,
    how long a communication task waited for its peers at its start, as
    :meth:`perfledger.model.comm.CommSplit.wait_by_row` gives it)."""
    rank = int(events.column("rank")[0].as_py())
    if measured is None:
        measured = step_plan(events).windows
    graph = build_graph(events)
    baseline = replay(graph)
    windows = ReplayWindows(events, graph)
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
    lanes = _Lanes(prepared.events, graph, predicted, prepared.comm_wait, peers, unchanged)
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
    (:class:`PathSpan`)."""
    lo, hi = window.start_ns, window.end_ns
    by_class = [0] * len(CLASSES)
    # plain lists: the walk below visits one node at a time
    start, end, via, how = lanes.start, lanes.end, lanes.via, lanes.how
    kind, names, lane_of, shift = lanes.kind, lanes.name, lanes.lane, lanes.shift
    host, other, dataloader = CLASS_CODE[HOST], CLASS_CODE[OTHER], CLASS_CODE[DATALOADER]
    communication, wait_end = CLASS_CODE[COMMUNICATION], lanes.wait_end
    waited = 0  # of the communication on the path, the time its collectives waited for peers
    # each piece: replayed [point, cursor), class, label, lane, its shift to measured time,
    # the part of its collective (``wait``, ``transfer``; None: not a part)
    pieces: list[tuple[int, int, int, str, str, int, str | None]] = []

    def add(
        point: int, klass: int, label: str, lane: str, moved: int, part: str | None = None
    ) -> None:
        by_class[klass] += cursor - point
        if cursor > point:
            pieces.append((point, cursor, klass, label, lane, moved, part))

    # the nodes ending last by the step's end (``by_end``: nodes by end, then index)
    ending = int(np.searchsorted(lanes.sorted_end, hi, side="right"))
    cursor = hi
    nodes = 0
    if ending:
        tie = int(np.searchsorted(lanes.sorted_end, lanes.sorted_end[ending - 1], side="left"))
        last = lanes.by_end[tie:ending]
        # the step ends with its last task when one ends there
        tasks = last[graph.kind[last] == TASK]
        v = int(tasks[-1] if tasks.size else last[-1])
        point = max(end[v], lo)
        # the window's end beyond every node: the host's step annotation ends it
        add(point, host, "host work", lanes.host_lane[v], lanes.shift_end[v])
        cursor = point
        launched = False  # reached at a launch call's start: its own time is not on the path
        while cursor > lo:  # a walk along the path, not over every event
            nodes += 1
            if not launched:
                point = max(min(start[v], cursor), lo)
                klass = lanes.node_class[v]
                if kind[v] == TASK:
                    key = (names[v], CLASSES[klass])
                    tops[key] = tops.get(key, 0) + cursor - point
                # a collective waits for its peers from its start, then transfers: two pieces
                transfer = min(max(wait_end[v], point), cursor) if klass == communication else point
                if transfer > point:
                    waited += transfer - point
                    add(transfer, klass, names[v], lane_of[v], shift[v], TRANSFER)
                    cursor = transfer
                    add(point, klass, names[v], lane_of[v], shift[v], WAIT)
                else:
                    add(point, klass, names[v], lane_of[v], shift[v])
                cursor = point
            how_v = how[v]
            if cursor <= lo or how_v == RELEASE:
                # before the first node of a host thread the thread ran something else
                if kind[v] != TASK:
                    add(lo, host, "host work", lane_of[v], shift[v])
                    cursor = lo
                break
            u = via[v]
            if how_v == CHAIN:
                point, klass = end[u], lanes.chain_class[v]
                label = (
                    "stream gap"
                    if kind[v] == TASK
                    else "data loader"
                    if klass == dataloader
                    else "host work"
                )
                lane = lane_of[v]
            elif how_v == LAUNCHED:
                point, klass, label, lane = (
                    start[u],
                    CLASS_CODE[LAUNCH_OVERHEAD],
                    "launch latency",
                    "",
                )
            elif how_v == WOKEN:
                point, klass, label, lane = start[u], host, "thread wake-up", ""
            elif how_v == AWAITED:
                point, klass, label, lane = (
                    end[u],
                    CLASS_CODE[LAUNCH_OVERHEAD],
                    "event wait",
                    lane_of[v],
                )
            else:
                point, klass, label, lane = end[u], CLASS_CODE[SYNC], "sync return", ""
            point = max(min(point, cursor), lo)
            add(point, klass, label, lane, shift[v])
            cursor = point
            # reached at the start of a launch call or of a waking call: its time is not on it
            launched = how_v in (LAUNCHED, WOKEN)
            v = u
    if cursor > lo:  # before a task that nothing explains
        add(lo, other, "unexplained", "", 0)
    bound_by = {name: by_class[code] for code, name in enumerate(CLASSES)}
    parts = communication_parts(waited, by_class[communication])
    return bound_by, parts, nodes, _measured_spans(pieces, measured)


class _Lanes:
    """A schedule's nodes as plain lists for the walks along the paths: times, links, classes,
    names, where each ran (its lane), its shift from replayed to measured time, and where a
    collective's wait for its peers ends (``comm_wait``: each node's observed wait; ``peers``:
    the other ranks' arrivals, which ``schedule`` was replayed with unless ``unchanged``)."""

    def __init__(
        self,
        events: pa.Table,
        graph: StepGraph,
        schedule: Schedule,
        comm_wait: Int64Array | None = None,
        peers: Peers | None = None,
        unchanged: bool = True,
    ) -> None:
        rows = graph.row
        device = columns.int64(events, "device")[rows]
        stream = columns.int64(events, "stream")[rows]
        is_task = graph.kind == TASK
        one_device = np.unique(device[is_task]).size <= 1
        threads = [f"thread {tid}" for _, tid in graph.thread_keys]
        self.lane = [
            (f"stream {s}" if one_device else f"device {d} stream {s}")
            if task
            else (threads[t] if t >= 0 else "")
            for task, d, s, t in zip(
                is_task.tolist(),
                device.tolist(),
                stream.tolist(),
                graph.thread.tolist(),
                strict=True,
            )
        ]
        self.host_lane = [
            lane if not task else "" for lane, task in zip(self.lane, is_task.tolist(), strict=True)
        ]
        self.start = schedule.start.tolist()
        self.end = schedule.end.tolist()
        self.via = schedule.via.tolist()
        self.how = schedule.how.tolist()
        self.kind = graph.kind.tolist()
        self.node_class = graph.node_class.tolist()
        self.chain_class = graph.chain_class.tolist()
        self.name = [str(n) for n in graph.name.tolist()]
        self.shift = (graph.start - schedule.start).tolist()
        self.shift_end = (graph.end - schedule.end).tolist()
        self.wait_end = _wait_ends(graph, schedule, comm_wait, peers, unchanged).tolist()
        # the nodes by replayed end (then index), to find where each step's path begins
        self.by_end = np.lexsort((np.arange(graph.size), schedule.end))
        self.sorted_end = schedule.end[self.by_end]


def _wait_ends(
    graph: StepGraph,
    schedule: Schedule,
    comm_wait: Int64Array | None,
    peers: Peers | None,
    unchanged: bool,
) -> Int64Array:
    """Per node, the replayed time its wait for its peers ends (its start for a node that
    does not wait): the observed wait — the others' last arrival where ranks are matched,
    else ``comm_wait`` — scaled as the task was; in a replay with the others' arrivals, until
    the last of them arrives (:func:`perfledger.analysis.replay.replay`)."""
    start, span = schedule.start, schedule.end - schedule.start
    observed = np.zeros(graph.size, np.int64) if comm_wait is None else comm_wait.copy()
    matched = peers is not None and peers.node.size > 0
    if peers is not None and matched:
        observed[peers.node] = np.clip(peers.wait, 0, graph.dur[peers.node])
    wait = np.rint(observed * (span / np.maximum(graph.dur, 1))).astype(np.int64)
    if peers is not None and matched and not unchanged:
        node = peers.node
        ready = graph.start[node] + np.minimum(peers.wait, graph.dur[node]) + peers.shift
        wait[node] = ready - start[node]
    return np.asarray(start + np.clip(wait, 0, np.maximum(span, 0)), dtype=np.int64)


def _measured_spans(
    pieces: list[tuple[int, int, int, str, str, int, str | None]], measured: StepWindow
) -> tuple[PathSpan, ...]:
    """The path's pieces (walked backwards, in replayed time) in measured time: each moved
    by its node's shift, clipped to the measured step window, in time order without overlap,
    touching pieces of the same work merged, at most :data:`MAX_PATH_SPANS`."""
    merged: list[list[Any]] = []  # [start, end, class code, label, lane, part]
    floor, ceiling = measured.start_ns, measured.end_ns
    previous: list[Any] | None = None
    for lo, hi, klass, label, lane, shift, part in reversed(pieces):
        a = lo + shift if lo + shift > floor else floor
        b = hi + shift if hi + shift < ceiling else ceiling
        if b <= a:
            continue
        if (
            previous is not None
            and previous[1] == a
            and previous[2] == klass
            and previous[3] == label
            and previous[4] == lane
            and previous[5] == part
        ):
            previous[1] = b
        else:
            previous = [a, b, klass, label, lane, part]
            merged.append(previous)
        floor = b
    spans = [PathSpan(a, b, CLASSES[k], label, lane, part) for a, b, k, label, lane, part in merged]
    return _capped(spans, MAX_PATH_SPANS)


def _capped(spans: list[PathSpan], cap: int) -> tuple[PathSpan, ...]:
    """At most ``cap`` spans: the pieces shorter than the smallest length that gets there are
    merged with their short neighbours, each run named by its class with the most time and
    its longest piece; the longer pieces stay as they are (where too many pieces share the
    longest length, consecutive groups of them are merged)."""
    if len(spans) <= cap:
        return tuple(spans)
    length = np.array([s.end_ns - s.start_ns for s in spans], dtype=np.int64)

    def count(threshold: int) -> int:
        short = length < threshold
        runs = int(short[0]) + int((short[1:] & ~short[:-1]).sum())
        return int((~short).sum()) + runs

    candidates = np.unique(length)
    low, high = 0, candidates.size - 1  # the smallest threshold whose count fits
    while low < high:
        middle = (low + high) // 2
        if count(int(candidates[middle])) <= cap:
            high = middle
        else:
            low = middle + 1
    short = length < int(candidates[low])
    merged: list[PathSpan] = []
    run: list[PathSpan] = []
    for span, is_short in zip(spans, short.tolist(), strict=True):  # the path's pieces
        if is_short:
            run.append(span)
            continue
        if run:
            merged.append(_merged(run))
            run = []
        merged.append(span)
    if run:
        merged.append(_merged(run))
    if len(merged) > cap:  # long pieces of one length too many to keep: merged in groups
        size = -(-len(merged) // cap)
        merged = [_merged(merged[i : i + size]) for i in range(0, len(merged), size)]
    return tuple(merged)


def _merged(run: list[PathSpan]) -> PathSpan:
    """One span for adjacent pieces of a path."""
    if len(run) == 1:
        return run[0]
    by_class: dict[str, int] = {}
    for m in run:
        by_class[m.category] = by_class.get(m.category, 0) + m.end_ns - m.start_ns
    category = max(by_class.items(), key=lambda item: (item[1], item[0]))[0]
    longest = max(run, key=lambda m: m.end_ns - m.start_ns)
    lanes = {m.lane for m in run}
    return PathSpan(
        run[0].start_ns,
        run[-1].end_ns,
        category,
        f"{len(run)} pieces: {longest.shown}",
        lanes.pop() if len(lanes) == 1 else "",
    )


def _top(tops: dict[tuple[str, str], int]) -> tuple[tuple[str, str, int], ...]:
    ranked = sorted(tops.items(), key=lambda item: (-item[1], item[0]))
    return tuple((name, klass, ns) for (name, klass), ns in ranked[:TOP_PATH_TASKS])
