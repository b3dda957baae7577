"""load_imbalance: the ranks do uneven amounts of compute, communication, copies or idling.

For each category of the accounting the cluster pass (:mod:`perfledger.analysis.cluster.balance`)
gives the spread of the per-rank means per step, ``(max - min) / mean``. A category above
``spread_pct`` fires, unless it is too small to matter (its mean under ``min_step_pct`` of the
step). The step is bound by the rank that does the most: evening the category out to its mean
would recover ``max - mean`` per step, the severity of the worst category. Profiles of one rank
have nothing to compare: the rule does not run on them.
"""

from __future__ import annotations

from typing import Any, Final

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.cluster.balance import cluster_windows
from perfledger.model.cluster import Spread
from perfledger.model.findings import TOP_OFFENDERS, Finding, Threshold, ms, pct

ID: Final = "load_imbalance"
# Categories the rule judges (the step time itself is the consequence, shown as evidence).
_JUDGED: Final = ("compute", "communication", "memcpy", "idle")


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """A category whose per-rank spread exceeds spread_pct (and min_step_pct of the step)."""
    cluster = ctx.analysis.cluster
    if cluster is None or not cluster.balance:
        return None
    wall = cluster.spread("wall")
    mean_wall = wall.mean_ns if wall is not None else 0.0
    flagged = [
        s
        for s in cluster.balance
        if s.category in _JUDGED
        and s.spread_pct > p["spread_pct"]
        and pct(s.mean_ns, mean_wall) >= p["min_step_pct"]
    ]
    if not flagged:
        return None
    flagged.sort(key=lambda s: (-(s.max_ns - s.mean_ns), s.category))
    worst = flagged[0]
    _, compared = cluster_windows(
        [w for r in ctx.analysis.ranks if r.rank == worst.max_rank for w in r.accounting.windows]
    )
    field_name = f"{worst.category}_ns"
    heaviest = sorted(compared, key=lambda w: -int(getattr(w, field_name)))[:TOP_OFFENDERS]
    steps = [
        offender(
            w.rank,
            w.step,
            w.start_ns,
            w.end_ns,
            device=w.device,
            **{f"{worst.category}_ms": ms(getattr(w, field_name)), "wall_ms": ms(w.wall_ns)},
        )
        for w in heaviest
    ]
    evidence: dict[str, Any] = {
        "ranks": len(cluster.ranks),
        "compared": "step windows" if cluster.basis == "steps" else "whole device spans",
        "spreads": [_spread(s, mean_wall) for s in cluster.balance],
        "imbalanced": [s.category for s in flagged],
        "per_rank_ms_per_step": [
            {
                "rank": a.rank,
                "wall": ms(a.per_window("wall")),
                "compute": ms(a.per_window("compute")),
                "communication": ms(a.per_window("communication")),
                "memcpy": ms(a.per_window("memcpy")),
                "idle": ms(a.per_window("idle")),
            }
            for a in cluster.per_rank
        ],
        "heaviest_steps": steps,
    }
    recoverable = worst.max_ns - worst.mean_ns
    return Finding(
        id=ID,
        title=(
            f"Load imbalance across {len(cluster.ranks)} ranks: {worst.category} spread "
            f"{worst.spread_pct:.1f}% (rank {worst.max_rank} {ms(worst.max_ns)} ms, rank "
            f"{worst.min_rank} {ms(worst.min_ns)} ms per step)"
        ),
        severity_ms=ms(recoverable),
        severity_pct=pct(recoverable, mean_wall),
        evidence=evidence,
        suggestion=(
            "Give every rank the same work: balance samples by cost (sequence-length "
            "bucketing, token-balanced batches, even data shards), re-partition pipeline "
            "stages or experts by measured time, and check that the heaviest rank's device and "
            "host are like the others (clock throttling, a shared or busier host). Uneven "
            "communication with even compute usually means ranks wait for a slow one: see "
            "slow_rank."
        ),
        verify=(
            "Re-profile every rank: the spread of the category in cluster_summary.json must "
            "fall under the threshold and the step time drop by about the recovered time."
        ),
        estimate=(
            "The most imbalanced category's per-rank maximum minus its mean, per step: what "
            "evening it out would save the rank every other rank waits for."
        ),
        spans=spans_of(steps),
    )


def _spread(s: Spread, mean_wall: float) -> dict[str, Any]:
    return {
        "category": s.category,
        "spread_pct": round(s.spread_pct, 2),
        "mean_ms": ms(s.mean_ns),
        "share_of_step_pct": pct(s.mean_ns, mean_wall),
        "min_ms": ms(s.min_ns),
        "min_rank": s.min_rank,
        "max_ms": ms(s.max_ns),
        "max_rank": s.max_rank,
    }


RULE: Final = Rule(
    id=ID,
    title="ranks do uneven work",
    checks="spread (max - min) / mean of each category over the ranks (2+ ranks)",
    thresholds=(
        Threshold(
            "spread_pct",
            5.0,
            "%",
            "spread of a category over the ranks, (max - min) / mean",
            "the issue's load-balance bound (finding above 5%)",
        ),
        Threshold(
            "min_step_pct",
            1.0,
            "%",
            "categories smaller than this share of the step are not judged",
            "perfledger: a spread of microseconds is noise, not imbalance",
        ),
    ),
    check=check,
)
