"""The seeds' experiment on a hand-built pair: per-op synchronisation removed.

Before: in every 150 µs step the host launches five 10 µs matmul kernels 30 µs apart and
synchronises after each launch, so the device waits 20 µs between kernels. After: no sync, the
host launches every 14 µs and the device waits 4 µs. Every expected figure is derived by hand
below from the timelines, not read from the tool.
"""

from __future__ import annotations

import dataclasses

import pytest

from perfledger.analysis import diff
from perfledger.analysis.profile import analyze_traces
from perfledger.model import schema
from perfledger.model.trace import Trace
from perfledger.render.diff_json import diff_document
from perfledger.run.diff_inputs import run_tables
from tests.scenarios import Timeline

STEPS = 4
KERNEL = "volta_sgemm_128x64_nn"


def before() -> Timeline:
    """Step k = [150k, 150k+150) µs; launch i at +30i, kernel [+30i+8, +30i+18), sync
    [+30i+5, +30i+19)."""
    t = Timeline()
    for k in range(STEPS):
        s = 150 * k
        t.step(k + 1, s, 150)
        for i in range(5):
            t.launch(s + 30 * i, s + 30 * i + 8, 10, name=KERNEL)
            t.event(schema.SYNC, "cudaDeviceSynchronize", s + 30 * i + 5, 14)
    return t


def after() -> Timeline:
    """Step k = [70k, 70k+70) µs; launch i at +14i, kernel [+14i+2, +14i+12), no sync."""
    t = Timeline()
    for k in range(STEPS):
        s = 70 * k
        t.step(k + 1, s, 70)
        for i in range(5):
            t.launch(s + 14 * i, s + 14 * i + 2, 10, name=KERNEL)
    return t


BASE_FINDINGS = (
    {
        "id": "excessive_sync",
        "title": "The host synchronises after every operator",
        "severity_ms": 0.08,
        "severity_pct": 53.33,
    },
    {
        "id": "host_dispatch_bound",
        "title": "The device waits for the host to issue work",
        "severity_ms": 0.088,
        "severity_pct": 58.67,
    },
)


def tables(
    timeline: Timeline, label: str, findings: tuple[dict[str, object], ...] = ()
) -> diff.RunTables:
    trace = Trace(events=timeline.table(), counters=schema.empty_counters(), source_kind="kineto")
    run = run_tables(analyze_traces([trace]), label=label, path=label)
    return dataclasses.replace(run, findings=findings)


@pytest.fixture(scope="module")
def result() -> diff.RunDiff:
    return diff.diff_runs(
        tables(before(), "before", BASE_FINDINGS), tables(after(), "after"), diff.DiffOptions()
    )


def test_step_time_shrinks_beyond_noise(result: diff.RunDiff) -> None:
    step = result.step_time
    assert step.base.count == step.current.count == STEPS
    assert step.median.base == pytest.approx(0.150)
    assert step.median.current == pytest.approx(0.070)
    assert step.median.change_pct == pytest.approx(100 * (70 - 150) / 150)
    # identical steps: no spread, so the band is the 1 % floor of 0.150 ms
    assert step.base.spread_pct == 0.0
    assert step.median.noise == pytest.approx(0.0015)
    assert step.median.within_noise is False
    assert step.throughput.base == pytest.approx(1000 / 0.150)
    assert step.throughput.current == pytest.approx(1000 / 0.070)
    assert "faster, beyond run-to-run noise" in result.verdict


