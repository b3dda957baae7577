"""Collectives matched across the ranks of a profile, for replaying the ranks together.

A rank's replay hands the others only its collective tasks (:class:`RankCollectives`: a few
small arrays per step, not its graph); :func:`matched_collectives` matches them as the cluster
pass does and :class:`CollectiveArrivals` turns each rank's (replayed) arrivals into the
others' :class:`~perfledger.analysis.replay.Peers` (docs/whatif.md, "Collectives across
ranks").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa

from perfledger.analysis.cluster.arrivals import align_arrivals
from perfledger.analysis.cluster.collectives import collective_tasks
from perfledger.analysis.graph_codes import TASK
from perfledger.analysis.intervals import Int64Array
from perfledger.analysis.replay import Peers, Schedule

if TYPE_CHECKING:
    from perfledger.analysis.critical_path import RankReplay

# Clock error allowed between a collective's last arrival and its first participant's end.
ARRIVAL_TOLERANCE_NS: Final = 10_000


@dataclass(frozen=True)
class RankCollectives:
    """One rank's collective tasks as matching them across ranks needs them (small arrays,
    a few per step): what a rank's replay hands to the others without its graph.

    Attributes:
        rank: the rank.
        tasks: its collective tasks
            (:func:`perfledger.analysis.cluster.collectives.collective_tasks`).
        node: each task's node in the rank's step graph (-1: not in it).
        start: each task's observed start and end (0 where it has no node).
        end: see ``start``.
    """

    rank: int
    tasks: pa.Table
    node: Int64Array
    start: Int64Array
    end: Int64Array


def rank_collectives(prepared: RankReplay) -> RankCollectives:
    """The collective tasks of a prepared rank, with their nodes and observed times."""
    tasks = collective_tasks(prepared.events)
    graph = prepared.graph
    node_of_row = np.full(prepared.events.num_rows, -1, dtype=np.int64)
    is_task = np.flatnonzero(graph.kind == TASK)
    node_of_row[graph.row[is_task]] = is_task
    node = node_of_row[np.asarray(tasks["row"], dtype=np.int64)]
    at = np.maximum(node, 0)
    start = np.where(node >= 0, graph.start[at] if graph.size else 0, 0).astype(np.int64)
    end = np.where(node >= 0, graph.end[at] if graph.size else 0, 0).astype(np.int64)
    return RankCollectives(prepared.rank, tasks, node, start, end)


@dataclass(frozen=True)
class CollectiveArrivals:
    """The collectives matched across the ranks of a profile.

    Attributes:
        ranks: the ranks, in order.
        instances: one collective each: (index into ranks, its task node) per participant.
        observed: each participant's observed start (on its rank's clock), as in instances.
        offsets_ns: each rank's clock offset (its times minus the offset are on the first
            rank's clock; :func:`perfledger.analysis.cluster.arrivals.align_arrivals`).
        contradicted: matched collectives left out because a participant ended, on the aligned
            clocks, before the last one arrived (a wrong match, or clocks the ends do not
            align): their tasks keep their observed durations.
        unmatched: collectives run by several ranks that a rank ran a different number of
            times than most of them (per collective, the most runs of such a rank): that
            rank's tasks keep their observed durations.
    """

    ranks: tuple[int, ...]
    instances: tuple[tuple[tuple[int, int], ...], ...]
    observed: tuple[tuple[int, ...], ...]
    offsets_ns: tuple[int, ...]
    contradicted: int = 0
    unmatched: int = 0

    def members(self, index: int) -> Int64Array:
        """The nodes of the rank at ``index`` that take part in a matched collective, in
        order: where :meth:`peers_at` reads that rank's replayed arrivals."""
        return self._members[index]

    def matched(self, index: int) -> bool:
        """Whether the rank at ``index`` takes part in a matched collective."""
        return bool(self._members[index].size)

    @cached_property
    def _members(self) -> tuple[Int64Array, ...]:
        nodes: list[list[int]] = [[] for _ in self.ranks]
        for members in self.instances:  # a loop over collectives
            for r, v in members:
                nodes[r].append(v)
        return tuple(np.unique(np.asarray(n, dtype=np.int64)) for n in nodes)

    def peers(self, schedules: Sequence[Schedule] | None) -> list[Peers]:
        """Per rank, the others' arrival at each of its matched collectives: its observed
        wait and how far the others' last arrival moved in ``schedules`` (None: not)."""
        if schedules is None:
            return self.peers_at(None)
        return self.peers_at([s.start[self.members(i)] for i, s in enumerate(schedules)])

    def peers_at(self, starts: Sequence[Int64Array] | None) -> list[Peers]:
        """:meth:`peers` from each rank's replayed start of its :meth:`members` (None: as
        observed): what a rank replayed elsewhere sends back instead of its schedule."""
        replayed_at = (
            None
            if starts is None
            else [
                dict(zip(self.members(i).tolist(), s.tolist(), strict=True))
                for i, s in enumerate(starts)
            ]
        )
        nodes: list[list[int]] = [[] for _ in self.ranks]
        waits: list[list[int]] = [[] for _ in self.ranks]
        shifts: list[list[int]] = [[] for _ in self.ranks]
        offsets = self.offsets_ns
        for members, starts_seen in zip(self.instances, self.observed, strict=True):
            # a loop over collectives: a few per step; times on the first rank's clock
            observed = [t - offsets[r] for (r, _), t in zip(members, starts_seen, strict=True)]
            replayed = (
                observed
                if replayed_at is None
                else [replayed_at[r][v] - offsets[r] for r, v in members]
            )
            # the others' last arrival: the last of all, or the one before it for the last
            first, second = _last_two(observed)
            first_now, second_now = _last_two(replayed)
            for i, (r, v) in enumerate(members):
                others = observed[second] if i == first else observed[first]
                others_now = replayed[second_now] if i == first_now else replayed[first_now]
                nodes[r].append(v)
                waits[r].append(others - observed[i])
                shifts[r].append(others_now - others)
        return [
            Peers(
                node=np.asarray(nodes[i], dtype=np.int64),
                wait=np.asarray(waits[i], dtype=np.int64),
                shift=np.asarray(shifts[i], dtype=np.int64),
            )
            for i in range(len(self.ranks))
        ]


