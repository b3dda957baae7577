"""slow_rank: one rank works longer and every other rank waits for it in the collectives.

In synchronous data-parallel training every rank meets the others at each collective, so the
step of the whole job is the step of its slowest rank. A rank that computes (or copies, or
idles for its host) longer arrives late; the others sit in the collective waiting: their
exposed communication grows while the slow rank's shrinks. The rule reads the cluster pass
(:mod:`perfledger.analysis.cluster.balance`): a rank whose compute, or time outside communication,
exceeds the other ranks' median by more than ``excess_pct`` while it waits less than they do
is named, most suspect first (by the wait it causes: the others' exposed communication minus
its own), with the collectives it arrived last at when they can be aligned (the vote of
msprof-analyze's slow-rank analysis). Profiles of one rank have nothing to compare: the rule
does not run on them.
"""

from __future__ import annotations

from typing import Any, Final

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.cluster.balance import DEFAULT_EXCESS_PCT, cluster_windows, slow_ranks
from perfledger.model.findings import TOP_OFFENDERS, Finding, Threshold, ms, pct

ID: Final = "slow_rank"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """A rank working more than excess_pct longer than the others' median, waiting less."""
    cluster = ctx.analysis.cluster
    if cluster is None:
        return None
    suspects = slow_ranks(cluster.per_rank, cluster.collectives, excess_pct=p["excess_pct"])
    if not suspects:
        return None
    top = suspects[0]
    mean_wall = sum(a.wall_ns for a in cluster.per_rank) / sum(a.windows for a in cluster.per_rank)
    alignment = cluster.collectives
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
    evidence: dict[str, Any] = {
        "ranks": len(cluster.ranks),
        "compared": "step windows" if cluster.basis == "steps" else "whole device spans",
        "suspects": [s.evidence() for s in suspects[:TOP_OFFENDERS]],
        "collectives_aligned": alignment.aligned,
        "last_arrivals_by_rank": {str(a.rank): a.last_arrivals for a in alignment.arrivals},
        "suspect_steps": steps,
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
    return Finding(
        id=ID,
        title=(
            f"Slow rank {top.rank}: {longer} than the other ranks, which wait "
            f"{ms(top.wait_caused_ns)} ms per step for it in collectives{votes}"
        ),
        severity_ms=ms(top.wait_caused_ns),
        severity_pct=pct(top.wait_caused_ns, mean_wall),
        evidence=evidence,
        suggestion=(
            f"Find why rank {top.rank} works longer: compare its step_trace.csv rows and "
            "op_statistic with another rank's (uneven data — sequence lengths, batch sizes, "
            "a skewed shard or expert routing —, a throttled or different device, a busier "
            "host: data-loader workers, CPU affinity, other jobs). Balance the work per rank "
            "(length-bucketed or token-balanced batches, re-partitioned pipeline stages or "
            "experts) or move the rank off the faulty node."
        ),
        verify=(
            "Re-profile every rank: the rank's time outside communication per step in "
            "cluster_step_trace.csv must fall to the others' median, the other ranks' exposed "
            "communication must shrink, and the step time drop by about the excess."
        ),
        estimate=(
            "The other ranks' median exposed communication per step minus the suspect's own: "
            "how long they sit in collectives waiting for it."
        ),
        spans=spans_of(steps),
    )


RULE: Final = Rule(
    id=ID,
    title="one rank works longer and the others wait for it",
    checks="per-rank compute and exposed communication against the other ranks' (2+ ranks)",
    thresholds=(
        Threshold(
            "excess_pct",
            DEFAULT_EXCESS_PCT,
            "%",
            "how much longer than the other ranks' median a rank must compute (or work outside "
            "communication) to be named",
            "the issue's load-balance bound (spread above 5%); msprof-analyze's slow-rank vote",
        ),
    ),
    check=check,
)
