"""The ranks of a profile replayed together: a collective ends once its last participant has
arrived, plus its transfer (docs/whatif.md, "Collectives across ranks").

``perfledger analyze`` replays each rank in its own task first (in parallel, alone: a
collective keeps its observed duration, its wait for the others included). Once every rank is
back, :class:`RanksTogether` matches the ranks' collectives (from each rank's collective
tasks: a few small arrays per rank) and replays them again with the others' arrivals: the
critical paths of the unchanged replay (:meth:`RanksTogether.reports`) and what a change per
rank gains on every rank (:meth:`RanksTogether.gains`), in one joint pass over the ranks
(:mod:`perfledger.analysis.replay_joint`) or, where that cannot be, in rounds passing each
rank's new arrivals to the others until none moves.

Memory: the ranks' graphs are kept (the joint pass needs every one at once) while their
events add up to at most :data:`KEPT_GRAPH_ROWS` rows; beyond that the changes are replayed in
rounds, one rank's graph built at a time, at each round, and dropped (more time, the parent's
memory bounded by the largest rank's graph).

A rank none of whose collectives is matched with another rank's (a different number of them,
the others have none, clocks their ends do not align) is replayed alone, as its task did: it
does not hold the others back, and :func:`replayed_alone` counts it in the profile's quality
report. A rank without collectives is replayed alone too, not counted: it has nothing to match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

from perfledger.analysis.cluster.collectives import collective_tasks
from perfledger.analysis.critical_path import (
    MAX_ARRIVAL_ROUNDS,
    RankReplay,
    prepare_rank,
    rank_report,
    replayed_gains,
    with_peers,
)
from perfledger.analysis.intervals import Int64Array
from perfledger.analysis.profile import rank_clocks
from perfledger.analysis.rank_arrivals import matched_collectives, rank_collectives
from perfledger.analysis.replay import Peers, replay
from perfledger.analysis.replay_joint import replay_joint
from perfledger.model.profile import RankAnalysis
from perfledger.model.quality import REPLAYED_ALONE, UNSETTLED_ARRIVALS, WHATIF, QualityCheck
from perfledger.model.whatif import NO_CHANGE, ReplayReport, StepGains, WhatIf

# The most events rows (all ranks together) whose step graphs are kept between the rounds
# of a replay together: a prepared graph holds about 100 bytes per events row (15 MB for
# v100_rank1_ddp's 151k rows, measured with tracemalloc), so about 0.2 GB.
KEPT_GRAPH_ROWS: Final = 2_000_000


class RanksTogether:
    """The ranks of a profile, their collectives matched across them, to replay together.

    Args:
        ranks: the analysed ranks, in rank order (ranks without events left out); their
            communication splits give the waits of collectives not matched across them.
        kept_rows: keep the ranks' graphs between rounds while their events add up to at
            most this many rows (:data:`KEPT_GRAPH_ROWS`).
    """

    def __init__(self, ranks: Sequence[RankAnalysis], kept_rows: int = KEPT_GRAPH_ROWS) -> None:
        self._ranks = [r for r in ranks if r.events.num_rows]
        keep = sum(r.events.num_rows for r in self._ranks) <= kept_rows
        parts = []
        alone: list[RankReplay] = []
        for rank in self._ranks:  # a loop over ranks: one graph at a time unless kept
            prepared = _prepared(rank)
            parts.append(rank_collectives(prepared))
            if keep:
                alone.append(prepared)
        self.ranks = tuple(p.rank for p in parts)
        # changes whose arrivals still moved after the last round (:meth:`gains`)
        self.unsettled = 0
        # changes replayed in rounds because the ranks reach their collectives in different
        # orders (the joint pass deadlocked)
        self.in_rounds = 0
        self.arrivals = matched_collectives(parts, rank_clocks(self._ranks))
        self.peers: tuple[Peers, ...] = tuple(self.arrivals.peers_at(None))
        self.matched = tuple(self.arrivals.matched(i) for i in range(len(parts)))
        # ranks with collectives none of which is matched: replayed alone, counted (a rank
        # without collectives is replayed alone too, correctly: it has nothing to match)
        self.alone = tuple(
            p.rank for p, m in zip(parts, self.matched, strict=True) if p.tasks.num_rows and not m
        )
        self._kept = (
            [with_peers(p, peers) for p, peers in zip(alone, self.peers, strict=True)]
            if keep
            else []
        )

    @property
    def together(self) -> bool:
        """Whether any collective is matched across the ranks (else each replays alone)."""
        return any(self.matched)

    def prepared(self, index: int) -> RankReplay:
        """The rank at ``index`` (in :attr:`ranks`) prepared, its baseline replayed with the
        others' measured arrivals."""
        if self._kept:
            return self._kept[index]
        return with_peers(_prepared(self._ranks[index]), self.peers[index])

    def reports(self) -> dict[int, ReplayReport]:
        """Each matched rank's steps replayed unchanged with the others' measured arrivals,
        with their critical paths, by rank (the ranks replayed alone keep their own)."""
        return {
            rank: rank_report(self.prepared(i), NO_CHANGE, self.peers[i])
            for i, rank in enumerate(self.ranks)  # a loop over ranks
            if self.matched[i]
        }

    def gains(
        self, changes: Sequence[Mapping[int, WhatIf]], joint: bool = True
    ) -> list[dict[int, StepGains]]:
        """What each change gains on every rank, the ranks replayed together: per change, a
        change of each rank it names (by rank; the others unchanged), and per rank what the
        steps gain (:func:`perfledger.analysis.critical_path.predicted_gains`'s figures).

        With the graphs kept, each change is replayed in one joint pass over the ranks
        (:func:`~perfledger.analysis.replay_joint.replay_joint`), which settles every
        collective at once. Where that walk deadlocks (the ranks reach their collectives in
        different orders; counted in :attr:`in_rounds`), with the graphs built again at each
        round, or with ``joint`` False: rounds, the first with the others' arrivals as
        measured, each later one with the arrivals the round before replayed, until none
        moves (at most :data:`~perfledger.analysis.critical_path.MAX_ARRIVAL_ROUNDS`); all
        changes go through each rank's graph in one visit per round. A round settles about
        one more collective of a chain of them (each waits for the one before on every rank):
        a change whose arrivals still move after the last round keeps that round's gains and
        is counted in :attr:`unsettled`."""
        result: list[dict[int, StepGains]] = [{} for _ in changes]
        pending = [c for c, by_rank in enumerate(changes) if _changed(by_rank)]
        if len(pending) < len(changes):
            baselines = self._baselines()
            for c in range(len(changes)):
                if c not in pending:
                    result[c] = dict(baselines)
        if joint and self._kept and self.together:
            pending = self._joint(changes, pending, result)
        peers = {c: list(self.peers) for c in pending}
        first = True
        for _ in range(MAX_ARRIVAL_ROUNDS):  # a loop over rounds, while arrivals move
            if not pending:
                break
            starts: dict[int, list[Int64Array]] = {c: [] for c in pending}
            for i, rank in enumerate(self.ranks):  # a loop over ranks, one graph at a time
                if not self.matched[i] and not first:
                    for c in pending:  # replayed alone: its arrivals move nothing
                        starts[c].append(np.zeros(0, dtype=np.int64))
                    continue
                prepared = self.prepared(i)
                members = self.arrivals.members(i)
                for c in pending:  # a loop over changes
                    change = changes[c].get(rank, NO_CHANGE)
                    mine = peers[c][i] if self.matched[i] else None
                    schedule = replay(prepared.graph, change, mine)
                    result[c][rank] = replayed_gains(prepared, schedule)
                    starts[c].append(schedule.start[members])
            first = False
            moving = []
            for c in pending:
                moved = self.arrivals.peers_at(starts[c])
                if not all(
                    np.array_equal(a.shift, b.shift) for a, b in zip(moved, peers[c], strict=True)
                ):
                    peers[c] = moved
                    moving.append(c)
            pending = moving
        self.unsettled += len(pending)
        return result

    def _joint(
        self,
        changes: Sequence[Mapping[int, WhatIf]],
        pending: list[int],
        result: list[dict[int, StepGains]],
    ) -> list[int]:
        """The ``pending`` changes replayed in one joint pass over the kept graphs
        (:func:`~perfledger.analysis.replay_joint.replay_joint`), their gains put in
        ``result``; the changes whose walk deadlocked are given back (to replay in rounds)
        and counted in :attr:`in_rounds`."""
        graphs = [p.graph for p in self._kept]
        deadlocked = []
        for c in pending:  # a loop over changes
            by_rank = [changes[c].get(rank, NO_CHANGE) for rank in self.ranks]
            schedules = replay_joint(graphs, by_rank, self.arrivals)
            if schedules is None:
                deadlocked.append(c)
                continue
            for prepared, schedule in zip(self._kept, schedules, strict=True):
                result[c][prepared.rank] = replayed_gains(prepared, schedule)
        self.in_rounds += len(deadlocked)
        return deadlocked

    def _baselines(self) -> dict[int, StepGains]:
        """Every rank's steps replayed unchanged, with the others' measured arrivals."""
        return {rank: replayed_gains(self.prepared(i), None) for i, rank in enumerate(self.ranks)}


