"""The report's payload on hand-built profiles with known answers: the device tasks behind each
op-statistic row, constant counter series, the profiled steps' bands and a host-only step's
phases (no browser: the figures the page draws)."""

from __future__ import annotations

from typing import Any

from perfledger.analysis.profile import analyze_traces
from perfledger.model import schema
from perfledger.model.trace import Trace
from perfledger.render.report.data import ReportData, report_data_from_profile
from perfledger.render.report.payload import report_payload
from tests.advisor_synth import counters_table
from tests.synth import EventsBuilder

US = 1_000
MS = 1_000_000


def payload_of(b: EventsBuilder, counters: Any = None) -> dict[str, Any]:
    trace = Trace(
        events=b.table(),
        counters=counters if counters is not None else schema.empty_counters(),
        source_kind="synthetic",
    )
    analysis = analyze_traces([trace])
    return report_payload(report_data_from_profile(analysis, {}, title="hand"))


def column(table: dict[str, Any], name: str) -> list[Any]:
    return next(c["values"] for c in table["columns"] if c["name"] == name)


def test_op_statistic_names_the_device_tasks_of_each_operator() -> None:
    # per step: aten::mm runs gemm_a three times and gemm_b once; aten::copy_ five kernels
    # once each; aten::add its own-named kernel... under no operator (no host op)
    b = EventsBuilder()
    eid = 0
    for step in range(2):
        t0 = step * 10 * MS
        b.step_mark(t0, 9 * MS, step)
        launches = [("aten::mm", "gemm_a")] * 3 + [("aten::mm", "gemm_b")]
        launches += [("aten::copy_", f"copy_k{i}") for i in range(5)]
        for i, (op, kernel) in enumerate(launches):
            eid += 1
            h = t0 + i * 200 * US
            b.cpu_op(h, 100 * US, op, external_id=eid)
            b.launch(h + 10 * US, 5 * US, h + 50 * US, 40 * US, kernel, external_id=eid)
        b.launch(t0 + 5 * MS, 5 * US, t0 + 5 * MS + 50 * US, 40 * US, "lonely_kernel")
    table = payload_of(b)["tables"]["op_statistic"]
    tasks = dict(zip(column(table, "name"), column(table, "device_tasks"), strict=True))
    assert tasks["aten::mm"] == "gemm_a · gemm_b"  # the more frequent first
    assert tasks["aten::copy_"] == "copy_k0 · copy_k1 · copy_k2 · +2 more"
    assert tasks["lonely_kernel"] is None  # its only task bears its own name


def test_constant_counters_are_flagged_and_keep_two_points() -> None:
    b = EventsBuilder()
    for step in range(3):
        b.step_mark(step * 10 * MS, 9 * MS, step)
        b.cpu_op(step * 10 * MS + MS, MS, "aten::mm")
    rows = [("cpu", "reserved_bytes", k * MS, 0.0) for k in range(30)]
    rows += [("cpu", "allocated_bytes", k * MS, float(k % 4)) for k in range(30)]
    payload = payload_of(b, counters_table(rows))
    series = {s["name"]: s for s in payload["counters"]}
    assert series["reserved_bytes"]["constant"] is True
    assert series["reserved_bytes"]["value"] == [0.0, 0.0]
    assert series["reserved_bytes"]["t_s"] == [0.0, 0.029]
    assert series["allocated_bytes"]["constant"] is False
    assert len(series["allocated_bytes"]["value"]) == 30
    # every profiled step is a band on the counters' time axis (s from the profile start)
    assert payload["step_marks"] == [[0, 0.0, 0.009], [1, 0.01, 0.019], [2, 0.02, 0.029]]


def test_host_only_step_phases_follow_the_host_accounting() -> None:
    # one 100 ms step: data loading 0-20, forward 20-50, backward 50-90 (two autograd
    # operators with an aten call inside the second), optimizer 90-100 with a call inside
    # (the script's outer Python frame, reaching outside the step, has no phase)
    b = EventsBuilder()
    b.python(-5 * MS, 200 * MS, "train.py(1): <module>")
    b.step_mark(0, 100 * MS, 1)
    b.dataloader(0, 20 * MS, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    b.cpu_op(20 * MS, 30 * MS, "aten::conv2d")
    b.cpu_op(50 * MS, 15 * MS, "autograd::engine::evaluate_function: AddmmBackward0")
    b.cpu_op(66 * MS, 24 * MS, "autograd::engine::evaluate_function: ConvolutionBackward0")
    b.cpu_op(70 * MS, 10 * MS, "aten::convolution_backward")
    b.annotation(90 * MS, 10 * MS, "Optimizer.step#SGD.step")
    b.cpu_op(91 * MS, 5 * MS, "aten::add_")
    payload = payload_of(b)
    timeline = next(iter(payload["timelines"].values()))
    names = [payload["timeline_names"][c] for c in timeline["name"]]
    phases = [payload["timeline_phases"][c] for c in timeline["phase"]]
    by_name = dict(zip(names, phases, strict=True))
    assert by_name == {
        "train.py(1): <module>": "",
        "ProfilerStep#1": "",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": "dataloader",
        "aten::conv2d": "forward",
        "autograd::engine::evaluate_function: AddmmBackward0": "backward",
        "autograd::engine::evaluate_function: ConvolutionBackward0": "backward",
        "aten::convolution_backward": "backward",
        "Optimizer.step#SGD.step": "optimizer",
        "aten::add_": "optimizer",
    }


def test_no_phases_where_the_step_has_device_work() -> None:
    b = EventsBuilder()
    b.step_mark(0, 10 * MS, 1)
    b.cpu_op(MS, MS, "aten::mm", external_id=1)
    b.launch(MS + 10 * US, 5 * US, MS + 50 * US, 400 * US, "gemm", external_id=1)
    timeline = next(iter(payload_of(b)["timelines"].values()))
    assert timeline["phase"] is None


def test_a_report_without_replay_has_no_critical_path() -> None:
    assert report_payload(ReportData(title="bare"))["critical_path"] is None
