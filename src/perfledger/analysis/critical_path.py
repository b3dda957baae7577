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

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.graph import (
    CLASS_CODE,
    CLASSES,
    HOST,
    LAUNCH_OVERHEAD,
    OTHER,
    SYNC,
    TASK,
    StepGraph,
    build_graph,
)
from perfledger.analysis.replay import CHAIN, LAUNCHED, RELEASE, Schedule, replay, replayed_events
from perfledger.analysis.steps import step_plan
from perfledger.model.accounts import StepWindow
from perfledger.model.whatif import NO_CHANGE, ReplayReport, StepReplay, WhatIf

# How many critical-path tasks a report names.
TOP_PATH_TASKS = 5


def replay_profile(events: pa.Table, change: WhatIf = NO_CHANGE) -> ReplayReport:
    """Every step of every rank of ``events`` (the canonical table of a profile), replayed
    unchanged and under ``change``, with the critical path of each predicted step."""
    if events.num_rows == 0:
        return ReplayReport((), change)
    ranks = np.unique(columns.int64(events, "rank"))
    reports = [
        replay_rank(
            events.filter(pc.equal(events["rank"], int(r))) if ranks.size > 1 else events, change
        )
        for r in ranks.tolist()  # a loop over ranks
    ]
    tops: dict[tuple[str, str], int] = {}
    for report in reports:
        for name, klass, ns in report.top_path_tasks:
            tops[(name, klass)] = tops.get((name, klass), 0) + ns
    return ReplayReport(
        steps=tuple(s for r in reports for s in r.steps),
        change=change,
        dropped_edges=sum(r.dropped_edges for r in reports),
        top_path_tasks=_top(tops),
    )


def replay_rank(
    events: pa.Table,
    change: WhatIf = NO_CHANGE,
    measured: Sequence[StepWindow] | None = None,
) -> ReplayReport:
    """The steps of one rank's events replayed (``measured``: its step windows, if known)."""
    if events.num_rows == 0:
        return ReplayReport((), change)
    rank = int(events.column("rank")[0].as_py())
    if measured is None:
        measured = step_plan(events).windows
    graph = build_graph(events)
    baseline = replay(graph)
    base_windows = _windows(events, graph, baseline)
    if change.unchanged:
        predicted, pred_windows = baseline, base_windows
    else:
        predicted = replay(graph, change)
        pred_windows = _windows(events, graph, predicted)
    tops: dict[tuple[str, str], int] = {}
    steps = []
    for window in measured:  # a loop over steps
        base = base_windows.get(window.step)
        pred = pred_windows.get(window.step)
        if base is None or pred is None:
            continue
        bound_by, path_nodes = _critical_path(graph, predicted, pred, tops)
        steps.append(
            StepReplay(
                rank=rank,
                step=window.step,
                measured_ns=window.wall_ns,
                baseline_ns=base.wall_ns,
                predicted_ns=pred.wall_ns,
                bound_by_ns=bound_by,
                path_nodes=path_nodes,
            )
        )
    return ReplayReport(tuple(steps), change, graph.dropped_edges, _top(tops))


def _windows(events: pa.Table, graph: StepGraph, schedule: Schedule) -> dict[int, StepWindow]:
    table = replayed_events(events, graph, schedule)
    return {w.step: w for w in step_plan(table).windows}


def _critical_path(
    graph: StepGraph,
    schedule: Schedule,
    window: StepWindow,
    tops: dict[tuple[str, str], int],
) -> tuple[dict[str, int], int]:
    """The time of the step's critical path by class, and how many nodes it holds."""
    lo, hi = window.start_ns, window.end_ns
    by_class = np.zeros(len(CLASSES), dtype=np.int64)
    start, end, via, how = schedule.start, schedule.end, schedule.via, schedule.how
    candidates = np.flatnonzero(end <= hi)
    cursor = hi
    nodes = 0
    if candidates.size:
        last = candidates[end[candidates] == end[candidates].max()]
        # the step ends with its last task when one ends there
        tasks = last[graph.kind[last] == TASK]
        v = int(tasks[-1] if tasks.size else last[-1])
        point = max(int(end[v]), lo)
        # the window's end beyond every node: the host's step annotation ends it
        by_class[CLASS_CODE[HOST]] += cursor - point
        cursor = point
        launched = False  # reached at a launch call's start: its own time is not on the path
        while cursor > lo:  # a walk along the path, not over every event
            nodes += 1
            if not launched:
                point = max(min(int(start[v]), cursor), lo)
                klass = int(graph.node_class[v])
                by_class[klass] += cursor - point
                if graph.kind[v] == TASK:
                    key = (str(graph.name[v]), CLASSES[klass])
                    tops[key] = tops.get(key, 0) + cursor - point
                cursor = point
            if cursor <= lo or how[v] == RELEASE:
                # before the first node of a host thread the thread ran something else
                if graph.kind[v] != TASK:
                    by_class[CLASS_CODE[HOST]] += cursor - lo
                    cursor = lo
                break
            u = int(via[v])
            if how[v] == CHAIN:
                point, klass = int(end[u]), int(graph.chain_class[v])
            elif how[v] == LAUNCHED:
                point, klass = int(start[u]), CLASS_CODE[LAUNCH_OVERHEAD]
            else:
                point, klass = int(end[u]), CLASS_CODE[SYNC]
            point = max(min(point, cursor), lo)
            by_class[klass] += cursor - point
            cursor = point
            launched = how[v] == LAUNCHED
            v = u
    by_class[CLASS_CODE[OTHER]] += max(cursor - lo, 0)
    return {name: int(by_class[code]) for code, name in enumerate(CLASSES)}, nodes


def _top(tops: dict[tuple[str, str], int]) -> tuple[tuple[str, str, int], ...]:
    ranked = sorted(tops.items(), key=lambda item: (-item[1], item[0]))
    return tuple((name, klass, ns) for (name, klass), ns in ranked[:TOP_PATH_TASKS])
