"""The profile's analysis from its rank tasks' results: the one way from ranks to a
:class:`~perfledger.model.profile.ProfileAnalysis`, for one rank or many."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import pyarrow as pa

from perfledger.analysis import ops
from perfledger.analysis.advisor import RULES, realigned_advice
from perfledger.analysis.advisor.together import replayed_together
from perfledger.analysis.cluster.balance import DEFAULT_EXCESS_PCT
from perfledger.analysis.cluster.merge import merge_gap_reports
from perfledger.analysis.profile import (
    align_ranks,
    cluster_pass,
    profile_communication,
    profile_gaps,
    ranks_replay,
    steps_table,
)
from perfledger.analysis.transfers import transfers_from_spellings
from perfledger.memory import release_freed_memory
from perfledger.model import schema
from perfledger.model.accounts import Accounting
from perfledger.model.findings import RankAdvice
from perfledger.model.profile import ProfileAnalysis, RankAnalysis
from perfledger.model.quality import (
    COMMUNICATION,
    SKIPPED_RANKS,
    STEP_TIME,
    TIME_ACCOUNT,
    UTILIZATION,
    QualityCheck,
)
from perfledger.model.trace import Trace
from perfledger.run.tasks import RankFailure, RankResult, loaded


def analysis_from_results(
    results: Sequence[RankResult],
    counters: pa.Table | None = None,
    *,
    slow_rank_excess_pct: float = DEFAULT_EXCESS_PCT,
    failures: Sequence[RankFailure] = (),
) -> ProfileAnalysis:
    """The profile's analysis from rank tasks' results (spilled tables memory-mapped).

    Equal, table for table, to :func:`perfledger.analysis.profile.analyze_traces` on the same
    traces: per-rank pieces are put back in the order the whole-profile analyses sort their
    rows, per-rank sums are added up, and each rank's advisor findings come along for
    :func:`perfledger.analysis.advisor.diagnose` to merge. ``failures``: ranks whose trace
    could not be read: left out of the profile, said in its quality report and loss note.
    """
    started = time.perf_counter()
    ranks: list[RankAnalysis] = []
    summaries: list[pa.Table] = []
    details: list[pa.Table] = []
    for result in results:
        tables = loaded(result).tables
        trace = Trace(
            events=tables["events"],
            counters=tables["counters"],
            meta=result.meta,
            source_kind=result.source_kind,
            source_files=result.source_files,
            loss=result.loss,
            communication_matrix=result.communication_matrix,
        )
        accounting = Accounting(result.accounts, tables["gaps"], result.host_accounts)
        ranks.append(
            RankAnalysis(
                trace=trace,
                events=tables["events"],
                windows=result.windows,
                accounting=accounting,
                annotated_steps=result.annotated_steps,
                quality=result.quality,
                comm=result.comm,
                replay=result.replay,
            )
        )
        summaries.append(tables["op_summary"])
        details.append(tables["kernel_details"])
    collectives = pa.concat_tables([r.collectives for r in results])
    aligned, arrivals = align_ranks(ranks, collectives)
    if arrivals.matched:  # waits measured across ranks: their communication split again
        ranks = list(aligned)
        communication = profile_communication(ranks)
    else:
        communication = pa.concat_tables([r.communication for r in results])
    events = pa.concat_tables([r.events for r in ranks]) if ranks else schema.empty_events()
    all_counters = [r.trace.counters for r in ranks]
    if counters is not None:
        all_counters.append(counters.cast(schema.COUNTERS_SCHEMA))
    # A rank without device tasks summarises its host operators; next to ranks with device
    # tasks it contributes no row, as in the whole-profile summary.
    device_summaries = [t for t in summaries if "self_ns" not in t.column_names]
    summary = pa.concat_tables(device_summaries or summaries)
    links = pa.concat_tables([r.links for r in results])
    analysis = ProfileAnalysis(
        ranks=tuple(ranks),
        events=events,
        counters=pa.concat_tables(all_counters) if all_counters else schema.empty_counters(),
        steps=steps_table(ranks),
        gaps=profile_gaps(ranks),
        op_summary=summary,
        op_statistic=ops.op_statistic(events, summary),
        kernel_details=pa.concat_tables(details),
        api_statistic=ops.merge_api_statistics([r.api_statistic for r in results]),
        transfers=transfers_from_spellings([r.copy_spellings for r in results]),
        communication=communication,
        gap_report=merge_gap_reports([r.gap_report for r in results]),
        timings={"merge_s": time.perf_counter() - started},
        cluster=cluster_pass(ranks, collectives, links, slow_rank_excess_pct, arrivals.offsets_ns),
        rank_advice=_advice_of(results),
        skipped_ranks=tuple(_skipped(f) for f in failures),
        replay=ranks_replay(ranks),
    )
    if arrivals.matched:  # the split changed after the rank tasks diagnosed their ranks
        analysis = replace(analysis, rank_advice=realigned_advice(analysis))
    # the tasks replayed their ranks alone: collectives matched across ranks replayed again
    analysis = replayed_together(analysis, [rule.id for rule in RULES])
    release_freed_memory()  # the ranks' graphs of that replay
    return analysis


def _skipped(failure: RankFailure) -> QualityCheck:
    """A rank left out because its trace could not be read: the reason, naming its file."""
    return QualityCheck(
        SKIPPED_RANKS,
        1,
        f"{failure.message} (this rank is left out of the profile)",
        (STEP_TIME, UTILIZATION, TIME_ACCOUNT, COMMUNICATION),
        repaired=True,
    )


def _advice_of(results: Sequence[RankResult]) -> tuple[RankAdvice, ...] | None:
    """The advice every task made, in the results' order (None when a task made none)."""
    advice = tuple(r.advice for r in results if r.advice is not None)
    return advice if len(advice) == len(results) else None
