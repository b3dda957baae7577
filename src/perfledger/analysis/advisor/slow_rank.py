"""slow_rank: one rank arrives late at the collectives and every other rank waits for it.

In synchronous data-parallel training every rank meets the others at each collective, so the
step of the whole job is the step of its slowest rank. A rank that computes (or copies, or
idles for its host) longer arrives late; the others sit in the collective waiting: their
waiting for peers grows while the slow rank's shrinks. The rule reads the cluster pass
(:mod:`perfledger.analysis.cluster.balance`): a rank whose compute, or time outside
communication, exceeds the other ranks' median by more than ``excess_pct`` while it waits less
than they do is named, most suspect first (by the wait it causes: the others' median wait for
peers minus its own, their exposed communication when the trace cannot split it), with the
collectives it arrived last at on the aligned clocks (the vote of msprof-analyze's slow-rank
analysis) and its cause: the category of its time account that exceeds the others' the most
(data loader, host dispatch, sync, compute with the kernels, copies).

The late rank may be outside the profile: when the collectives' groups have more members than
ranks were profiled (a group of 8, 2 profiled — or one rank profiled alone) and every profiled
rank spends most of its exposed communication, and over ``peer_wait_pct`` of its step, waiting,
the finding names an unprofiled peer, for the least any profiled rank waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.cluster.balance import (
    DEFAULT_EXCESS_PCT,
    cluster_windows,
    slow_ranks,
    step_kernels,
)
from perfledger.analysis.comm_split import ESTIMATED, MEASURED
from perfledger.model.accounts import WindowAccount
from perfledger.model.cluster import UNPROFILED_PEER, ClusterReport, SlowRank
from perfledger.model.findings import TOP_OFFENDERS, Finding, Threshold, ms, pct

ID: Final = "slow_rank"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """A rank working more than excess_pct longer than the others' median, waiting less; or
    a rank outside the profile that every profiled rank waits for."""
    cluster = ctx.analysis.cluster
    suspects: tuple[SlowRank, ...] = ()
    if cluster is not None:
        kernels = pa.concat_tables([step_kernels(r.rank, r.events) for r in ctx.analysis.ranks])
        suspects = slow_ranks(
            cluster.per_rank, cluster.collectives, excess_pct=p["excess_pct"], kernels=kernels
        )
    peer = unprofiled_peer(ctx, p["peer_wait_pct"])
    if not suspects and peer is None:
        return None
    top = suspects[0] if suspects else None
    evidence: dict[str, Any] = {
        "ranks": len(ctx.analysis.ranks),
        "suspects": [s.evidence() for s in suspects[:TOP_OFFENDERS]],
    }
    if peer is not None:
        first = top is None or peer.wait_ns >= top.wait_caused_ns
        evidence["suspects"].insert(0 if first else 1, peer.evidence())
    steps: list[dict[str, Any]] = []
    if cluster is not None:
        evidence.update(_alignment_evidence(cluster))
    if top is not None:
        _, compared = cluster_windows(
            [w for r in ctx.analysis.ranks if r.rank == top.rank for w in r.accounting.windows]
        )
        slowest = sorted(compared, key=lambda w: (-w.compute_ns, w.step))[:TOP_OFFENDERS]
        steps = [
            offender(
                w.rank,
                w.step,
                w.start_ns,
                w.end_ns,
                device=w.device,
                outside_communication_ms=ms(w.wall_ns - w.communication_ns),
                compute_ms=ms(w.compute_ns),
                communication_ms=ms(w.communication_ns),
            )
            for w in slowest
        ]
        evidence["suspect_steps"] = steps
    caused = (top.wait_caused_ns if top is not None else 0.0) + (
        peer.wait_ns if peer is not None else 0.0
    )
    mean_wall = ctx.basis.mean_step_ns
    if top is not None and (peer is None or top.wait_caused_ns > peer.wait_ns):
        title = _rank_title(top)
        if peer is not None:
            title += f"; {peer.short()}"
        suggestion = _CAUSE_ADVICE.get(top.cause, "") + _BALANCE_ADVICE.format(rank=top.rank)
    else:
        assert peer is not None
        title = peer.title()
        if top is not None:
            title += (
                f"; rank {top.rank} adds {ms(top.wait_caused_ns)} ms (cause: {_cause_text(top)})"
            )
        suggestion = _PEER_ADVICE.format(group=peer.group, profiled=peer.profiled)
    return Finding(
        id=ID,
        title=title,
        severity_ms=ms(caused),
        severity_pct=pct(caused, mean_wall),
        evidence=evidence,
        suggestion=suggestion,
        verify=(
            "Re-profile every rank: the late rank's time outside communication per step in "
            "cluster_step_trace.csv must fall to the others' median, the other ranks' "
            "communication_wait_ns must shrink, and the step time drop by about the wait."
        ),
        estimate=(
            "The time the other ranks wait in collectives for the late rank per step: the "
            "others' median wait minus its own (their exposed communication when the trace "
            "cannot tell waiting from transfer), plus, when the groups have members that were "
            "not profiled and every profiled rank waits, the wait of the rank that waits least."
        ),
        spans=spans_of(steps),
    )


@dataclass(frozen=True)
class UnprofiledPeer:
    """A late rank outside the profile: every profiled rank waits at least ``wait_ns`` per
    step in collectives whose groups have ``group`` members, ``profiled`` of them profiled."""

    group: int
    profiled: int
    wait_ns: float  # per step window: the least any profiled rank waits
    transfer_ns: float  # per step window, mean over the profiled ranks
    waits_ns: dict[int, float]  # per profiled rank, its wait per step window
    estimated: bool = False  # the waits are estimated from the messages and the link

    def evidence(self) -> dict[str, Any]:
        return {
            "rank": None,
            "cause": UNPROFILED_PEER,
            "wait_caused_ms": ms(self.wait_ns),
            "late_per_step_ms": ms(self.wait_ns),
            "group_size": self.group,
            "profiled_ranks": self.profiled,
            "transfer_ms": ms(self.transfer_ns),
            "wait_ms_by_rank": {str(r): ms(w) for r, w in sorted(self.waits_ns.items())},
            "wait_estimated": self.estimated,
            "last_arrivals": None,
            "collectives": None,
        }

    def short(self) -> str:
        return (
            f"a rank outside the profile ({self.profiled} of {self.group} profiled) adds "
            f"{ms(self.wait_ns)} ms"
        )

    def title(self) -> str:
        verb = "was" if self.profiled == 1 else "were"
        every = "the profiled rank waits" if self.profiled == 1 else "every profiled rank waits"
        note = _ESTIMATED_NOTE if self.estimated else ""
        return (
            f"Slow rank outside the profile: the collectives' groups have {self.group} ranks "
            f"and {self.profiled} {verb} profiled; {every} at least {ms(self.wait_ns)} ms per "
            f"step in collectives for a late peer (against {ms(self.transfer_ns)} ms of "
            f"transfer{note}): cause unprofiled peer"
        )


def unprofiled_peer(ctx: AdvisorContext, wait_pct: float) -> UnprofiledPeer | None:
    """The late rank outside the profile, when the collectives' groups are larger than the
    profile and every profiled rank waits for peers (most of its exposed communication, and
    over ``wait_pct`` of its step)."""
    group = 0
    sources: set[str] = set()
    for analysed in ctx.analysis.ranks:
        if analysed.comm is not None and analysed.comm.group_size.size:
            group = max(group, int(analysed.comm.group_size.max()))
            sources.update(analysed.comm.source)
    profiled = len(ctx.analysis.ranks)
    if group <= profiled:
        return None
    by_rank: dict[int, list[WindowAccount]] = {}
    for w in ctx.step_windows:
        by_rank.setdefault(w.rank, []).append(w)
    if len(by_rank) < profiled:
        return None
    waits: dict[int, float] = {}
    transfers = []
    for rank, ws in by_rank.items():
        wait = sum(w.communication_wait_ns for w in ws)
        exposed = sum(w.communication_ns for w in ws)
        wall = sum(w.wall_ns for w in ws)
        if pct(wait, exposed) < _MOSTLY_WAITING_PCT or pct(wait, wall) <= wait_pct:
            return None
        waits[rank] = wait / len(ws)
        transfers.append(sum(w.communication_transfer_ns for w in ws) / len(ws))
    return UnprofiledPeer(
        group=group,
        profiled=profiled,
        wait_ns=min(waits.values()),
        transfer_ns=sum(transfers) / len(transfers),
        waits_ns=waits,
        estimated=ESTIMATED in sources and MEASURED not in sources,
    )


def _alignment_evidence(cluster: ClusterReport) -> dict[str, Any]:
    alignment = cluster.collectives
    evidence: dict[str, Any] = {
        "compared": "step windows" if cluster.basis == "steps" else "whole device spans",
        "collectives_aligned": alignment.aligned,
        "last_arrivals_by_rank": {str(a.rank): a.last_arrivals for a in alignment.arrivals},
        "clock_offsets_ns": {str(r): o for r, o in sorted(cluster.clock_offsets_ns.items())},
    }
    if alignment.aligned:
        evidence["arrival_spread_median_ms"] = ms(alignment.median_spread_ns)
        evidence["arrival_spread_max_ms"] = ms(alignment.max_spread_ns)
        evidence["most_skewed_collectives"] = [
            offender(
                c.last_rank,
                c.step,
                c.first_start_ns,
                c.first_start_ns + c.arrival_spread_ns,
                name=c.name,
                occurrence=c.occurrence,
                first_rank=c.first_rank,
                last_rank=c.last_rank,
                arrival_spread_ms=ms(c.arrival_spread_ns),
            )
            for c in alignment.worst
        ]
    library_wait = {str(a.rank): ms(a.library_wait_ns) for a in alignment.arrivals}
    if all(a.library_wait_ns >= 0 for a in alignment.arrivals) and alignment.arrivals:
        evidence["collective_library_wait_ms_by_rank"] = library_wait
    return evidence


def _rank_title(top: SlowRank) -> str:
    votes = (
        f"; last to arrive at {top.last_arrivals} of {top.collectives} aligned collectives"
        if top.collectives
        else ""
    )
    longer = (
        f"computes {top.compute_excess_pct:.1f}% longer"
        if top.compute_excess_pct >= top.outside_excess_pct
        else f"works {top.outside_excess_pct:.1f}% longer outside communication"
    )
    return (
        f"Slow rank {top.rank}: {longer} than the other ranks, which wait "
        f"{ms(top.wait_caused_ns)} ms per step for it in collectives{votes}; "
        f"cause: {_cause_text(top)}"
    )


_ESTIMATED_NOTE: Final = ", estimated from the messages' sizes and the link's bandwidth"
_MOSTLY_WAITING_PCT: Final = 50.0  # a rank "waits" when most of its exposed communication does
_BALANCE_ADVICE: Final = (
    "Find why rank {rank} works longer: compare its step_trace.csv rows and op_statistic with "
    "another rank's (uneven data — sequence lengths, batch sizes, a skewed shard or expert "
    "routing —, a throttled or different device, a busier host: data-loader workers, CPU "
    "affinity, other jobs). Balance the work per rank (length-bucketed or token-balanced "
    "batches, re-partitioned pipeline stages or experts) or move the rank off the faulty node."
)
_PEER_ADVICE: Final = (
    "Overlap or bucket tuning will not help: the time is waiting for a peer, not moving data. "
    "Profile every rank of the group ({group} ranks, {profiled} profiled here) and analyse them "
    "together: perfledger then names the rank that arrives last and what it does instead "
    "(data loader, host dispatch, syncs, compute, copies). Usual causes: uneven data per rank "
    "(sequence lengths, batch sizes), a slower or throttled device, a busier host (data-loader "
    "workers, CPU affinity, other jobs)."
)


# What to look at first, by the slow rank's cause (SLOW_CAUSES' values).
_CAUSE_ADVICE: Final = {
    "data loader": (
        "Its device waits for its data loader: give it more workers, pin_memory and "
        "prefetching, or a faster store for its shard. "
    ),
    "host dispatch": (
        "Its host launches kernels slower than its device runs them: check that node's CPU "
        "(affinity, frequency, other processes), or capture the step in a CUDA/ACL graph. "
    ),
    "sync": (
        "It stops for host-device synchronisations the others do not: look for .item(), "
        "printing or logging of tensors on that rank only. "
    ),
    "compute": (
        "Its device computes longer: the kernels that take longer there are listed in "
        "cause_ops — uneven inputs, or a slower or throttled device. "
    ),
    "copies": (
        "It copies more between host and device: look for tensors moved on that rank only "
        "(logging, metrics, checkpoints). "
    ),
}


def _cause_text(top: SlowRank) -> str:
    """The slow rank's cause in words, with its excess and its kernels."""
    text = f"{top.cause} (+{ms(top.cause_excess_ns)} ms per step"
    if top.cause_ops:
        kernels = ", ".join(f"{name[:60]} +{ms(ns)} ms" for name, ns in top.cause_ops)
        text += f": {kernels}"
    return text + ")"


RULE: Final = Rule(
    id=ID,
    title="one rank works longer and the others wait for it",
    checks=(
        "per-rank compute and waiting for peers against the other ranks' (2+ ranks); the "
        "waiting of every profiled rank when the collectives' groups are larger than the profile"
    ),
    thresholds=(
        Threshold(
            "excess_pct",
            DEFAULT_EXCESS_PCT,
            "%",
            "how much longer than the other ranks' median a rank must compute (or work outside "
            "communication) to be named",
            "the issue's load-balance bound (spread above 5%); msprof-analyze's slow-rank vote",
        ),
        Threshold(
            "peer_wait_pct",
            10.0,
            "%",
            "how much of the step every profiled rank must wait in collectives for a late rank "
            "outside the profile to be named",
            "the msprof guides' checklist (communication > 10% of step), applied to its wait",
        ),
    ),
    check=check,
)