def _last_two(times: list[int]) -> tuple[int, int]:
    """The positions of the latest time and of the latest of the others (at least two)."""
    first, second = (0, 1) if times[0] >= times[1] else (1, 0)
    for i in range(2, len(times)):  # the participants of one collective
        if times[i] > times[first]:
            first, second = i, first
        elif times[i] > times[second]:
            second = i
    return first, second


def matched_collectives(
    parts: Sequence[RankCollectives], clocks: Mapping[int, str] | None = None
) -> CollectiveArrivals:
    """The collectives of the ranks matched as the cluster pass matches them (the k-th task
    of one name and process group on every rank that runs it the same number of times,
    :func:`perfledger.analysis.cluster.collectives.collective_tasks`), and the ranks' clock
    offsets from their ends. Where ranks ran one a different number of times, the ranks that
    ran it as often as most of them did (the most runs among ties) are matched, the others
    left out (:attr:`CollectiveArrivals.unmatched`). ``clocks``: the clock of each rank known
    to share one (:func:`perfledger.analysis.cluster.arrivals.align_arrivals`)."""
    instances: list[tuple[tuple[int, int], ...]] = []
    observed: list[tuple[int, ...]] = []
    offsets = [0] * len(parts)
    contradicted = unmatched = 0
    if sum(p.tasks.num_rows for p in parts) and len(parts) > 1:
        aligned = align_arrivals(
            pa.concat_tables([p.tasks for p in parts]), [p.rank for p in parts], clocks
        )
        offsets = [aligned.offsets_ns.get(p.rank, 0) for p in parts]
        by_key: dict[tuple[str, str], list[list[int]]] = {}
        for i, part in enumerate(parts):
            keys = zip(
                part.tasks["name"].to_pylist(),
                part.tasks["group"].fill_null("").to_pylist(),
                strict=True,
            )
            for k, key in enumerate(keys):  # a few per step
                by_key.setdefault(key, [[] for _ in parts])[i].append(k)
        for key in sorted(by_key):
            lists = by_key[key]
            runs = [len(tasks) for tasks in lists]
            # the ranks that ran it the number of times most of its ranks did (the most
            # runs among ties): a rank that ran it otherwise does not hold them back
            common = max((runs.count(n), n) for n in set(runs) if n)
            members = [i for i, n in enumerate(runs) if n == common[1]] if common[0] > 1 else []
            left_out = [n for i, n in enumerate(runs) if n and i not in members]
            if left_out and len(left_out) + len(members) > 1:
                unmatched += max(left_out)
            if not members:
                continue
            for k in range(common[1]):
                at = [(i, lists[i][k]) for i in members]
                if any(parts[i].node[t] < 0 for i, t in at):
                    continue
                arrived = max(int(parts[i].start[t]) - offsets[i] for i, t in at)
                left = min(int(parts[i].end[t]) - offsets[i] for i, t in at)
                if arrived <= left + ARRIVAL_TOLERANCE_NS:
                    instances.append(tuple((i, int(parts[i].node[t])) for i, t in at))
                    observed.append(tuple(int(parts[i].start[t]) for i, t in at))
                else:  # a participant ended before the last one arrived
                    contradicted += 1
    return CollectiveArrivals(
        tuple(p.rank for p in parts),
        tuple(instances),
        tuple(observed),
        tuple(offsets),
        contradicted,
        unmatched,
    )
