"""The cluster pass: per-rank accounts, load balance, slow ranks, collective skew, link use.

It reduces the small per-rank results (the step accounts of every rank, its collectives and
link figures) to one :class:`ClusterReport`; it never reads the events.

Per-rank figures are means per step window (a rank with two devices has two windows per step),
over the annotated steps, or over each device's whole span when the trace has no step.

Slow ranks. In synchronous training every rank meets the others at each collective: a rank
that works longer (computes, copies, or sits idle waiting for its host) arrives late, and the
others wait for it inside the collective — their exposed communication grows while its own
shrinks. So a suspect is a rank whose compute, or whose time outside communication
(``wall - exposed communication``), exceeds the other ranks' median by more than a threshold
while its exposed communication is below theirs. The difference of exposed communication (the
others' median minus its own) is the wait it causes them, which orders the suspects. When
collectives can be aligned across ranks, each rank's last arrivals are counted too (the vote
of msprof-analyze's slow-rank analysis; HTA's straggler view compares the same kind of
figure).

Load balance. For each category (step time, compute, exposed communication, memcpy, idle) the
spread over ranks is ``(max - min) / mean`` of the per-rank means.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

from perfledger.analysis.types import WindowAccount
from perfledger.cluster.collectives import (
    LINKS_SCHEMA,
    MATRIX_SCHEMA,
    CollectiveAlignment,
    align_collectives,
)

SPAN_STEP: Final = -1
# Categories whose spread over ranks is reported, in this order.
BALANCE_CATEGORIES: Final = ("wall", "compute", "communication", "memcpy", "idle")
DEFAULT_EXCESS_PCT: Final = 5.0

# cluster_step_trace.csv: one row per compared window (step, rank, device), sorted so; the
# ``*_vs_median_pct`` columns compare the row with the median over the ranks of the same step.
_NS_COLUMNS: Final = (
    "start_ns",
    "end_ns",
    "wall_ns",
    "compute_ns",
    "communication_ns",
    "overlapped_communication_ns",
    "memcpy_ns",
    "memset_ns",
    "idle_ns",
)
CLUSTER_STEPS_SCHEMA: Final = pa.schema(
    [
        pa.field("step", pa.int32()),
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        *(pa.field(name, pa.int64()) for name in _NS_COLUMNS),
        pa.field("wall_vs_median_pct", pa.float64()),
        pa.field("compute_vs_median_pct", pa.float64()),
        pa.field("communication_vs_median_pct", pa.float64()),
        pa.field("idle_vs_median_pct", pa.float64()),
    ]
)


@dataclass(frozen=True)
class RankAccount:
    """One rank's time account summed over its windows (see the module doc)."""

    rank: int
    windows: int
    steps: int
    wall_ns: int
    compute_ns: int
    communication_ns: int
    overlapped_communication_ns: int
    memcpy_ns: int
    memset_ns: int
    idle_ns: int

    def per_window(self, category: str) -> float:
        """Mean ns per window of ``category`` (wall, compute, communication, ...)."""
        total: int = getattr(self, f"{category}_ns")
        return total / self.windows if self.windows else 0.0

    @property
    def outside_communication_ns(self) -> int:
        """Time not spent in exposed communication: compute, copies and idle."""
        return self.wall_ns - self.communication_ns


@dataclass(frozen=True)
class Spread:
    """How unevenly one category is spread over the ranks (means per window)."""

    category: str
    mean_ns: float
    min_ns: float
    max_ns: float
    min_rank: int
    max_rank: int

    @property
    def spread_pct(self) -> float:
        """(max - min) / mean, in %; 0 when the mean is 0."""
        return 100.0 * (self.max_ns - self.min_ns) / self.mean_ns if self.mean_ns > 0 else 0.0


