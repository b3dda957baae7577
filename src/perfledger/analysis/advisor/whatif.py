"""The advisor on replay: findings ranked by their replayed gain, and the top fixes combined.

A rule whose fix is a change of the step graph (fewer synchronisations, fused chains, faster
dispatch, overlapped communication, faster data loading, pinned copies) replays that change
(:meth:`AdvisorContext.whatif_ms`) and sets its finding's ``whatif_ms``. Here:

- findings are ranked by their best estimate of the gain: ``whatif_ms`` where a finding has
  one, else its heuristic ``severity_ms``;
- the top fixes (at most :data:`~perfledger.model.findings.COMBINED_FIXES` findings with a
  positive ``whatif_ms``) are replayed together: fixes overlap (removing a sync and speeding up
  dispatch shorten the same host chain), so their combined gain is not the sum of theirs;
- on a profile of several ranks, each rank's fixes and gains come from its own diagnosis
  (:class:`~perfledger.model.findings.RankAdvice`); a combination a rank did not replay
  itself is replayed here on that rank's graph.

Every gain is per replayed step, each step's prediction kept within [0, its baseline], so
``0 <= whatif_ms <= step`` and the combined gain is at most the step (docs/advisor.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from perfledger.model.findings import COMBINED_FIXES, CombinedFix, Finding, RankAdvice
from perfledger.model.whatif import StepGains, WhatIf, together

if TYPE_CHECKING:
    from perfledger.analysis.advisor.context import AdvisorContext


def ranked(findings: Sequence[Finding]) -> list[Finding]:
    """Findings by their gain per step (replayed where known, else severity), largest first."""
    return sorted(findings, key=lambda f: (-f.gain_ms, -f.severity_pct, f.id))


def top_fixes(findings: Sequence[Finding]) -> tuple[str, ...]:
    """The ids of the findings whose fixes are combined: the largest positive replayed gains."""
    gaining = [f for f in findings if f.whatif_ms is not None and f.whatif_ms > 0]
    gaining.sort(key=lambda f: (-(f.whatif_ms or 0.0), f.id))
    return tuple(f.id for f in gaining[:COMBINED_FIXES])


def combined_here(
    findings: Sequence[Finding], context: AdvisorContext
) -> tuple[CombinedFix | None, int]:
    """The top fixes of findings diagnosed on ``context`` replayed together; and the replayed
    steps predicted longer than their baseline (by any fix or the combination)."""
    slower = sum(g.slower_replays for g in context.gains.values())
    ids = top_fixes(findings)
    if not ids:
        return None, slower
    if len(ids) == 1:
        gains = context.gains[ids[0]]
    else:
        gains = context.step_gains(together([context.fixes[i] for i in ids]))
        slower += gains.slower_replays
    return CombinedFix(ids, gains), slower


def combined_over_ranks(
    findings: Sequence[Finding], advice: Sequence[RankAdvice], context: AdvisorContext
) -> tuple[CombinedFix | None, int]:
    """The top fixes of findings merged from ranks replayed together on every rank: each
    rank's own combination when it is the same, else replayed here on that rank."""
    slower = sum(g.slower_replays for a in advice for g in a.gains.values())
    ids = top_fixes(findings)
    if not ids:
        return None, slower
    total = StepGains()
    for rank_advice in advice:  # a loop over ranks
        mine = [i for i in ids if i in rank_advice.fixes]
        made = rank_advice.combined
        if made is not None and set(made.findings) == set(ids):
            # the combination replayed with the ranks together (advisor/together.py)
            gains = made.gains
        elif not mine:
            gains = rank_advice.baseline
        elif len(mine) == 1:
            gains = rank_advice.gains[mine[0]]
        elif made is not None and set(made.findings) == set(mine):
            gains = made.gains
        else:
            change = together([rank_advice.fixes[i] for i in mine])
            gains = context.step_gains(change, [rank_advice.rank])
            slower += gains.slower_replays
        total = total + gains
    return CombinedFix(ids, total), slower


def merged_whatif_ms(
    rule_id: str, advice: Sequence[RankAdvice], fired: Sequence[RankAdvice]
) -> float | None:
    """A rule's replayed gain per step over every rank's replayed steps (ranks where it did
    not fire gain nothing, unless the ranks were replayed together: a rank without the fix
    then has the gain the others' fixes gave it); None when no rank where it fired could
    replay its fix."""
    if not any(rule_id in a.gains for a in fired):
        return None
    firing = {id(a) for a in fired}
    gains = [
        a.gains[rule_id]
        for a in advice
        if rule_id in a.gains and (id(a) in firing or rule_id not in a.fixes)
    ]
    steps = sum(a.baseline.steps for a in advice)
    gained = sum(g.baseline_ns - g.predicted_ns for g in gains)
    return round(gained / max(steps, 1) / 1e6, 3)


def carried_gains(
    findings: Sequence[Finding], earlier: Sequence[Finding], gains: Mapping[str, StepGains]
) -> list[Finding]:
    """Findings made again without a replay, each with the replayed gain of the same rule's
    earlier finding (its graph change is the same)."""
    from dataclasses import replace

    before = {f.id: f.whatif_ms for f in earlier}
    return [
        replace(f, whatif_ms=before.get(f.id)) if f.id in gains and f.whatif_ms is None else f
        for f in findings
    ]


def fixes_of(fixes: Mapping[str, WhatIf], findings: Sequence[Finding]) -> dict[str, WhatIf]:
    """The graph changes of the findings that are there."""
    present = {f.id for f in findings}
    return {k: v for k, v in fixes.items() if k in present}
