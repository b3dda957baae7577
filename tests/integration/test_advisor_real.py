"""The advisor on every real trace of tests/data: which rules fire, how severe, which are
skipped because the trace lacks their data. docs/advisor.md explains each result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from perfledger.analysis.advisor import diagnose
from perfledger.analysis.critical_path import replay_profile
from perfledger.analysis.profile import analyze_traces
from perfledger.model import schema
from perfledger.model.findings import AdvisorReport
from perfledger.model.profile import ProfileAnalysis
from perfledger.model.whatif import StepReplay
from perfledger.sources import load_traces
from tests.paths import data_file

TRACES = {
    "a100_alexnet": "kineto/a100_alexnet.json.gz",
    "a100_rank3_control": "kineto/a100_rank3_control.json.gz",
    "a100_triton": "kineto/a100_triton.json.gz",
    "cpu_only_rank34": "kineto/cpu_only_rank34.json.gz",
    "mi250_rocm_minitoy": "kineto/mi250_rocm_minitoy.json.gz",
    "mtia_inference": "kineto/mtia_inference.json.gz",
    "old_pt18_inference_rank1": "kineto/old_pt18_inference_rank1.json.gz",
    "resnet50_gpu_2021": "kineto/resnet50_gpu_2021.json.gz",
    "sampled_2ranks": "kineto/sampled_2ranks",
    "v100_ns_timestamps": "kineto/v100_ns_timestamps.json.gz",
    "v100_rank1_ddp": "kineto/v100_rank1_ddp.json.gz",
    "v100_rank1_test": "kineto/v100_rank1_test.json.gz",
    "ascend_text_level0": "ascend/torch_npu_text/level0",
    "ascend_text_level1": "ascend/torch_npu_text/level1",
    "ascend_text_level2": "ascend/torch_npu_text/level2",
    "ascend_db_level0": "ascend/torch_npu_db/level0",
    "ascend_db_level1": "ascend/torch_npu_db/level1",
    "ascend_db_level2": "ascend/torch_npu_db/level2",
    "msprof_cli": "ascend/msprof_cli",
}

# trace -> ({rule that fires: severity % of step}, rules skipped for lack of data)
EXPECTED: dict[str, tuple[dict[str, float], list[str]]] = {
    "a100_alexnet": (
        {"host_dispatch_bound": 99.67, "memcpy_heavy": 0.13},
        [
            "dataloader_bound",
            "exposed_communication",
            "host_cpu_saturated",
            "memory_bound_ops",
            "precision_mix",
            "profiler_overhead_high",
        ],
    ),
    "a100_rank3_control": (
        {
            "slow_rank": 16.61,  # 8 ranks per group, 1 profiled: waits estimated from messages
            "host_dispatch_bound": 14.45,
            "memory_bound_ops": 12.82,
            "small_op_explosion": 11.49,
            # long memory-bound kernels with recorded shapes join chains (their traffic)
            "fusion_candidates": 9.11,
            "low_utilization_windows": 1.52,
        },
        ["host_cpu_saturated", "profiler_overhead_high"],
    ),
    "a100_triton": (
        {},
        [
            "dataloader_bound",
            "exposed_communication",
            "host_cpu_saturated",
            "profiler_overhead_high",
        ],
    ),
    "ascend_db_level0": (
        {
            "exposed_communication": 60.98,
            "host_dispatch_bound": 24.36,
            "low_utilization_windows": 20.46,
        },
        ["host_cpu_saturated", "memory_bound_ops", "precision_mix", "profiler_overhead_high"],
    ),
    "ascend_db_level1": (
        {
            "slow_rank": 60.33,  # an unprofiled peer: 8 ranks per group, 1 profiled
            "host_dispatch_bound": 22.39,
            "low_utilization_windows": 18.91,
            "precision_mix": 0.96,
        },
        ["host_cpu_saturated", "profiler_overhead_high"],
    ),
    "ascend_db_level2": (
        {
            "slow_rank": 59.01,  # an unprofiled peer
            "host_dispatch_bound": 22.53,
            "low_utilization_windows": 18.81,
            "precision_mix": 0.98,
            "load_imbalance": 2.13,
        },
        ["host_cpu_saturated", "profiler_overhead_high"],
    ),
    "ascend_text_level0": (
        {"exposed_communication": 51.48, "low_utilization_windows": 22.81, "load_imbalance": 6.56},
        [
            "excessive_sync",
            "host_cpu_saturated",
            "long_tail_ops",
            "memory_bound_ops",
            "precision_mix",
            "profiler_overhead_high",
        ],
    ),
    "ascend_text_level1": (
        {
            "slow_rank": 63.43,  # an unprofiled peer (8 ranks, 2 profiled), then rank 1
            "host_dispatch_bound": 23.22,
            "low_utilization_windows": 18.42,
            "precision_mix": 0.91,
            "load_imbalance": 1.81,
        },
        ["host_cpu_saturated", "profiler_overhead_high"],
    ),
    "ascend_text_level2": (
        {
            "slow_rank": 60.18,  # an unprofiled peer
            "host_dispatch_bound": 23.16,
            "low_utilization_windows": 18.81,
            "precision_mix": 0.96,
        },
        ["host_cpu_saturated", "profiler_overhead_high"],
    ),
    "cpu_only_rank34": (
        {},
        [
            "dataloader_bound",
            "excessive_sync",
            "exposed_communication",
            "fusion_candidates",
            "host_cpu_saturated",
            "host_dispatch_bound",
            "long_tail_ops",
            "low_utilization_windows",
            "memcpy_heavy",
            "memory_bound_ops",
            "precision_mix",
            "profiler_overhead_high",
            "small_op_explosion",
        ],
    ),
    "mi250_rocm_minitoy": (
        {"host_dispatch_bound": 96.7, "excessive_sync": 5.14, "precision_mix": 0.2},
        [
            "dataloader_bound",
            "exposed_communication",
            "host_cpu_saturated",
            "profiler_overhead_high",
        ],
    ),
    "msprof_cli": (
        {},
        ["dataloader_bound", "host_cpu_saturated", "profiler_overhead_high"],
    ),
    "mtia_inference": (
        {"excessive_sync": 3.42},
        [
            "dataloader_bound",
            "exposed_communication",
            "host_cpu_saturated",
            "memory_bound_ops",
            "precision_mix",
            "profiler_overhead_high",
        ],
    ),
    "old_pt18_inference_rank1": (
        {"host_dispatch_bound": 98.17},
        [
            "dataloader_bound",
            "exposed_communication",
            "host_cpu_saturated",
            "memory_bound_ops",
            "precision_mix",
            "profiler_overhead_high",
        ],
    ),
    "resnet50_gpu_2021": (
        {
            "dataloader_bound": 33.25,
            "precision_mix": 18.77,
            "low_utilization_windows": 12.56,
            "memory_bound_ops": 5.76,
            "small_op_explosion": 4.95,
            "fusion_candidates": 9.32,  # as on a100_rank3_control
        },
        ["exposed_communication", "host_cpu_saturated", "profiler_overhead_high"],
    ),
    "sampled_2ranks": (
        {
            "host_dispatch_bound": 28.4,
            "exposed_communication": 15.84,
            "slow_rank": 3.21,
            "load_imbalance": 2.5,
        },
        ["dataloader_bound", "host_cpu_saturated", "memory_bound_ops", "profiler_overhead_high"],
    ),
    "v100_ns_timestamps": (
        {"small_op_explosion": 1.75},
        [
            "dataloader_bound",
            "exposed_communication",
            "host_cpu_saturated",
            "memory_bound_ops",
            "precision_mix",
            "profiler_overhead_high",
        ],
    ),
    "v100_rank1_ddp": (
        {
            "host_dispatch_bound": 41.04,
            "small_op_explosion": 27.08,
            "exposed_communication": 20.56,
            "fusion_candidates": 5.14,
            "low_utilization_windows": 4.3,
            "long_tail_ops": 1.1,
        },
        [
            "dataloader_bound",
            "host_cpu_saturated",
            "memory_bound_ops",
            "precision_mix",
            "profiler_overhead_high",
        ],
    ),
    "v100_rank1_test": (
        {"memcpy_heavy": 12.85, "fusion_candidates": 2.87, "small_op_explosion": 2.69},
        ["host_cpu_saturated", "profiler_overhead_high"],
    ),
}
SEVERITY_TOLERANCE_PCT = 0.5  # percentage points of the step


_cache: dict[str, tuple[ProfileAnalysis, AdvisorReport]] = {}


def analysis_replay_steps(name: str) -> list[StepReplay]:
    """The replayed steps of a trace (the advisor's gains are per these steps)."""
    analysis, _ = advised(name)
    return list(replay_profile(analysis.events).steps)


def advised(name: str) -> tuple[ProfileAnalysis, AdvisorReport]:
    if name not in _cache:
        analysis = analyze_traces(load_traces([data_file(TRACES[name])]))
        _cache[name] = (analysis, diagnose(analysis))
    return _cache[name]


@pytest.mark.parametrize("name", sorted(TRACES))
def test_findings_and_skips_are_pinned(name: str) -> None:
    _, report = advised(name)
    fired = {f.id: f.severity_pct for f in report.findings}
    expected_fired, expected_skipped = EXPECTED[name]
    assert sorted(fired) == sorted(expected_fired)
    for rule, severity in expected_fired.items():
        assert fired[rule] == pytest.approx(severity, abs=SEVERITY_TOLERANCE_PCT), rule
    assert sorted(s.rule for s in report.skipped) == expected_skipped
    # ranked by the replayed gain where there is one, else the severity (docs/advisor.md)
    gains = [f.severity_ms if f.whatif_ms is None else f.whatif_ms for f in report.findings]
    assert gains == sorted(gains, reverse=True)
    step_ms = max((s.baseline_ns for s in analysis_replay_steps(name)), default=0) / 1e6
    for finding in report.findings:
        if finding.whatif_ms is not None:
            assert 0.0 <= finding.whatif_ms <= step_ms, finding.id
    for finding in report.findings:
        document = finding.to_dict()
        assert document["evidence"] and document["suggestion"] and document["verify"]
        for span in document["spans"]:
            assert span["end_ns"] >= span["start_ns"]


@pytest.mark.parametrize("name", sorted(TRACES))
def test_no_rule_fires_without_its_data(name: str) -> None:
    """Preconditions checked here from the raw tables, independently of the rules."""
    analysis, report = advised(name)
    fired = {f.id for f in report.findings}
    events = analysis.events
    kinds = set(pc.unique(pc.cast(events["kind"], "string")).to_pylist())
    shapes = pc.fill_null(pc.cast(events["shapes"], "string"), "")
    has_shapes = bool(pc.any(pc.not_equal(shapes, "")).as_py())
    if not kinds & set(schema.DEVICE_TASK_KINDS):
        assert not fired, "a device rule fired on a host-only trace"
    if schema.COMM not in kinds:
        assert "exposed_communication" not in fired
    if schema.DATALOADER not in kinds:
        assert "dataloader_bound" not in fired
    if analysis.counters.num_rows == 0 or "cpu_percent" not in set(
        analysis.counters["name"].to_pylist()
    ):
        assert "host_cpu_saturated" not in fired
    if not has_shapes:
        assert not fired & {"memory_bound_ops", "precision_mix"}
    assert "profiler_overhead_high" not in fired  # no unprofiled step times in these traces


def test_resnet50_waits_for_its_data_loader() -> None:
    analysis, report = advised("resnet50_gpu_2021")
    (top,) = [f for f in report.findings if f.id == "dataloader_bound"]
    assert top.evidence["host_loading_pct_of_step"] == pytest.approx(39.0, abs=1.0)
    assert top.evidence["device_idle_for_data_pct_of_step"] == pytest.approx(33.2, abs=1.0)
    # Replayed without the loader, the steps give back most of the loader's time, never more:
    # the first step's loader runs before the trace's first launch and stays.
    step_ms = float(np.mean(analysis.steps.column("wall_ns").to_numpy())) / 1e6
    loading_ms = top.evidence["host_loading_pct_of_step"] / 100 * step_ms
    assert top.whatif_ms is not None
    assert 0.5 * loading_ms <= top.whatif_ms <= loading_ms


def test_memory_bound_ops_on_a100_uses_the_roofline_of_the_recognised_device() -> None:
    _, report = advised("a100_rank3_control")
    (f,) = [f for f in report.findings if f.id == "memory_bound_ops"]
    assert f.evidence["method"] == "roofline from recorded shapes"
    assert [d["name"] for d in f.evidence["device"]] == ["A100-40GB"]
    top = f.evidence["top_memory_bound_ops"][0]
    assert top["op"] == "aten::bmm" and top["family"] == "matmul"
    # bmm [1024, 647, 96] x [1024, 96, 30] in fp32: 11.04 flops/byte, under A100's fp32 ridge
    assert top["flops_per_byte"] == pytest.approx(11.039, abs=1e-3)


def test_skip_reasons_name_what_is_missing() -> None:
    _, report = advised("v100_rank1_ddp")
    reasons = {s.rule: s.reason for s in report.skipped}
    assert "record_shapes" in reasons["memory_bound_ops"]
    _, report = advised("mtia_inference")
    reasons = {s.rule: s.reason for s in report.skipped}
    assert "not linked" in reasons["memory_bound_ops"]
    _, report = advised("sampled_2ranks")
    reasons = {s.rule: s.reason for s in report.skipped}
    assert "--device-model" in reasons["memory_bound_ops"]


def test_trace_files_are_where_the_table_says() -> None:
    for relative in TRACES.values():
        assert isinstance(data_file(relative), Path)
