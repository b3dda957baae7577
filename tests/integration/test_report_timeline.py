"""Timelines of every shared real trace pass the Perfetto-import validator; one golden file.

The validator (tests/timeline_check.py) reads ts/dur as Perfetto does and checks the event
schema, nesting per track, flow ends, names and sort order.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.compute as pc
import pytest

from perfledger.analysis.profile import analyze_traces
from perfledger.model import schema
from perfledger.render.timeline import text, write_step_timelines, write_timeline
from perfledger.sources import load_traces
from tests.paths import DATA
from tests.timeline_check import load, validate

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

KINETO = [
    "a100_alexnet.json.gz",
    "v100_rank1_ddp.json.gz",
    "a100_rank3_control.json.gz",
    "v100_rank1_test.json.gz",
    "v100_ns_timestamps.json.gz",
    "mi250_rocm_minitoy.json.gz",
    "a100_triton.json.gz",
    "sampled_2ranks/rank-0.json.gz",
    "sampled_2ranks/rank-1.json.gz",
    "mtia_inference.json.gz",
    "cpu_only_rank34.json.gz",
    "old_pt18_inference_rank1.json.gz",
    "resnet50_gpu_2021.json.gz",
]
ASCEND = [f"torch_npu_{export}/level{level}" for export in ("text", "db") for level in range(3)] + [
    "msprof_cli"
]


def shared(relative: str) -> Path:
    path = DATA / relative
    if not path.exists():
        pytest.fail(f"{path} is missing from tests/data")
    return path


def check_trace(source: Path, tmp_path: Path) -> None:
    traces = load_traces([source])
    analysis = analyze_traces(traces)
    events = analysis.events
    path = tmp_path / "timeline.json.gz"
    stats = write_timeline(path, events, gaps=analysis.gaps, counters=analysis.counters)
    summary = validate(load(path))
    # nothing is lost: every event is a slice or an instant, every gap a slice
    instants = int(pc.sum(pc.equal(pc.cast(events["kind"], "string"), schema.INSTANT)).as_py() or 0)
    assert stats.dropped == 0
    assert summary.instants == instants
    assert summary.slices == events.num_rows - instants + analysis.gaps.num_rows
    assert summary.flows == stats.flows
    assert summary.other["events_written"] == events.num_rows
    # per-step slices, cut from the same tracks
    windows = [w for r in analysis.ranks if r.annotated_steps for w in r.windows]
    slices = write_step_timelines(
        tmp_path / "timeline", events, windows, analysis.gaps, analysis.counters
    )
    assert len(slices) == len({w.step for w in windows})
    for step_file in slices:
        step = validate(load(step_file))
        assert step.other["origin_ns"] == summary.other["origin_ns"]
        assert 0 < step.slices <= summary.slices


@pytest.mark.parametrize("name", KINETO)
def test_kineto_trace_timeline_is_valid(name: str, tmp_path: Path) -> None:
    check_trace(shared(f"kineto/{name}"), tmp_path)


@pytest.mark.parametrize("name", ASCEND)
def test_ascend_trace_timeline_is_valid(name: str, tmp_path: Path) -> None:
    check_trace(shared(f"ascend/{name}"), tmp_path)


def test_ddp_trace_has_flows_from_launches_and_nccl_on_device_streams(tmp_path: Path) -> None:
    traces = load_traces([shared("kineto/v100_rank1_ddp.json.gz")])
    analysis = analyze_traces(traces)
    path = tmp_path / "ddp.json.gz"
    write_timeline(path, analysis.events, gaps=analysis.gaps)
    summary = validate(load(path))
    assert summary.flows > 10_000
    names = set(summary.processes.values())
    assert {"rank 1 device 1", "rank 1 analysis"} <= names
    order = sorted(summary.process_sort, key=summary.process_sort.__getitem__)
    kinds = [summary.processes[p].split()[2] for p in order]
    assert kinds == sorted(kinds, key=["host", "device", "analysis"].index)
    nccl = [
        ev
        for track, evs in summary.by_track.items()
        if summary.tracks[track].startswith("stream")
        for ev in evs
        if ev["name"].startswith("ncclKernel")
    ]
    assert nccl and all(ev["cat"] == "comm" for ev in nccl)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pieces"])
def test_golden_real_small_trace(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    # both ways of writing records: the compiled formatter's rows, else the pieces joined
    if compiled and text._records is None:
        pytest.skip("no C compiler where the project was installed")
    if not compiled:
        monkeypatch.setattr(text, "_records", None)
    traces = load_traces([shared("kineto/a100_triton.json.gz")])
    analysis = analyze_traces(traces)
    path = tmp_path / "a100_triton.json"
    write_timeline(path, analysis.events, gaps=analysis.gaps, counters=analysis.counters)
    golden = GOLDEN / "timeline_a100_triton.json"
    update = request.config.getoption("--update-golden", default=False)
    if update or os.environ.get("PERFLEDGER_UPDATE_GOLDEN") == "1":
        golden.write_bytes(path.read_bytes())
    assert golden.exists(), f"{golden} missing: run pytest with --update-golden"
    assert path.read_bytes() == golden.read_bytes()
    summary = validate(load(golden))
    assert summary.flows == 1