def test_account_moves_from_sync_to_dispatch(result: diff.RunDiff) -> None:
    compute = result.category("compute")
    idle = result.category("idle")
    sync = result.category("idle_sync")
    dispatch = result.category("idle_host_dispatch")
    other = result.category("idle_other")
    assert compute and idle and sync and dispatch and other
    # five 10 µs kernels per step in both runs
    assert compute.ms.base == pytest.approx(0.050)
    assert compute.ms.current == pytest.approx(0.050)
    assert compute.share.base == pytest.approx(100 * 50 / 150)
    assert compute.share.current == pytest.approx(100 * 50 / 70)
    # before: [0,8) dispatch, four 20 µs holes while the host syncs, [138,150) tail
    assert sync.ms.base == pytest.approx(0.080)
    assert dispatch.ms.base == pytest.approx(0.008)
    assert other.ms.base == pytest.approx(0.012)
    # after: [0,2) and four 4 µs holes are dispatch, [68,70) tail
    assert sync.ms.current == 0.0
    assert dispatch.ms.current == pytest.approx(0.018)
    assert other.ms.current == pytest.approx(0.002)
    assert idle.share.base == pytest.approx(100 * 100 / 150)
    assert idle.share.current == pytest.approx(100 * 20 / 70)
    assert idle.share.delta == pytest.approx(100 * 20 / 70 - 100 * 100 / 150)
    assert idle.share.within_noise is False
    assert result.utilization.base == pytest.approx(100 * 50 / 150)
    assert result.utilization.current == pytest.approx(100 * 50 / 70)


def test_gaps_shrink(result: diff.RunDiff) -> None:
    gaps = result.gaps
    # before: 8, 20, 20, 20, 20, 12 µs per step; after: 2, 4, 4, 4, 4, 2 µs
    assert gaps.duration_us.base == pytest.approx(20.0)
    assert gaps.duration_us.current == pytest.approx(4.0)
    assert gaps.mean_us.base == pytest.approx(100 / 6)
    assert gaps.mean_us.current == pytest.approx(20 / 6)
    assert gaps.count_per_step.base == gaps.count_per_step.current == 6
    assert gaps.idle_ms_per_step.base == pytest.approx(0.100)
    assert gaps.idle_ms_per_step.current == pytest.approx(0.020)
    buckets = {b.label: b for b in gaps.buckets}
    assert buckets["<10us"].base_count == 1  # the 8 µs one
    assert buckets["10-100us"].base_count == 5
    assert buckets["<10us"].current_count == 6
    causes = dict(gaps.by_cause_ms)
    assert causes["sync"].base == pytest.approx(0.080)
    assert causes["sync"].current == 0.0
    assert causes["host_dispatch"].current == pytest.approx(0.018)


def test_ops_unchanged_and_classed(result: diff.RunDiff) -> None:
    assert result.ops.movers_by_time == ()
    assert result.ops.new == result.ops.vanished == ()
    (matmul,) = result.ops.classes
    assert matmul.op_class == "matmul"
    assert matmul.base_ms == pytest.approx(0.050)
    assert matmul.current_count == 5
    assert matmul.base_share_pct == matmul.current_share_pct == 100.0


def test_findings_resolved(result: diff.RunDiff) -> None:
    resolved = {f["id"]: f for f in result.findings.resolved}
    assert set(resolved) == {"host_dispatch_bound", "excessive_sync"}
    assert resolved["host_dispatch_bound"]["severity_ms"] == 0.088
    assert result.findings.new == ()


def test_document_figures(result: diff.RunDiff) -> None:
    document = diff_document(result)
    assert list(document)[:7] == [
        "format_version",
        "tool_version",
        "base",
        "current",
        "verdict",
        "quality_warning",
        "step_time_ms",
    ]
    step = document["step_time_ms"]
    assert (step["base"], step["current"], step["change_pct"], step["within_noise"]) == (
        0.15,
        0.07,
        -53.33,
        False,
    )
    assert document["categories"]["idle"]["change_pp"] == round(2000 / 70 - 10000 / 150, 2)
    assert document["gaps"]["median_us"]["base"] == 20.0
    assert document["gaps"]["median_us"]["current"] == 4.0
    assert [f["id"] for f in document["findings"]["resolved"]] == [
        "excessive_sync",
        "host_dispatch_bound",
    ]
    assert document["failed"] == []