def any_collectives(ranks: Sequence[RankAnalysis]) -> bool:
    """Whether several ranks are given and one has a collective task (else nothing to replay
    together: their graphs are not built)."""
    return len(ranks) > 1 and any(collective_tasks(r.events).num_rows for r in ranks)


def _prepared(rank: RankAnalysis) -> RankReplay:
    """The rank prepared as its task prepares it (its communication split's waits)."""
    split = rank.comm
    waits = split.wait_by_row(rank.events.num_rows) if split is not None else None
    return prepare_rank(rank.events, comm_wait=waits, launches=rank.launch_keys)


def _changed(by_rank: Mapping[int, WhatIf]) -> bool:
    return any(not change.unchanged for change in by_rank.values())


def unsettled_arrivals(together: RanksTogether) -> tuple[QualityCheck, ...]:
    """``unsettled_arrivals``: changes replayed with the ranks together whose collectives'
    arrivals still moved after the last round: their gains across ranks are those of that
    round (a gain on one rank has not yet reached the collectives further along the others)."""
    count = together.unsettled
    if not count:
        return ()
    return (
        QualityCheck(
            UNSETTLED_ARRIVALS,
            count,
            f"{count} of the changes replayed with the ranks together (the advisor's fixes) "
            f"did not settle in {MAX_ARRIVAL_ROUNDS} rounds: their collectives' arrivals still "
            "moved, so their whatif_ms across ranks are those of the last round (likely short); "
            f"{together.in_rounds} change(s) went to rounds because the ranks reach their "
            "collectives in different orders (no joint pass)",
            (WHATIF,),
            repaired=False,
        ),
    )


def replayed_alone(together: RanksTogether) -> dict[int, QualityCheck]:
    """``replayed_alone``, by rank: a rank of a profile with collectives none of whose own is
    matched with another rank's, replayed without the others' arrivals (its collectives keep
    their observed durations, waits included)."""
    return {
        rank: QualityCheck(
            REPLAYED_ALONE,
            1,
            f"rank {rank}: none of its collectives matches another rank's (a different number "
            "of them, the others have none, or clocks their ends do not align); it is replayed "
            "alone, its collectives keeping their observed durations",
            (WHATIF,),
            repaired=False,
        )
        for rank in together.alone
    }
