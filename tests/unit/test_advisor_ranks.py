"""Findings of several ranks merged into the profile's: severity, worst rank, spans, skips."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from perfledger.analysis.advisor import AdvisorConfig, Finding, Skipped, diagnose
from perfledger.analysis.advisor.ranks import MERGED_SPANS, merge_rank_findings
from perfledger.analysis.profile import analyze_traces, rank_profile
from perfledger.model.findings import RankAdvice, StepBasis
from perfledger.sources import load_traces
from tests.paths import data_file

MS = 1_000_000


def finding(rule: str, severity_ms: float, severity_pct: float, rank: int) -> Finding:
    return Finding(
        id=rule,
        title=f"{rule} on {rank}",
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence={"figure": rank * 10},
        suggestion=f"fix {rank}",
        verify="re-profile",
        estimate="by hand",
        spans=({"rank": rank, "start_ns": rank, "end_ns": rank + 1},),
    )


def advice(rank: int, windows: int, wall_ms: float, *items: Finding | Skipped) -> RankAdvice:
    return RankAdvice(
        rank=rank,
        basis=StepBasis(windows, int(wall_ms * MS), annotated=True),
        findings=tuple(i for i in items if isinstance(i, Finding)),
        skipped=tuple(i for i in items if isinstance(i, Skipped)),
        config=AdvisorConfig(),
    )


def test_severity_is_the_recoverable_time_per_window_of_every_rank() -> None:
    # rank 0: 4 windows of 100 ms, 10 ms recoverable per step -> 40 ms in all
    # rank 1: 4 windows of 120 ms, 30 ms per step -> 120 ms
    # rank 2: 2 windows of 100 ms, silent
    # profile: 160 ms over 10 windows = 16 ms per step; 160 / (400 + 480 + 200) = 14.81 %
    ranks = [
        advice(0, 4, 400, finding("host_dispatch_bound", 10.0, 10.0, 0)),
        advice(1, 4, 480, finding("host_dispatch_bound", 30.0, 25.0, 1)),
        advice(2, 2, 200),
    ]
    [merged], skipped = merge_rank_findings(ranks, ["host_dispatch_bound"])
    assert skipped == []
    assert merged.severity_ms == 16.0
    assert merged.severity_pct == 14.81
    assert merged.title == "host_dispatch_bound on 1 (rank 1; fires on 2 of 3 ranks)"
    assert merged.suggestion == "fix 1"
    assert merged.evidence["figure"] == 10  # the worst rank's own evidence
    assert merged.evidence["worst_rank"] == 1
    assert merged.evidence["ranks"] == [0, 1]
    assert merged.evidence["per_rank"] == [
        {"rank": 0, "severity_ms": 10.0, "severity_pct": 10.0},
        {"rank": 1, "severity_ms": 30.0, "severity_pct": 25.0},
    ]
    # the worst rank's spans first
    assert [s["rank"] for s in merged.spans] == [1, 0]


def test_one_rank_firing_names_it_and_the_rank_count() -> None:
    ranks = [advice(0, 2, 200), advice(3, 2, 200, finding("excessive_sync", 8.0, 8.0, 3))]
    [merged], _ = merge_rank_findings(ranks, ["excessive_sync"])
    # 16 ms over 4 windows, 16 of 400 ms
    assert (merged.severity_ms, merged.severity_pct) == (4.0, 4.0)
    assert merged.title.endswith("(rank 3 of 2)")


def test_spans_of_many_ranks_are_capped_worst_rank_first() -> None:
    ranks = []
    for rank in range(30):
        own = replace(
            finding("long_tail_ops", 1.0 + rank, 1.0, rank),
            spans=tuple({"rank": rank, "start_ns": i, "end_ns": i + 1} for i in range(10)),
        )
        ranks.append(advice(rank, 1, 100, own))
    [merged], _ = merge_rank_findings(ranks, ["long_tail_ops"])
    assert len(merged.spans) == MERGED_SPANS == 100
    # rank 29 is the most severe, then 28, ...: ten ranks' ten spans each
    assert [s["rank"] for s in merged.spans[::10]] == list(range(29, 19, -1))


def test_a_rule_is_skipped_only_when_every_rank_skipped_it() -> None:
    lacking = Skipped("memory_bound_ops", "no shapes on rank 0")
    other = Skipped("memory_bound_ops", "no shapes on rank 1")
    both = [advice(0, 1, 100, lacking), advice(1, 1, 100, other)]
    assert merge_rank_findings(both, ["memory_bound_ops"]) == ([], [lacking])
    one = [advice(0, 1, 100, lacking), advice(1, 1, 100)]
    assert merge_rank_findings(one, ["memory_bound_ops"]) == ([], [])


def test_rules_keep_the_given_order() -> None:
    ranks = [
        advice(0, 1, 100, finding("b_rule", 1.0, 1.0, 0), finding("a_rule", 2.0, 2.0, 0)),
        advice(1, 1, 100, Skipped("c_rule", "absent"), Skipped("d_rule", "absent")),
    ]
    findings, skipped = merge_rank_findings(ranks, ["b_rule", "a_rule", "d_rule", "c_rule"])
    assert [f.id for f in findings] == ["b_rule", "a_rule"]
    assert skipped == []  # rank 0 did not skip c_rule or d_rule


@pytest.fixture(scope="module")
def two_ranks():  # type: ignore[no-untyped-def]
    return analyze_traces(load_traces([data_file("kineto/sampled_2ranks")]))


def test_two_real_ranks_merge_what_each_rank_finds_alone(two_ranks) -> None:  # type: ignore[no-untyped-def]
    alone = [diagnose(rank_profile(two_ranks, i)) for i in range(2)]
    report = diagnose(two_ranks)
    fired_alone = {f.id for r in alone for f in r.findings}
    rank_ids = {f.id for f in report.findings} - {"slow_rank", "load_imbalance"}
    assert rank_ids == fired_alone
    by_rank = {i: {f.id: f for f in r.findings} for i, r in enumerate(alone)}
    merged = {f.id: f for f in report.findings}
    for rule_id in rank_ids:
        per_rank = merged[rule_id].evidence["per_rank"]
        assert per_rank == [
            {
                "rank": i,
                "severity_ms": by_rank[i][rule_id].severity_ms,
                "severity_pct": by_rank[i][rule_id].severity_pct,
            }
            for i in range(2)
            if rule_id in by_rank[i]
        ]
    # the cluster rules see both ranks
    assert {"slow_rank", "load_imbalance"} <= set(merged)


def test_advice_made_elsewhere_is_used_only_for_the_same_configuration(two_ranks) -> None:  # type: ignore[no-untyped-def]
    fake = tuple(
        advice(r.rank, 1, 100, finding("host_dispatch_bound", 1.0, 1.0, r.rank))
        for r in two_ranks.ranks
    )
    made = replace(two_ranks, rank_advice=fake)
    used = {f.id: f for f in diagnose(made).findings}["host_dispatch_bound"]
    assert used.severity_ms == 1.0 and used.title.startswith("host_dispatch_bound on 0")
    other = AdvisorConfig(thresholds={"host_dispatch_bound.idle_pct": 99.0})
    ignored = {f.id for f in diagnose(made, other).findings}
    assert "host_dispatch_bound" not in ignored  # diagnosed again under the 99 % threshold


def test_each_rank_sees_its_own_counters_and_the_host_wide_ones() -> None:
    from perfledger.analysis.profile import rank_counters
    from perfledger.model import schema

    rows = [
        (0, "process_tree", "cpu_percent"),  # the whole program: rank 0's view only
        (0, "cpu_cores", "cpu0"),  # the host's cores, filed under rank 0
        (0, "rank_process", "cpu_percent"),
        (1, "rank_process", "cpu_percent"),
    ]
    counters = pa.Table.from_pylist(
        [{"rank": r, "track": t, "name": n, "ts_ns": 1, "value": 1.0} for r, t, n in rows],
        schema=schema.COUNTERS_SCHEMA,
    )
    seen = rank_counters(counters, 1)
    assert sorted(zip(seen["rank"].to_pylist(), seen["track"].to_pylist(), strict=True)) == [
        (0, "cpu_cores"),
        (1, "rank_process"),
    ]
    assert rank_counters(counters, 0).num_rows == 3
