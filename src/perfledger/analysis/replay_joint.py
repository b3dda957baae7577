"""The ranks of a profile replayed in one joint pass: each collective matched across them ends
once its last participant has arrived, plus its transfer (docs/whatif.md, "Collectives across
ranks").

Each rank walks its nodes in its own topological order (:func:`replay`'s loop, resumable
between spans of nodes) until its next matched collective, whose start depends only on the
rank's own nodes before it; there it pauses until every participant has reached that
collective. Then the members' ends are set together — each at the later of its start and the
others' last start (on its clock), plus its transfer — and their ranks walk on. One pass costs
about one replay of every rank, and settles a step of any number of chained collectives.

The walk deadlocks when the ranks reach their collectives in different orders (collectives on
several communication streams issued in different orders): :func:`replay_joint` then gives
None and the caller replays in rounds instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from perfledger.analysis.graph import StepGraph
from perfledger.analysis.rank_arrivals import CollectiveArrivals, _last_two
from perfledger.analysis.replay import (
    Schedule,
    ScheduleInputs,
    ScheduleState,
    schedule_inputs,
    schedule_span,
)
from perfledger.model.whatif import WhatIf

# A collective paused in the walk ends at its start until its peers set its end.
_UNSET: Final = -(2**62)


def replay_joint(
    graphs: Sequence[StepGraph], changes: Sequence[WhatIf], arrivals: CollectiveArrivals
) -> list[Schedule] | None:
    """Every rank's graph replayed under its change with the ranks' matched collectives
    (``arrivals``, whose ranks are the graphs' in order) waiting for each other: the
    schedules the rounds of :class:`~perfledger.analysis.replay_together.RanksTogether`
    settle to (the unique one: the ranks' graphs joined at their collectives are acyclic
    when the walk does not deadlock). None when the walk deadlocks."""
    observed_peers = arrivals.peers_at(None)
    inputs: list[ScheduleInputs] = [
        schedule_inputs(g, c, observed_peers[i] if arrivals.matched(i) else None)
        for i, (g, c) in enumerate(zip(graphs, changes, strict=True))  # a loop over ranks
    ]
    offsets = arrivals.offsets_ns
    # per participant of each collective: its transfer, and its others' arrival less the
    # others' last observed arrival (on the first rank's clock): the replayed others' last
    # arrival added gives the time its transfer may start, as the rounds' Peers give it
    settle: list[list[tuple[int, int, int, int]]] = []
    instance_of: list[dict[int, int]] = [{} for _ in graphs]
    for k, (members, starts_seen) in enumerate(  # a loop over collectives: a few per step
        zip(arrivals.instances, arrivals.observed, strict=True)
    ):
        seen = [t - offsets[r] for (r, _), t in zip(members, starts_seen, strict=True)]
        first, second = _last_two(seen)
        parts = []
        for i, (r, v) in enumerate(members):
            ready, transfer = inputs[r].lists[10][v]
            others = seen[second] if i == first else seen[first]
            parts.append((r, v, ready - others, transfer))
            instance_of[r][v] = k
        settle.append(parts)
    states = []
    edges = []
    for x in inputs:  # a loop over ranks: their collectives end when the peers say
        waits, wakes, events, transfers = x.lists[7:]
        paused = dict.fromkeys(transfers, (_UNSET, 0))
        states.append(ScheduleState.of(len(x.lists[5]), waits, wakes, events, paused))
        edges.append((waits, wakes, events, paused))
    members_of = [sorted(nodes) for nodes in instance_of]
    position = [0] * len(graphs)
    following = [0] * len(graphs)
    arrived = [0] * len(settle)
    walking = list(range(len(graphs)))
    done = 0
    while walking:  # a loop over the pauses of the ranks: a few per collective
        r = walking.pop()
        state, lists = states[r], inputs[r].lists
        mine = members_of[r]
        if following[r] == len(mine):
            schedule_span(state, lists[:7], edges[r], position[r], len(lists[5]))
            done += 1
            continue
        node = mine[following[r]]
        schedule_span(state, lists[:7], edges[r], position[r], node + 1)
        position[r] = node + 1
        following[r] += 1
        k = instance_of[r][node]
        arrived[k] += 1
        if arrived[k] < len(settle[k]):
            continue
        at = [states[q].start[v] - offsets[q] for q, v, _, _ in settle[k]]
        first, second = _last_two(at)
        for i, (q, v, since, transfer) in enumerate(settle[k]):
            others = at[second] if i == first else at[first]
            start = states[q].start[v]
            states[q].end[v] = max(start, since + others) + transfer
            walking.append(q)
    if done < len(graphs):
        return None  # the ranks wait for each other at different collectives
    return [x.schedule(s.start, s.end, s.via, s.how) for x, s in zip(inputs, states, strict=True)]
