"""The advisor's replayed gains on a profile of several ranks, the ranks replayed together.

Each rank's diagnosis replays its fixes on the rank alone, where a collective keeps its
observed duration. Replayed together (:class:`~perfledger.analysis.replay_together.
RanksTogether`), a fix on the rank the others wait for also shortens their waits, and a fix
on a rank that waits gains nothing. So each fix is replayed again on every rank at once —
applied on the ranks where its rule fired (each rank's own change: its rows, its kernels),
the others unchanged — and each rank's gain from it is kept, also where the rule did not
fire: ``whatif_ms`` adds up what every rank gains
(:func:`~perfledger.analysis.advisor.whatif.merged_whatif_ms`). The top fixes are combined
the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from perfledger.analysis.advisor.ranks import merge_rank_findings
from perfledger.analysis.advisor.whatif import ranked, top_fixes
from perfledger.analysis.profile import ranks_replay
from perfledger.analysis.replay_together import (
    RanksTogether,
    any_collectives,
    replayed_alone,
    unsettled_arrivals,
)
from perfledger.model.findings import CombinedFix, RankAdvice
from perfledger.model.profile import ProfileAnalysis
from perfledger.model.whatif import WhatIf, together


def advice_together(
    ranks: RanksTogether, advice: Sequence[RankAdvice], rule_order: Sequence[str]
) -> tuple[RankAdvice, ...]:
    """The ranks' advice with every fix's gains, their baselines and the top fixes'
    combination replayed with the ranks together (``rule_order``: the rule ids in the order
    the advisor lists them); as it is when no collective is matched across the ranks."""
    if not ranks.together or len(advice) < 2:
        return tuple(advice)
    # the fixes of the findings each rank has (a finding made again once the ranks were
    # aligned may be gone: its fix with it)
    advice = [replace(a, fixes=_present(a)) for a in advice]
    rules = sorted({rule for a in advice for rule in a.fixes})
    changes: list[dict[int, WhatIf]] = [
        {a.rank: a.fixes[rule] for a in advice if rule in a.fixes} for rule in rules
    ]
    gained = ranks.gains([*changes, {}])
    baselines = gained[-1]
    updated = []
    for a in advice:  # a loop over ranks
        if a.rank not in baselines:  # a rank without events
            updated.append(a)
            continue
        gains = {rule: gained[k][a.rank] for k, rule in enumerate(rules)}
        findings = [
            replace(f, whatif_ms=gains[f.id].gain_ms) if f.id in a.fixes else f for f in a.findings
        ]
        updated.append(
            replace(
                a,
                findings=tuple(ranked(findings)),
                gains=gains,
                baseline=baselines[a.rank],
                combined=None,
            )
        )
    merged, _ = merge_rank_findings(updated, rule_order)
    ids = top_fixes(merged)
    if not ids:
        return tuple(updated)
    if len(ids) == 1:  # one fix: its own gains
        combined = {a.rank: a.gains[ids[0]] for a in updated if ids[0] in a.gains}
    else:
        combination = {
            a.rank: together([a.fixes[i] for i in ids if i in a.fixes])
            for a in updated
            if any(i in a.fixes for i in ids)
        }
        combined = ranks.gains([combination])[0]
    return tuple(
        replace(a, combined=CombinedFix(ids, combined[a.rank])) if a.rank in combined else a
        for a in updated
    )


def _present(advice: RankAdvice) -> dict[str, WhatIf]:
    present = {f.id for f in advice.findings}
    return {rule: change for rule, change in advice.fixes.items() if rule in present}


def replayed_together(analysis: ProfileAnalysis, rule_order: Sequence[str]) -> ProfileAnalysis:
    """A profile of several ranks whose ranks were replayed alone (in their tasks) with the
    ranks replayed together: each matched rank's critical paths, the profile's replay (and
    its count of collectives not matched across the ranks), the rank tasks' advice (its gains
    and combination) and the quality report's ``replayed_alone``; as it is with one rank or
    no collective (``rule_order``: as :func:`advice_together` takes it).
    ``timings['replay_together_s']``: the seconds it took."""
    if not any_collectives(analysis.ranks):
        return analysis
    started = time.perf_counter()
    ranks = RanksTogether(analysis.ranks)
    reports = ranks.reports()
    alone = replayed_alone(ranks)
    rank_analyses = tuple(
        replace(
            r,
            replay=reports.get(r.rank, r.replay),
            quality=r.quality + ((alone[r.rank],) if r.rank in alone else ()),
        )
        for r in analysis.ranks
    )
    advice = analysis.rank_advice
    if advice is not None:
        advice = advice_together(ranks, advice, rule_order)
        unsettled = unsettled_arrivals(ranks)
        if unsettled:  # a profile-wide check, filed with the first rank's
            first = rank_analyses[0]
            rank_analyses = (replace(first, quality=first.quality + unsettled), *rank_analyses[1:])
    replay = ranks_replay(rank_analyses)
    if replay is not None:
        unmatched = ranks.arrivals.contradicted + ranks.arrivals.unmatched
        replay = replace(replay, unmatched_collectives=unmatched)
    return replace(
        analysis,
        ranks=rank_analyses,
        replay=replay,
        rank_advice=advice,
        timings={**analysis.timings, "replay_together_s": time.perf_counter() - started},
    )
