"""The advisor: read a profile as the msprof guides' checklist does; say what holds the step back.

Each rule is one module of this package (one diagnosis, thresholds with documented defaults).
:func:`advise` runs them over a :class:`~perfledger.model.profile.ProfileAnalysis` and returns the
findings sorted by severity: the estimated time per step a fix would recover. A rule whose
data is absent from the profile (no shapes, no host counters, no data loader ...) does not
fire; :func:`skipped_rules` says which and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from perfledger.analysis.advisor import (
    dataloader_bound,
    excessive_sync,
    exposed_communication,
    fusion_candidates,
    host_cpu_saturated,
    host_dispatch_bound,
    load_imbalance,
    long_tail_ops,
    low_utilization_windows,
    memcpy_heavy,
    memory_bound_ops,
    precision_mix,
    profiler_overhead_high,
    slow_rank,
    small_op_explosion,
    whatif,
)
from perfledger.analysis.advisor.base import Outcome, Rule
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.advisor.ranks import PROFILE_RULES, SPLIT_RULES, merge_rank_findings
from perfledger.analysis.advisor.together import advice_together
from perfledger.analysis.profile import rank_profile
from perfledger.analysis.replay_together import RanksTogether, any_collectives
from perfledger.memory import drop_mapped_pages
from perfledger.model.findings import (
    AdvisorConfig,
    AdvisorReport,
    DeviceOverride,
    Finding,
    RankAdvice,
    Skipped,
    Threshold,
)
from perfledger.model.whatif import StepGains, together

if TYPE_CHECKING:
    from perfledger.analysis.critical_path import RankReplay
    from perfledger.model.profile import ProfileAnalysis

__all__ = [
    "RULES",
    "AdvisorConfig",
    "AdvisorReport",
    "DeviceOverride",
    "Finding",
    "RankAdvice",
    "Rule",
    "Skipped",
    "Threshold",
    "advise",
    "diagnose",
    "diagnose_rank",
    "rule_by_id",
    "skipped_rules",
]

# In DESIGN.md's order of finding ids.
RULES: Final[tuple[Rule, ...]] = (
    host_dispatch_bound.RULE,
    excessive_sync.RULE,
    small_op_explosion.RULE,
    memory_bound_ops.RULE,
    fusion_candidates.RULE,
    exposed_communication.RULE,
    memcpy_heavy.RULE,
    dataloader_bound.RULE,
    low_utilization_windows.RULE,
    long_tail_ops.RULE,
    host_cpu_saturated.RULE,
    profiler_overhead_high.RULE,
    precision_mix.RULE,
    slow_rank.RULE,
    load_imbalance.RULE,
)


def rule_by_id(rule_id: str) -> Rule | None:
    """The registered rule with this id."""
    return next((r for r in RULES if r.id == rule_id), None)


def diagnose(
    analysis: ProfileAnalysis,
    config: AdvisorConfig | None = None,
    *,
    overhead_pct: float | None = None,
    overhead_noise_pct: float | None = None,
    rules: Sequence[Rule] = RULES,
    replays: Sequence[RankReplay] | None = (),
) -> AdvisorReport:
    """Run every enabled rule once: findings (ranked by their replayed gain where they have
    one, else their severity: :mod:`perfledger.analysis.advisor.whatif`), skipped rules and
    the top fixes' combined gain.

    On a profile of several ranks the rank rules diagnose each rank alone and their findings
    are merged (:mod:`perfledger.analysis.advisor.ranks`); the ranks' advice computed by the
    rank tasks (``analysis.rank_advice``, one rank or several) is used when it was made with
    the same rules and configuration. ``overhead_pct`` and ``overhead_noise_pct``: the
    recorder's profiler overhead and its noise (None when unknown).
    """
    config = config or AdvisorConfig()
    context = AdvisorContext(
        analysis, config, overhead_pct, replays, overhead_noise_pct=overhead_noise_pct
    )
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    made = _made_advice(analysis, config, rules)
    advice: list[RankAdvice] = []
    if len(analysis.ranks) > 1 or made is not None:
        advice = made if made is not None else _rank_advice(analysis, config, rules)
        merged_findings, merged_skips = merge_rank_findings(advice, [r.id for r in rules])
        findings.extend(merged_findings)
        skipped.extend(merged_skips)
        rules = [r for r in rules if r.id in PROFILE_RULES]
    enabled = [rule for rule in rules if config.runs(rule.id)]

    def combine_ahead(replayed: Sequence[Finding | Skipped | None]) -> None:
        # the top fixes of the replaying rules replayed together while the others run: the
        # combination below takes that replay from the context unless their findings change
        # the top fixes
        ids = whatif.top_fixes([f for f in replayed if isinstance(f, Finding)])
        if len(ids) > 1:
            context.step_gains(together([context.fixes[i] for i in ids]))

    ahead = combine_ahead if not advice else None
    for outcome in _outcomes(enabled, context, config, analysis, ahead):
        if isinstance(outcome, Finding):
            findings.append(outcome)
        elif isinstance(outcome, Skipped):
            skipped.append(outcome)
    context.in_rule_order([rule.id for rule in enabled])
    order = {rule.id: position for position, rule in enumerate(RULES)}
    skipped.sort(key=lambda s: order.get(s.rule, len(order)))
    if advice:
        combined, slower = whatif.combined_over_ranks(findings, advice, context)
    else:
        combined, slower = whatif.combined_here(findings, context)
    return AdvisorReport(
        tuple(whatif.ranked(findings)),
        tuple(skipped),
        combined=combined,
        fixes=whatif.fixes_of(context.fixes, findings),
        gains={k: v for k, v in context.gains.items() if k in context.fixes},
        baseline=context.baseline() if not advice and context.fixes else StepGains(),
        slower_replays=slower,
    )


# The rules checked side by side: most of a rule's time on a large trace goes to numpy and
# Arrow kernels and to the compiled replay, which let go of the GIL.
RULE_THREADS: Final = 2


def _outcomes(
    rules: Sequence[Rule],
    context: AdvisorContext,
    config: AdvisorConfig,
    analysis: ProfileAnalysis,
    ahead: Callable[[list[Outcome]], None] | None = None,
) -> list[Outcome]:
    """Each rule's outcome, in the rules' order, the rules checked on
    :data:`RULE_THREADS` threads (the context computes each of its tables and replays once,
    whichever rule asks first): those that replay first, then ``ahead`` given their outcomes
    on this thread while the others are checked."""

    def check(rule: Rule) -> Outcome:
        outcome = rule.check(context, config.params(rule))
        # the pages of mapped tables it read (the events' args) let go before the next rule
        # reads others; what the rule derived and freed stays in the heap, for the next
        # rule's own (handed back to the system, it would be taken anew at once, each page
        # zeroed again): given back once the rules are done (diagnose's caller)
        drop_mapped_pages(analysis.events)
        return outcome

    if len(rules) < 2:
        return [check(rule) for rule in rules]
    first = [rule for rule in rules if rule.replays]
    then = [rule for rule in rules if not rule.replays]
    with ThreadPoolExecutor(RULE_THREADS, thread_name_prefix="advisor") as pool:
        futures = {rule.id: pool.submit(check, rule) for rule in [*first, *then]}
        if ahead is not None:
            ahead([futures[rule.id].result() for rule in first])
        return [futures[rule.id].result() for rule in rules]


def diagnose_rank(
    analysis: ProfileAnalysis,
    config: AdvisorConfig | None = None,
    *,
    rules: Sequence[Rule] = RULES,
    replays: Sequence[RankReplay] = (),
) -> RankAdvice:
    """The rank rules on a profile of one rank: what its rank task sends back (``replays``:
    the rank's step graph, already built by the task)."""
    config = config or AdvisorConfig()
    rank_rules = [r for r in rules if r.id not in PROFILE_RULES]
    report = diagnose(analysis, config, rules=rank_rules, replays=replays)
    context = AdvisorContext(analysis, config)
    return RankAdvice(
        rank=analysis.ranks[0].rank if analysis.ranks else 0,
        basis=context.basis,
        findings=report.findings,
        skipped=report.skipped,
        config=config,
        fixes=report.fixes,
        gains=report.gains,
        combined=report.combined,
        # what the rank's gains are per, also where no fix was replayed
        baseline=report.baseline
        if report.baseline.steps
        else AdvisorContext(analysis, config, replays=replays).baseline(),
    )


def _made_advice(
    analysis: ProfileAnalysis, config: AdvisorConfig, rules: Sequence[Rule]
) -> list[RankAdvice] | None:
    """The rank tasks' advice when made with these rules and this configuration."""
    made = analysis.rank_advice
    if made is not None and tuple(rules) == RULES and all(a.config == config for a in made):
        return list(made)
    return None


def _rank_advice(
    analysis: ProfileAnalysis, config: AdvisorConfig, rules: Sequence[Rule]
) -> list[RankAdvice]:
    """Each rank's advice, diagnosed here rank by rank, its fixes' gains then replayed with
    the ranks together (:mod:`perfledger.analysis.advisor.together`)."""
    advice = [
        diagnose_rank(rank_profile(analysis, position), config, rules=rules)
        for position in range(len(analysis.ranks))
    ]
    if not any_collectives(analysis.ranks):
        return advice
    ranks = RanksTogether(analysis.ranks)
    return list(advice_together(ranks, advice, [r.id for r in rules]))


def realigned_advice(analysis: ProfileAnalysis) -> tuple[RankAdvice, ...] | None:
    """The rank tasks' advice with the findings of the rules that read the communication split
    (:data:`~perfledger.analysis.advisor.ranks.SPLIT_RULES`) made again on each rank of
    ``analysis``, whose waits the cluster pass measured across ranks after the tasks ran."""
    made = analysis.rank_advice
    if made is None:
        return None
    rules = [r for r in RULES if r.id in SPLIT_RULES]
    position = {r.rank: i for i, r in enumerate(analysis.ranks)}
    refreshed = []
    for advice in made:
        if advice.rank not in position:
            refreshed.append(advice)
            continue
        # no replay here: the graph does not change with the waits, nor the fixes' gains
        report = diagnose(
            rank_profile(analysis, position[advice.rank]), advice.config, rules=rules, replays=None
        )
        again = whatif.carried_gains(report.findings, advice.findings, advice.gains)
        findings = whatif.ranked([f for f in advice.findings if f.id not in SPLIT_RULES] + again)
        # a finding gone with the new split takes its fix with it: its gain, and the
        # combination of the top fixes where it was one of them
        fixes = whatif.fixes_of(advice.fixes, findings)
        gone = set(advice.fixes) - set(fixes)
        combined = advice.combined
        if combined is not None and gone.intersection(combined.findings):
            combined = None
        refreshed.append(
            replace(
                advice,
                findings=tuple(findings),
                skipped=tuple(s for s in advice.skipped if s.rule not in SPLIT_RULES)
                + report.skipped,
                fixes=fixes,
                gains={rule: g for rule, g in advice.gains.items() if rule not in gone},
                combined=combined,
            )
        )
    return tuple(refreshed)


def advise(
    analysis: ProfileAnalysis,
    config: AdvisorConfig | None = None,
    *,
    overhead_pct: float | None = None,
) -> tuple[Finding, ...]:
    """The findings of every enabled rule on a profile, largest gain first (whatif_ms where
    the fix replays, else severity_ms)."""
    return diagnose(analysis, config, overhead_pct=overhead_pct).findings


def skipped_rules(
    analysis: ProfileAnalysis,
    config: AdvisorConfig | None = None,
    *,
    overhead_pct: float | None = None,
) -> list[tuple[str, str]]:
    """(rule id, reason) of every enabled rule whose precondition data is absent."""
    report = diagnose(analysis, config, overhead_pct=overhead_pct)
    return [(s.rule, s.reason) for s in report.skipped]
