"""Communication split into waiting for peers and transfer, across ranks on skewed clocks.

Answers derived independently: the skewed-clock cluster of tests/skew_gen.py (figures by
construction), torch_npu's own communication.json on the Ascend level1 traces, and the
nccl-tests bus-bandwidth formulas on a one-rank Kineto trace with message sizes.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from perfledger.analysis.cluster.collectives import align_collectives, collective_tasks
from perfledger.analysis.profile import analyze_traces
from perfledger.sources import load_traces
from tests.cli import perfledger
from tests.paths import data_file
from tests.skew_gen import (
    CLOCK_OFFSETS_US,
    LATE_RANK,
    expected_transfer_us,
    expected_wait_us,
    write_skewed_ranks,
)

US = 1_000
STEPS = 5


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def skewed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The four skewed ranks and their profile (analysed as a user would)."""
    traces = tmp_path_factory.mktemp("skewed") / "run"
    write_skewed_ranks(traces, steps=STEPS)
    out = tmp_path_factory.mktemp("skewed-profile") / "profile"
    result = perfledger("analyze", traces, "-o", out)
    assert result.returncode == 0, result.stderr
    return traces, out


def test_clock_offsets_are_recovered_from_the_collectives_ends(skewed: tuple[Path, Path]) -> None:
    _, out = skewed
    offsets = read_json(out / "cluster_summary.json")["clock_offsets_ns"]
    assert set(offsets) == {str(r) for r in range(len(CLOCK_OFFSETS_US))}
    for rank, offset_us in enumerate(CLOCK_OFFSETS_US):
        true_ns = (offset_us - CLOCK_OFFSETS_US[0]) * US
        assert abs(offsets[str(rank)] - true_ns) <= 50 * US, rank


def test_raw_timestamps_would_blame_the_rank_whose_clock_runs_ahead(
    skewed: tuple[Path, Path],
) -> None:
    # the test's premise: without aligned clocks the wrong rank looks last
    traces, _ = skewed
    loaded = load_traces([traces])
    analysis = analyze_traces(loaded)
    tasks = collective_tasks(analysis.events)
    ranks = [r.rank for r in analysis.ranks]
    raw = align_collectives(tasks, ranks)
    ahead = max(range(len(CLOCK_OFFSETS_US)), key=lambda r: CLOCK_OFFSETS_US[r])
    assert {c.last_rank for c in raw.worst} == {ahead} != {LATE_RANK}
    assert analysis.cluster is not None
    aligned = analysis.cluster.collectives
    assert {c.last_rank for c in aligned.worst} == {LATE_RANK}


def test_the_late_rank_and_its_cause_are_named(skewed: tuple[Path, Path]) -> None:
    _, out = skewed
    cluster = read_json(out / "cluster_summary.json")
    assert cluster["slow_ranks"] == [LATE_RANK]
    (evidence,) = cluster["slow_rank_evidence"]
    assert evidence["rank"] == LATE_RANK
    assert evidence["cause"] == "data loader"
    assert (evidence["last_arrivals"], evidence["collectives"]) == (STEPS, STEPS)
    # the others wait 2 ms per step for it; it waits for nobody
    assert evidence["late_per_step_ms"] == pytest.approx(2.0, rel=0.02)
    assert evidence["wait_ms"] == 0.0
    summary = read_json(out / "summary.json")
    (finding,) = [f for f in summary["findings"] if f["id"] == "slow_rank"]
    assert f"Slow rank {LATE_RANK}" in finding["title"] and "data loader" in finding["title"]
    assert finding["severity_ms"] == pytest.approx(2.0, rel=0.02)
    assert "exposed_communication" not in {f["id"] for f in summary["findings"]}


def test_wait_and_transfer_per_rank_and_step_match_the_construction(
    skewed: tuple[Path, Path],
) -> None:
    _, out = skewed
    rows = [r for r in read_csv(out / "step_trace.csv") if r["step"] != "-1"]
    assert len(rows) == len(CLOCK_OFFSETS_US) * STEPS
    for row in rows:
        rank = int(row["rank"])
        wait, transfer = int(row["communication_wait_ns"]), int(row["communication_transfer_ns"])
        assert wait + transfer == int(row["communication_ns"])
        assert wait == pytest.approx(expected_wait_us(rank) * US, rel=0.02, abs=0.02 * 1e6)
        assert transfer == pytest.approx(expected_transfer_us(rank) * US, rel=0.02)
    communication = read_csv(out / "communication.csv")
    assert {r["split"] for r in communication} == {"aligned"}
    assert {r["group_size"] for r in communication} == {"4"}


# --- Ascend: torch_npu's own split --------------------------------------------------------


