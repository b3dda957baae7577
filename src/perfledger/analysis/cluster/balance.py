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
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.cluster.collectives import align_collectives, slow_links
from perfledger.model.accounts import WindowAccount
from perfledger.model.cluster import (
    CLUSTER_STEP_NS_COLUMNS,
    CLUSTER_STEPS_SCHEMA,
    LINKS_SCHEMA,
    MATRIX_SCHEMA,
    SLOW_CAUSES,
    ClusterReport,
    CollectiveAlignment,
    RankAccount,
    SlowRank,
    Spread,
)
from perfledger.model.schema import KERNEL, NO_STEP, SPAN_STEP

# Categories whose spread over ranks is reported, in this order.
BALANCE_CATEGORIES: Final = ("wall", "compute", "communication", "memcpy", "idle")
DEFAULT_EXCESS_PCT: Final = 5.0


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
            communication_wait_ns=sum(w.communication_wait_ns for w in ws),
            idle_host_dispatch_ns=sum(w.idle_host_dispatch_ns for w in ws),
            idle_sync_ns=sum(w.idle_sync_ns for w in ws),
            idle_dataloader_ns=sum(w.idle_dataloader_ns for w in ws),
            idle_launch_latency_ns=sum(w.idle_launch_latency_ns for w in ws),
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
    for name in CLUSTER_STEP_NS_COLUMNS:
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
    kernels: pa.Table | None = None,
) -> tuple[SlowRank, ...]:
    """Ranks that work longer than the others' median and wait less (see the module doc).
    ``kernels`` (rank, name, dur_ns: the compute kernels in the compared windows) name the
    kernels a rank whose cause is more compute spends longer in."""
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
        # the time the others sit waiting for it: their waits for peers when the split is
        # known, else their whole exposed communication
        waiting = (
            "communication_wait"
            if any(a.communication_wait_ns for a in accounts)
            else "communication"
        )
        wait = account.per_window(waiting)
        others_wait = statistics.median(a.per_window(waiting) for a in others)
        compute_excess = _excess_pct(compute, others_compute)
        outside_excess = _excess_pct(outside, others_outside)
        if max(compute_excess, outside_excess) <= excess_pct:
            continue
        if wait >= others_wait:
            continue  # nobody waits for it longer than it waits for them
        arrival = arrivals.get(account.rank)
        suspects.append(
            SlowRank(
                rank=account.rank,
                wait_caused_ns=others_wait - wait,
                compute_excess_pct=compute_excess,
                outside_excess_pct=outside_excess,
                compute_ns=compute,
                others_compute_ns=others_compute,
                outside_communication_ns=outside,
                others_outside_communication_ns=others_outside,
                communication_ns=communication,
                others_communication_ns=others_communication,
                wait_ns=wait,
                others_wait_ns=others_wait,
                last_arrivals=arrival.last_arrivals if arrival else 0,
                collectives=arrival.collectives if arrival else 0,
                **_cause(account, others, kernels),
            )
        )
    suspects.sort(key=lambda s: (-s.wait_caused_ns, -s.last_arrivals, s.rank))
    return tuple(suspects)


def _cause(
    account: RankAccount, others: Sequence[RankAccount], kernels: pa.Table | None
) -> dict[str, Any]:
    """What the rank did instead while the others waited: the category of its account that
    exceeds the others' median the most, per window (SLOW_CAUSES)."""

    def per_window(a: RankAccount, category: str) -> float:
        if category == "copies":
            return a.per_window("memcpy") + a.per_window("memset")
        return a.per_window(category)

    excess = {
        category: per_window(account, category)
        - statistics.median(per_window(a, category) for a in others)
        for category in SLOW_CAUSES
    }
    category = max(excess, key=lambda c: (excess[c], c == "compute"))
    ops = (
        _kernel_excess(kernels, account, others)
        if category == "compute" and kernels is not None
        else ()
    )
    return {
        "cause": SLOW_CAUSES[category],
        "cause_excess_ns": max(excess[category], 0.0),
        "cause_ops": ops,
    }