@dataclass(frozen=True)
class SlowRank:
    """A rank suspected of holding the others back, with the figures that say so (per window).

    ``wait_caused_ns`` is how much longer the other ranks sit in exposed communication than
    this one (their median minus its own): the time they wait for it.
    """

    rank: int
    wait_caused_ns: float
    compute_excess_pct: float  # its compute over the other ranks' median, %
    outside_excess_pct: float  # its time outside communication over the others' median, %
    compute_ns: float
    others_compute_ns: float
    outside_communication_ns: float
    others_outside_communication_ns: float
    communication_ns: float
    others_communication_ns: float
    last_arrivals: int  # aligned collectives it arrived last at (0 when none aligned)
    collectives: int

    @property
    def excess_pct(self) -> float:
        """The larger of the compute and outside-communication excesses."""
        return max(self.compute_excess_pct, self.outside_excess_pct)

    def evidence(self) -> dict[str, Any]:
        """The figures as JSON evidence (ms per step window, rounded to the µs)."""
        return {
            "rank": self.rank,
            "wait_caused_ms": _ms(self.wait_caused_ns),
            "compute_excess_pct": round(self.compute_excess_pct, 2),
            "outside_communication_excess_pct": round(self.outside_excess_pct, 2),
            "compute_ms": _ms(self.compute_ns),
            "others_compute_ms": _ms(self.others_compute_ns),
            "outside_communication_ms": _ms(self.outside_communication_ns),
            "others_outside_communication_ms": _ms(self.others_outside_communication_ns),
            "communication_ms": _ms(self.communication_ns),
            "others_communication_ms": _ms(self.others_communication_ns),
            "last_arrivals": self.last_arrivals,
            "aligned_collectives": self.collectives,
        }


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


@dataclass(frozen=True)
class ClusterReport:
    """Everything the cluster pass finds (see the module doc)."""

    ranks: tuple[int, ...]
    basis: str  # "steps" or "span": which windows the per-rank figures cover
    per_rank: tuple[RankAccount, ...]
    balance: tuple[Spread, ...]
    slow_ranks: tuple[SlowRank, ...]
    collectives: CollectiveAlignment
    links: pa.Table = field(default_factory=LINKS_SCHEMA.empty_table)  # LINKS_SCHEMA
    steps: pa.Table = field(default_factory=CLUSTER_STEPS_SCHEMA.empty_table)
    matrix: pa.Table = field(default_factory=MATRIX_SCHEMA.empty_table)  # MATRIX_SCHEMA

    def spread(self, category: str) -> Spread | None:
        """The spread of one category, None when absent."""
        return next((s for s in self.balance if s.category == category), None)


def cluster_windows(windows: Sequence[WindowAccount]) -> tuple[str, list[WindowAccount]]:
    """The windows the pass compares: the step windows, else each device's whole span."""
    steps = [w for w in windows if w.step != SPAN_STEP and w.wall_ns > 0]
    if steps:
        return "steps", steps
    return "span", [w for w in windows if w.step == SPAN_STEP and w.wall_ns > 0]


def rank_accounts(windows: Sequence[WindowAccount]) -> tuple[RankAccount, ...]:
    """Per-rank sums over the given windows, sorted by rank."""
    by_rank: dict[int, list[WindowAccount]] = {}
    for w in windows:
        by_rank.setdefault(w.rank, []).append(w)
    return tuple(
        RankAccount(
            rank=rank,
            windows=len(ws),
            steps=len({w.step for w in ws}),
            wall_ns=sum(w.wall_ns for w in ws),
            compute_ns=sum(w.compute_ns for w in ws),
            communication_ns=sum(w.communication_ns for w in ws),
            overlapped_communication_ns=sum(w.overlapped_communication_ns for w in ws),
            memcpy_ns=sum(w.memcpy_ns for w in ws),
            memset_ns=sum(w.memset_ns for w in ws),
            idle_ns=sum(w.idle_ns for w in ws),
        )
        for rank, ws in sorted(by_rank.items())
    )


def step_table(windows: Sequence[WindowAccount]) -> pa.Table:
    """The compared windows with each category against the ranks' median of the same step."""
    ordered = sorted(windows, key=lambda w: (w.step, w.rank, w.device))
    by_step: dict[int, list[WindowAccount]] = {}
    for w in ordered:
        by_step.setdefault(w.step, []).append(w)
    medians = {
        (step, category): statistics.median(getattr(w, f"{category}_ns") for w in same)
        for step, same in by_step.items()
        for category in ("wall", "compute", "communication", "idle")
    }

    def versus(w: WindowAccount, category: str) -> float:
        median = medians[w.step, category]
        value: int = getattr(w, f"{category}_ns")
        return round(100.0 * (value - median) / median, 2) if median > 0 else 0.0

    columns: dict[str, list[Any]] = {
        "step": [w.step for w in ordered],
        "rank": [w.rank for w in ordered],
        "device": [w.device for w in ordered],
    }
    for name in _NS_COLUMNS:
        columns[name] = [w.wall_ns if name == "wall_ns" else getattr(w, name) for w in ordered]
    for category in ("wall", "compute", "communication", "idle"):
        columns[f"{category}_vs_median_pct"] = [versus(w, category) for w in ordered]
    return pa.table(columns, schema=CLUSTER_STEPS_SCHEMA)