def _hccl_steps(rank_dir: Path) -> dict[int, tuple[float, float]]:
    """Per step: (transit ms, elapse - transit ms) summed over the collectives torch_npu's
    communication.json lists for it."""
    document = read_json(rank_dir / "ASCEND_PROFILER_OUTPUT" / "communication.json")
    steps = {}
    for step, groups in document.items():
        transit = waiting = 0.0
        for ops in groups.values():
            for name, op in ops.items():
                if name == "Total Op Info":
                    continue
                info = op["Communication Time Info"]
                transit += info["Transit Time(ms)"]
                waiting += info["Elapse Time(ms)"] - info["Transit Time(ms)"]
        steps[int(step.removeprefix("step"))] = (transit, waiting)
    return steps


@pytest.fixture(scope="module")
def ascend_level1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("level1") / "profile"
    trace = data_file("ascend/torch_npu_text/level1/rank0_ascend_pt")
    result = perfledger("analyze", trace, "-o", out)
    assert result.returncode == 0, result.stderr
    return out


def test_ascend_rank0_split_matches_communication_json_per_step(ascend_level1: Path) -> None:
    hccl = _hccl_steps(data_file("ascend/torch_npu_text/level1/rank0_ascend_pt"))
    rows = {int(r["step"]): r for r in read_csv(ascend_level1 / "step_trace.csv")}
    assert hccl and set(hccl) <= set(rows)
    for step, (transit_ms, waiting_ms) in hccl.items():
        row = rows[step]
        wait = int(row["communication_wait_ns"]) / 1e6
        transfer = int(row["communication_transfer_ns"]) / 1e6
        hidden = int(row["overlapped_communication_ns"]) / 1e6
        assert transfer == pytest.approx(transit_ms, rel=0.01)
        # the waiting HCCL counts is the exposed wait plus what compute hid of it
        assert wait + hidden == pytest.approx(waiting_ms, rel=0.01)
        assert wait > 5 * transfer  # waiting dominates: several times the transfer


def test_ascend_rank0_top_finding_is_the_unprofiled_peer_not_overlap(ascend_level1: Path) -> None:
    findings = read_json(ascend_level1 / "summary.json")["findings"]
    top = findings[0]
    assert top["id"] == "slow_rank"
    (peer,) = [s for s in top["evidence"]["suspects"] if s["cause"] == "unprofiled peer"]
    assert (peer["group_size"], peer["profiled_ranks"]) == (8, 1)
    assert "bucket" not in top["suggestion"].split("will not help")[1]
    exposed = [f for f in findings if f["id"] == "exposed_communication"]
    assert not exposed or exposed[0]["severity_ms"] < top["severity_ms"] / 5


def test_ascend_two_ranks_name_the_unprofiled_peer_and_the_late_profiled_rank() -> None:
    analysis = analyze_traces(load_traces([data_file("ascend/torch_npu_text/level1")]))
    assert analysis.cluster is not None
    assert set(analysis.cluster.clock_offsets_ns) == {0, 1}
    split = {r.rank: r.comm for r in analysis.ranks}
    # HCCL's own figures stay: nothing is re-aligned over them
    assert all(s is not None and set(s.source) == {"measured"} for s in split.values())


# --- one rank: the estimate from the message and the link ----------------------------------


def test_one_rank_estimates_transfer_from_messages_and_reports_bus_bandwidth(
    tmp_path: Path,
) -> None:
    out = tmp_path / "profile"
    result = perfledger("analyze", data_file("kineto/a100_rank3_control.json.gz"), "-o", out)
    assert result.returncode == 0, result.stderr
    rows = read_csv(out / "communication.csv")
    assert rows and {r["split"] for r in rows} == {"estimated"}
    link_gbps = 300.0  # A100 NVLink, per direction
    for row in rows:
        total, wait, transfer = (int(row[k]) for k in ("total_ns", "wait_ns", "transfer_ns"))
        assert wait + transfer == total
        moved = int(row["bytes"])
        factor = {"all_reduce": 2 * 7 / 8, "all_to_all": 7 / 8}[row["collective"]]
        # transfer = bytes x bus factor / link, capped by the task's time
        assert transfer == pytest.approx(min(moved * factor / link_gbps, total), rel=0.01, abs=8)
        # achieved bus bandwidth over the whole task time, as nccl-tests times it
        assert float(row["bus_gbps"]) == pytest.approx(moved * factor / total, rel=1e-4)
        assert int(row["message_bytes"]) > 0 and row["algorithm"] in {"RING_LL", "RING_SIMPLE"}
    summary = read_json(out / "summary.json")
    slow = [f for f in summary["findings"] if f["id"] == "slow_rank"]
    assert slow and "estimated" in slow[0]["title"]