def _kernel_excess(
    kernels: pa.Table, account: RankAccount, others: Sequence[RankAccount], top: int = 3
) -> tuple[tuple[str, float], ...]:
    """The kernels ``account``'s rank spends longer in per window than the others' median."""
    per_rank: dict[int, dict[str, int]] = {}
    for rank, name, dur in zip(
        kernels["rank"].to_pylist(),
        kernels["name"].to_pylist(),
        kernels["dur_ns"].to_pylist(),
        strict=True,
    ):
        totals = per_rank.setdefault(rank, {})
        totals[name] = totals.get(name, 0) + dur

    def per_window(a: RankAccount, name: str) -> float:
        return per_rank.get(a.rank, {}).get(name, 0) / a.windows if a.windows else 0.0

    excess = [
        (name, per_window(account, name) - statistics.median(per_window(a, name) for a in others))
        for name in per_rank.get(account.rank, {})
    ]
    excess = sorted((e for e in excess if e[1] > 0), key=lambda e: (-e[1], e[0]))
    return tuple(excess[:top])


def _outside(account: RankAccount) -> float:
    return account.outside_communication_ns / account.windows if account.windows else 0.0


def _excess_pct(value: float, reference: float) -> float:
    return 100.0 * (value - reference) / reference if reference > 0 else 0.0


def step_kernels(rank: int, events: pa.Table) -> pa.Table:
    """A rank's compute kernels (rank, name, dur_ns) inside its steps, or all of them when
    it has no steps: the work its step windows compare."""
    keep = pc.equal(events["kind"], KERNEL)
    in_steps = pc.and_(keep, pc.not_equal(events["step"], NO_STEP))
    if pc.any(in_steps).as_py():
        keep = in_steps
    kernels = events.filter(keep)
    return pa.table(
        {
            "rank": pa.array([rank] * kernels.num_rows, pa.int64()),
            "name": kernels["name"],
            "dur_ns": kernels["dur_ns"],
        }
    )


def cluster_report(
    windows: Sequence[WindowAccount],
    collectives: pa.Table,
    links: pa.Table | None = None,
    *,
    ranks: Sequence[int] | None = None,
    excess_pct: float = DEFAULT_EXCESS_PCT,
    matrix: pa.Table | None = None,
    offsets_ns: dict[int, int] | None = None,
    kernels: pa.Table | None = None,
) -> ClusterReport:
    """The cluster pass over every rank's window accounts and collectives (COLLECTIVES_SCHEMA).

    Args:
        windows: the device window accounts of every rank (step and span rows).
        collectives: the communication tasks of every rank.
        links: link figures of every rank (LINKS_SCHEMA), when the source has them.
        ranks: every rank of the profile (default: the ranks of ``windows``).
        excess_pct: how much longer than the others a rank must work to be a suspect.
        matrix: the run's communication matrix (MATRIX_SCHEMA), when the source has one; its
            slow links are found once here, for every view of the cluster.
        offsets_ns: the ranks' clock offsets against the first rank
            (:mod:`perfledger.analysis.cluster.arrivals`): arrivals are compared on one clock.
        kernels: every rank's compute kernels in its compared windows (rank, name, dur_ns),
            to name the kernels of a rank that is slow from more compute.
    """
    basis, compared = cluster_windows(windows)
    accounts = rank_accounts(compared)
    all_ranks = tuple(sorted(set(ranks) if ranks is not None else {a.rank for a in accounts}))
    alignment = align_collectives(collectives, all_ranks, offsets_ns)
    matrix = matrix if matrix is not None else MATRIX_SCHEMA.empty_table()
    return ClusterReport(
        ranks=all_ranks,
        basis=basis,
        per_rank=accounts,
        balance=load_balance(accounts),
        slow_ranks=slow_ranks(accounts, alignment, excess_pct=excess_pct, kernels=kernels),
        collectives=alignment,
        links=links if links is not None else LINKS_SCHEMA.empty_table(),
        steps=step_table(compared),
        matrix=matrix,
        slow_links=pa.Table.from_pylist(slow_links(matrix), schema=MATRIX_SCHEMA),
        clock_offsets_ns=dict(offsets_ns or {}),
    )
