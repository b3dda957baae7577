"""The replay as it was before the step windows came from the schedule and the loop took a
short path for plain nodes: the reference ``whatif_replay.py --fixes`` measures against, in
the same run (the outputs of both are compared there, step window for step window)."""

from __future__ import annotations

import pyarrow as pa

from perfledger.analysis.graph import StepGraph
from perfledger.analysis.graph_codes import FREE
from perfledger.analysis.replay import (
    AWAITED,
    CHAIN,
    LAUNCHED,
    RELEASE,
    WAITED,
    WOKEN,
    Schedule,
    replayed_events,
)
from perfledger.analysis.steps import step_plan
from perfledger.model.accounts import StepWindow


def previous_windows(
    events: pa.Table, graph: StepGraph, schedule: Schedule
) -> dict[int, StepWindow]:
    """The windows of a replay measured on the whole replayed events table."""
    table = replayed_events(events, graph, schedule)
    return {w.step: w for w in step_plan(table).windows}


def previous_schedule(
    pred: list[int],
    delay: list[int],
    launch_src: list[int],
    launch_delay: list[int],
    release: list[int],
    dur: list[int],
    observed: list[int],
    waits: dict[int, list[int]],
    wakes: dict[int, tuple[int, int]],
    events: dict[int, list[tuple[int, int]]],
    transfers: dict[int, tuple[int, int]],
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The longest-path recursion, every lookup made for every node."""
    n = len(dur)
    start = [0] * n
    end = [0] * n
    via = [-1] * n
    how = [RELEASE] * n
    for v in range(n):
        s = release[v]
        by, kind = -1, RELEASE
        p = pred[v]
        if p >= 0:
            t = end[p] + delay[v]
            if t > s:
                s, by, kind = t, p, CHAIN
        q = launch_src[v]
        if q >= 0:
            t = start[q] + launch_delay[v]
            if t > s:
                s, by, kind = t, q, LAUNCHED
        woken = wakes.get(v)
        if woken is not None:
            t = start[woken[0]] + woken[1]
            if t > s:
                s, by, kind = t, woken[0], WOKEN
        awaited = events.get(v)
        if awaited is not None:
            for w, gap in awaited:
                t = end[w] + gap
                if t > s:
                    s, by, kind = t, w, AWAITED
        waited = waits.get(v)
        if waited is not None:
            for w in waited:
                if end[w] > s:
                    s, by, kind = end[w], w, WAITED
        if s == FREE:
            s = observed[v]
        start[v] = s
        peer = transfers.get(v)
        end[v] = s + dur[v] if peer is None else max(s, peer[0]) + peer[1]
        via[v] = by
        how[v] = kind
    return start, end, via, how
