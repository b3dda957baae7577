"""``perfledger analyze`` of real 2-rank traces replays the ranks together once the rank tasks
(worker processes here) are back: the unchanged replay still reproduces the measured steps
within the bounds of docs/whatif.md, and every fix's gain on each rank is what a second
implementation gives — the whatif command's replay of all ranks at once
(:func:`perfledger.analysis.critical_path.replay_profile`, every graph held, its own rounds).
On hand-built ranks (tests/cluster_gen.py) the critical path's wait for peers is the one the
ranks' arrivals give."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from perfledger.analysis.critical_path import replay_profile
from perfledger.model.whatif import StepGains
from perfledger.run.execution import Execution
from perfledger.run.pipeline import ProfileResult, build_profile
from tests.cluster_gen import write_ranks
from tests.paths import DATA

TRACES = ["ascend/torch_npu_db/level1", "kineto/sampled_2ranks"]


@pytest.fixture(scope="module", params=TRACES)
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ProfileResult:
    out = tmp_path_factory.mktemp("together") / "profile"
    return build_profile(
        [DATA / Path(request.param)],
        out,
        console=Console(file=io.StringIO()),
        execution=Execution(workers=2),
    )


def test_the_replay_together_reproduces_the_measured_steps(built: ProfileResult) -> None:
    path = built.summary["critical_path"]
    assert path["replay_error_pct"]["median"] <= 3.0
    assert path["replay_error_pct"]["worst"] <= 10.0
    replay = built.analysis.replay
    assert replay is not None and {s.rank for s in replay.steps} == {0, 1}
    meta = json.loads((built.path / "meta.json").read_text())
    assert meta["timings"]["replay_together_s"] > 0
    assert "replayed_alone" not in {c["id"] for c in built.summary["quality"]["checks"]}


def test_each_fix_gains_what_the_ranks_replayed_at_once_give(built: ProfileResult) -> None:
    advice = built.analysis.rank_advice
    assert advice is not None and len(advice) == 2
    rules = sorted({rule for a in advice for rule in a.fixes})
    assert "host_dispatch_bound" in rules  # a fix on both ranks of both traces
    for rule in rules:
        report = replay_profile(
            built.analysis.events,
            by_rank={a.rank: a.fixes[rule] for a in advice if rule in a.fixes},
        )
        for a in advice:  # every rank gains from the fix, where it fired or not
            mine = [s for s in report.steps if s.rank == a.rank]
            baseline = sum(s.baseline_ns for s in mine)
            predicted = min(max(sum(s.predicted_ns for s in mine), 0), baseline)
            got = a.gains[rule]
            assert (got.steps, got.baseline_ns, got.predicted_ns) == (
                len(mine),
                baseline,
                predicted,
            ), (rule, a.rank)
        # the finding's whatif_ms: what every rank gains, per replayed step
        (finding,) = [f for f in built.summary["findings"] if f["id"] == rule]
        total = sum((a.gains[rule] for a in advice), StepGains())
        assert finding["whatif_ms"] == total.gain_ms


def test_the_critical_path_waits_for_the_late_rank(tmp_path: Path) -> None:
    """tests/cluster_gen.py: rank 1 computes 12 ms, rank 0 10 ms; both all-reduces end
    together, 1 ms after rank 1 arrives. Rank 0's all-reduce (3 ms) waits 2 ms, rank 1's (1 ms)
    not at all: per step, on the mean path, 2 ms of communication of which 1 ms waiting and
    1 ms transfer (replayed alone, nothing tells the wait: it would all be transfer)."""
    write_ranks(tmp_path / "ranks", 2, slow_rank=1, slow_factor=1.2)
    built = build_profile(
        [tmp_path / "ranks"],
        tmp_path / "profile",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=0),
    )
    bound = built.summary["critical_path"]["bound_by_ms"]
    parts = built.summary["critical_path"]["bound_by_parts_ms"]["communication"]
    assert bound["communication"] == pytest.approx(2.0, abs=1e-3)
    assert parts["wait"] == pytest.approx(1.0, abs=1e-3)
    assert parts["transfer"] == pytest.approx(1.0, abs=1e-3)