def load_balance(accounts: Sequence[RankAccount]) -> tuple[Spread, ...]:
    """Spread of each of :data:`BALANCE_CATEGORIES` over the ranks (empty under two ranks)."""
    if len(accounts) < 2:
        return ()
    spreads = []
    for category in BALANCE_CATEGORIES:
        values = [(a.per_window(category), a.rank) for a in accounts]
        low = min(values)
        high = max(values, key=lambda v: (v[0], -v[1]))  # the lowest rank wins a tie
        spreads.append(
            Spread(
                category=category,
                mean_ns=statistics.fmean(v for v, _ in values),
                min_ns=low[0],
                max_ns=high[0],
                min_rank=low[1],
                max_rank=high[1],
            )
        )
    return tuple(spreads)


def slow_ranks(
    accounts: Sequence[RankAccount],
    collectives: CollectiveAlignment | None = None,
    *,
    excess_pct: float = DEFAULT_EXCESS_PCT,
) -> tuple[SlowRank, ...]:
    """Ranks that work longer than the others' median and wait less (see the module doc)."""
    if len(accounts) < 2:
        return ()
    arrivals = {a.rank: a for a in collectives.arrivals} if collectives else {}
    suspects = []
    for account in accounts:
        others = [a for a in accounts if a.rank != account.rank]
        compute = account.per_window("compute")
        others_compute = statistics.median(a.per_window("compute") for a in others)
        outside = _outside(account)
        others_outside = statistics.median(_outside(a) for a in others)
        communication = account.per_window("communication")
        others_communication = statistics.median(a.per_window("communication") for a in others)
        compute_excess = _excess_pct(compute, others_compute)
        outside_excess = _excess_pct(outside, others_outside)
        if max(compute_excess, outside_excess) <= excess_pct:
            continue
        if communication >= others_communication:
            continue  # nobody waits for it longer than it waits for them
        arrival = arrivals.get(account.rank)
        suspects.append(
            SlowRank(
                rank=account.rank,
                wait_caused_ns=others_communication - communication,
                compute_excess_pct=compute_excess,
                outside_excess_pct=outside_excess,
                compute_ns=compute,
                others_compute_ns=others_compute,
                outside_communication_ns=outside,
                others_outside_communication_ns=others_outside,
                communication_ns=communication,
                others_communication_ns=others_communication,
                last_arrivals=arrival.last_arrivals if arrival else 0,
                collectives=arrival.collectives if arrival else 0,
            )
        )
    suspects.sort(key=lambda s: (-s.wait_caused_ns, -s.last_arrivals, s.rank))
    return tuple(suspects)


def _outside(account: RankAccount) -> float:
    return account.outside_communication_ns / account.windows if account.windows else 0.0


def _excess_pct(value: float, reference: float) -> float:
    return 100.0 * (value - reference) / reference if reference > 0 else 0.0


def cluster_report(
    windows: Sequence[WindowAccount],
    collectives: pa.Table,
    links: pa.Table | None = None,
    *,
    ranks: Sequence[int] | None = None,
    excess_pct: float = DEFAULT_EXCESS_PCT,
    matrix: pa.Table | None = None,
) -> ClusterReport:
    """The cluster pass over every rank's window accounts and collectives (COLLECTIVES_SCHEMA).

    Args:
        windows: the device window accounts of every rank (step and span rows).
        collectives: the communication tasks of every rank.
        links: link figures of every rank (LINKS_SCHEMA), when the source has them.
        ranks: every rank of the profile (default: the ranks of ``windows``).
        excess_pct: how much longer than the others a rank must work to be a suspect.
        matrix: the run's communication matrix (MATRIX_SCHEMA), when the source has one.
    """
    basis, compared = cluster_windows(windows)
    accounts = rank_accounts(compared)
    all_ranks = tuple(sorted(set(ranks) if ranks is not None else {a.rank for a in accounts}))
    alignment = align_collectives(collectives, all_ranks)
    return ClusterReport(
        ranks=all_ranks,
        basis=basis,
        per_rank=accounts,
        balance=load_balance(accounts),
        slow_ranks=slow_ranks(accounts, alignment, excess_pct=excess_pct),
        collectives=alignment,
        links=links if links is not None else LINKS_SCHEMA.empty_table(),
        steps=step_table(compared),
        matrix=matrix if matrix is not None else MATRIX_SCHEMA.empty_table(),
    )
