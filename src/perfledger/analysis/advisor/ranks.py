"""The advisor on a profile of several ranks: each rank diagnosed on its own, findings merged.

Every rule but the profile-wide ones (:data:`PROFILE_RULES`: the run's profiler overhead and
the cluster pass's slow rank and load imbalance) reads one rank's events;
run on all ranks at once it would hold every rank's derived tables in one process. So each
rank is diagnosed alone — in the rank's own task when ranks are analysed as tasks — and only
its findings travel: a :class:`RankAdvice`, a few kB.

How findings of one rule on several ranks become one finding of the profile:

- it fires when it fires on at least one rank;
- its severity keeps the meaning it has on one rank — the recoverable time per step window of
  the profile (every rank's and device's windows) and its share of their wall time: each
  firing rank's recoverable time (its ms per step times its windows) summed, over the windows
  and wall time of every rank, including those where the rule stayed silent;
- the title, evidence, suggestion and estimate are those of the rank where it is most severe,
  the title naming that rank and how many ranks it fired on; the evidence adds
  ``worst_rank``, ``ranks`` (where it fired) and ``per_rank`` (each firing rank's severity);
- its replayed gain (``whatif_ms``) is each firing rank's gain over its replayed steps, summed,
  over the replayed steps of every rank (with the ranks replayed together,
  :mod:`~perfledger.analysis.advisor.together`, every rank's gain from the fix);
- its timeline spans are the worst rank's, then the other firing ranks' (by severity), each
  rank's as its own finding gave them, at most :data:`MERGED_SPANS` in all;
- a rule is reported skipped only when every rank skipped it (the first rank's reason).

The rules that read the communication split (:data:`SPLIT_RULES`) are diagnosed again on each
rank once the cluster pass has measured the waits across ranks, which the rank tasks cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from perfledger.analysis.advisor.whatif import merged_whatif_ms
from perfledger.model.findings import MAX_SPANS, Finding, RankAdvice, Skipped, pct

# Rules that read the whole profile, not one rank: run once, over every rank.
PROFILE_RULES: Final = frozenset({"profiler_overhead_high", "slow_rank", "load_imbalance"})
# Rank rules that read the communication split, which the cluster pass measures again across
# ranks after the rank tasks ran: their findings are made again on the aligned ranks.
SPLIT_RULES: Final = frozenset({"exposed_communication"})
# Spans a merged finding keeps: summary.json and the timeline's finding track stay small on
# runs of hundreds of ranks (five times what one finding is meant to carry).
MERGED_SPANS: Final = 5 * MAX_SPANS


def merge_rank_findings(
    advice: Sequence[RankAdvice], rule_order: Sequence[str]
) -> tuple[list[Finding], list[Skipped]]:
    """One finding per rule from the findings of each rank (see the module docstring).

    Args:
        advice: every rank's advice (ranks where a rule was silent count in its severity).
        rule_order: rule ids in the order their findings and skips are listed.
    """
    windows = sum(a.basis.windows for a in advice)
    wall_ns = sum(a.basis.wall_ns for a in advice)
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for rule_id in rule_order:
        fired = [(a, f) for a in advice for f in a.findings if f.id == rule_id]
        if fired:
            merged = _merged(fired, len(advice), windows, wall_ns)
            gain = merged_whatif_ms(rule_id, advice, [a for a, _ in fired])
            findings.append(replace(merged, whatif_ms=gain) if len(advice) > 1 else merged)
            continue
        skips = [s for a in advice for s in a.skipped if s.rule == rule_id]
        if advice and len(skips) == len(advice):
            skipped.append(skips[0])
    return findings, skipped


def _merged(
    fired: Sequence[tuple[RankAdvice, Finding]], ranks: int, windows: int, wall_ns: int
) -> Finding:
    if len(fired) == 1 and ranks == 1:
        return fired[0][1]
    ordered = sorted(fired, key=lambda af: (-af[1].severity_ms, -af[1].severity_pct, af[0].rank))
    worst_advice, worst = ordered[0]
    recoverable_ns = sum(f.severity_ms * 1e6 * a.basis.windows for a, f in fired)
    severity_ms = round(recoverable_ns / windows / 1e6, 3) if windows else 0.0
    evidence: dict[str, Any] = {
        **worst.evidence,
        "worst_rank": worst_advice.rank,
        "ranks": sorted(a.rank for a, _ in fired),
        "per_rank": [
            {"rank": a.rank, "severity_ms": f.severity_ms, "severity_pct": f.severity_pct}
            for a, f in sorted(fired, key=lambda af: af[0].rank)
        ],
    }
    where = f"rank {worst_advice.rank}" + (
        f"; fires on {len(fired)} of {ranks} ranks" if len(fired) > 1 else f" of {ranks}"
    )
    return Finding(
        id=worst.id,
        title=f"{worst.title} ({where})",
        severity_ms=severity_ms,
        severity_pct=pct(recoverable_ns, wall_ns),
        evidence=evidence,
        suggestion=worst.suggestion,
        verify=worst.verify,
        estimate=worst.estimate,
        spans=tuple(s for _, f in ordered for s in f.spans)[:MERGED_SPANS],
    )
