"""Run comparison on hand-built tables: noise bands, gates, op movers, classes, findings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis import diff
from perfledger.cli.diff_gates import parse_threshold
from perfledger.errors import PerfledgerError
from perfledger.model.accounts import GAPS_SCHEMA, HOST_STEP_TRACE_COLUMNS, STEP_TRACE_COLUMNS
from perfledger.model.tables import (
    COMMUNICATION_SCHEMA,
    HOST_OP_SUMMARY_SCHEMA,
    OP_SUMMARY_SCHEMA,
    TRANSFERS_SCHEMA,
)
from perfledger.render.diff_json import diff_document

MS = 1_000_000


def step_trace(walls_ms: Sequence[float], idle_pct: Sequence[float] | None = None) -> pa.Table:
    """One device, one row per step; idle (cause: sync) is a share of each step."""
    rows = []
    start = 0
    idle_pct = idle_pct or [0.0] * len(walls_ms)
    for step, (wall_ms, pct) in enumerate(zip(walls_ms, idle_pct, strict=True), start=1):
        wall = round(wall_ms * MS)
        idle = round(wall * pct / 100)
        row = dict.fromkeys(STEP_TRACE_COLUMNS, 0)
        row.update(
            rank=0,
            device=0,
            step=step,
            start_ns=start,
            end_ns=start + wall,
            wall_ns=wall,
            compute_ns=wall - idle,
            idle_ns=idle,
            idle_sync_ns=idle,
        )
        rows.append(row)
        start += wall
    span = dict.fromkeys(STEP_TRACE_COLUMNS, 0)
    span.update(rank=0, device=0, step=-1, end_ns=start, wall_ns=start, compute_ns=start)
    rows.append(span)
    return pa.Table.from_pylist(rows)


def op_summary(rows: Sequence[tuple[str, str, str | None, int, int]]) -> pa.Table:
    """(kind, task name, host op, step, dur_ns) per device task."""
    return pa.Table.from_pylist(
        [
            {
                "rank": 0,
                "device": 0,
                "stream": 7,
                "step": step,
                "kind": kind,
                "name": name,
                "start_ns": 0,
                "dur_ns": dur,
                "wait_ns": 0,
                "host_op": host_op,
                "launch_ns": -1,
                "bytes": -1,
                "shapes": None,
                "dtypes": None,
            }
            for kind, name, host_op, step, dur in rows
        ],
        schema=OP_SUMMARY_SCHEMA,
    )


def run(
    walls_ms: Sequence[float],
    *,
    idle_pct: Sequence[float] | None = None,
    ops: pa.Table | None = None,
    transfers: Sequence[dict[str, Any]] = (),
    communication: Sequence[dict[str, Any]] = (),
    gaps_us: Sequence[float] = (),
    findings: Sequence[dict[str, Any]] = (),
    step_count: int | None = None,
    label: str = "run",
) -> diff.RunTables:
    gaps = pa.Table.from_pylist(
        [
            {
                "rank": 0,
                "device": 0,
                "step": 1,
                "start_ns": 0,
                "end_ns": round(g * 1000),
                "dur_ns": round(g * 1000),
                "cause": "sync",
                "next_task": -1,
                "launch_start_ns": -1,
            }
            for g in gaps_us
        ],
        schema=GAPS_SCHEMA,
    )
    return diff.RunTables(
        label=label,
        path=label,
        source_kind="kineto",
        step_count=len(walls_ms) if step_count is None else step_count,
        step_trace=step_trace(walls_ms, idle_pct),
        gaps=gaps,
        op_summary=ops if ops is not None else op_summary([]),
        transfers=pa.Table.from_pylist(list(transfers), schema=TRANSFERS_SCHEMA),
        communication=pa.Table.from_pylist(list(communication), schema=COMMUNICATION_SCHEMA),
        findings=tuple(findings),
    )


# Noise ----------------------------------------------------------------------------------------

NOISY = [100.0, 110.0, 90.0, 105.0, 95.0]  # median 100, MAD 5
# sigma of the median: 1.2533 * 1.4826 * MAD; SE of the difference with 5 steps each side
NOISY_BAND = 2 * math.sqrt(2 * (1.2533 * 1.4826 * 5) ** 2 / 5)


def test_noise_band_of_medians_by_hand() -> None:
    base, current = run(NOISY), run([w + 6 for w in NOISY])
    step = diff.diff_runs(base, current).step_time
    assert step.median.base == 100.0
    assert step.median.current == pytest.approx(106.0)
    assert step.median.noise == pytest.approx(NOISY_BAND)  # 11.75 ms
    assert step.median.within_noise is True
    assert step.base.spread_pct == pytest.approx(1.4826 * 5)
    assert step.base.p90 == pytest.approx(108.0)  # linear between 105 and 110


def test_quiet_steps_make_the_same_shift_real() -> None:
    quiet = [100.0, 101.0, 99.0, 100.5, 99.5]  # MAD 0.5
    step = diff.diff_runs(run(quiet), run([w + 6 for w in quiet])).step_time
    assert step.median.noise == pytest.approx(NOISY_BAND / 10)
    assert step.median.within_noise is False


def test_floor_when_steps_are_identical() -> None:
    same = diff.diff_runs(run([100.0] * 4), run([100.5] * 4)).step_time
    assert same.median.noise == pytest.approx(1.0)  # 1 % of 100 ms
    assert same.median.within_noise is True
    wider = diff.diff_runs(
        run([100.0] * 4), run([100.5] * 4), diff.DiffOptions(noise_floor_pct=0.1)
    ).step_time
    assert wider.median.within_noise is False


def test_single_step_borrows_the_other_side_spread() -> None:
    band = diff.noise_band(np.array([100.0]), np.array(NOISY), robust=True, z=2.0)
    sigma = 1.2533 * 1.4826 * 5
    assert band == pytest.approx(2 * math.sqrt(sigma**2 / 1 + sigma**2 / 5))
    assert diff.noise_band(np.array([1.0]), np.array([2.0]), robust=True, z=2.0) is None


def test_mean_categories_use_sample_deviation() -> None:
    base = run([100.0] * 4, idle_pct=[10, 20, 10, 20])
    current = run([100.0] * 4, idle_pct=[12, 22, 12, 22])
    idle = diff.diff_runs(base, current).category("idle")
    assert idle is not None
    assert idle.share.base == pytest.approx(15.0)
    assert idle.share.current == pytest.approx(17.0)
    assert idle.share.delta == pytest.approx(2.0)
    s = np.std([10, 20, 10, 20], ddof=1)
    assert idle.share.noise == pytest.approx(2 * math.sqrt(2 * s**2 / 4))
    assert idle.share.within_noise is True
    assert idle.ms.base == pytest.approx(15.0)


# Gates ----------------------------------------------------------------------------------------


def gate(base: diff.RunTables, current: diff.RunTables, *expressions: str, **kw: Any):
    result = diff.diff_runs(base, current)
    return diff.evaluate_gates(result, [parse_threshold(e) for e in expressions], **kw)


def test_regression_beyond_noise_crosses() -> None:
    quiet = [100.0, 101.0, 99.0, 100.5, 99.5]
    (check,) = gate(run(quiet), run([w * 1.06 for w in quiet]), "step_time>+5%")
    assert check.status == diff.CROSSED
    assert check.value == pytest.approx(6.0)
    assert check.crossed


def test_regression_within_noise_does_not_fail() -> None:
    (check,) = gate(run(NOISY), run([w + 6 for w in NOISY]), "step_time>+5%")
    assert check.value == pytest.approx(6.0)
    assert check.status == diff.WITHIN_NOISE
    assert not check.crossed
    (forced,) = gate(run(NOISY), run([w + 6 for w in NOISY]), "step_time>+5%", ignore_noise=True)
    assert forced.crossed


def test_improvement_does_not_cross_a_regression_gate() -> None:
    checks = gate(run([100.0] * 4), run([80.0] * 4), "step_time>+5%", "throughput<-5%")
    assert [c.status for c in checks] == [diff.PASSED, diff.PASSED]
    assert checks[1].value == pytest.approx(100 * (100 / 80 - 1))


def test_throughput_drop_crosses() -> None:
    (check,) = gate(run([100.0] * 4), run([125.0] * 4), "throughput<-10%")
    assert check.value == pytest.approx(-20.0)  # 10 -> 8 steps/s
    assert check.crossed


def test_idle_percentage_points() -> None:
    base = run([100.0] * 4, idle_pct=[10] * 4)
    current = run([100.0] * 4, idle_pct=[13] * 4)
    pp, ms, pct = gate(base, current, "idle>+2pp", "idle>+2ms", "idle>+50%")
    assert pp.value == pytest.approx(3.0) and pp.crossed
    assert ms.value == pytest.approx(3.0) and ms.crossed
    assert pct.value == pytest.approx(30.0) and pct.status == diff.PASSED
    (cause,) = gate(base, current, "idle_sync>+1pp")
    assert cause.crossed


def test_missing_figure_is_unknown() -> None:
    no_steps = run([100.0], step_count=0)
    (check,) = gate(no_steps, run([100.0] * 3), "step_time>+5%")
    assert check.status == diff.UNKNOWN
    assert check.value is None


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("step_time>5", "expected METRIC"),
        ("steptime>+5%", "unknown metric"),
        ("step_time>+5pp", "takes % or ms"),
        ("utilization<-2%", "takes pp"),
        ("", "expected METRIC"),
    ],
)
def test_bad_threshold(expression: str, message: str) -> None:
    with pytest.raises(PerfledgerError, match=message):
        parse_threshold(expression)


def test_threshold_forms() -> None:
    t = parse_threshold(" idle_host_dispatch >= -1.5 ms ")
    assert (t.metric, t.op, t.limit, t.unit) == ("idle_host_dispatch", ">=", -1.5, "ms")
    # a metric whose name holds a digit
    p90 = parse_threshold("step_time_p90>+1%")
    assert (p90.metric, p90.op, p90.limit, p90.unit) == ("step_time_p90", ">", 1.0, "%")


# Operators, classes, transfers, communication --------------------------------------------------


def test_op_movers_new_vanished_per_step() -> None:
    # base: 2 steps; current: 4 steps. Per-step figures divide by the step count.
    base_ops = op_summary(
        [
            ("kernel", "ampere_sgemm_128x64_nn", "aten::mm", 1, 300_000),
            ("kernel", "ampere_sgemm_128x64_nn", "aten::mm", 2, 300_000),
            ("kernel", "vectorized_elementwise_kernel<add>", "aten::add", 1, 50_000),
            ("kernel", "vectorized_elementwise_kernel<add>", "aten::add", 2, 50_000),
            ("kernel", "old_kernel", None, 1, 10_000),
            ("kernel", "outside", "aten::mm", -1, 999_000_000),  # not in a step: ignored
        ]
    )
    current_ops = op_summary(
        [
            *[("kernel", "ampere_sgemm_128x64_nn", "aten::mm", s, 200_000) for s in (1, 2, 3, 4)],
            *[
                ("kernel", "vectorized_elementwise_kernel<add>", "aten::add", s, 25_000)
                for s in (1, 2, 3, 4)
                for _ in range(2)
            ],
            ("kernel", "flash_fwd_kernel", "aten::_flash_attention_forward", 1, 400_000),
        ]
    )
    result = diff.diff_runs(run([1.0, 1.0], ops=base_ops), run([1.0] * 4, ops=current_ops))
    movers = {r.name: r for r in result.ops.movers_by_time}
    mm = movers["aten::mm"]
    assert (mm.base_ms, mm.current_ms, mm.delta_ms) == pytest.approx((0.3, 0.2, -0.1))
    assert mm.change_pct == pytest.approx(-100 / 3)
    assert (mm.base_count, mm.current_count) == (1.0, 1.0)
    assert "aten::add" not in movers  # same time per step: not a mover by time
    (add,) = result.ops.movers_by_count
    assert add.name == "aten::add"
    assert add.base_ms == pytest.approx(0.05) and add.current_ms == pytest.approx(0.05)
    assert (add.base_count, add.current_count, add.delta_count) == (1.0, 2.0, 1.0)
    assert [(r.name, r.op_class, r.current_ms) for r in result.ops.new] == [
        ("aten::_flash_attention_forward", "attention", pytest.approx(0.1))
    ]
    assert [(r.name, r.base_ms) for r in result.ops.vanished] == [
        ("old_kernel", pytest.approx(0.005))
    ]
    classes = {c.op_class: c for c in result.ops.classes}
    assert classes["matmul"].base_share_pct == pytest.approx(100 * 600 / 710)
    assert classes["attention"].current_ms == pytest.approx(0.1)
    assert classes["attention"].base_ms == 0.0
    assert classes["other"].base_count == 0.5


def test_transfers_and_communication_per_step() -> None:
    def transfer(count: int, nbytes: int, time_ns: int) -> dict[str, Any]:
        return {
            "direction": "HtoD",
            "count": count,
            "bytes": nbytes,
            "time_ns": time_ns,
            "gbps": nbytes / time_ns,
            "pageable_count": 0,
            "small_count": 0,
            "unknown_bytes_count": 0,
        }

    def comm(total: int, overlapped: int) -> dict[str, Any]:
        return {
            "rank": 0,
            "device": 0,
            "name": "ncclKernel_AllReduce",
            "count": 2,
            "total_ns": total,
            "avg_ns": total // 2,
            "max_ns": total // 2,
            "overlapped_ns": overlapped,
            "exposed_ns": total - overlapped,
            "bytes": -1,
        }

    base = run([1.0, 1.0], transfers=[transfer(4, 4000, 2000)], communication=[comm(4 * MS, MS)])
    current = run([1.0] * 4, transfers=[transfer(4, 4000, 1000)], communication=[comm(4 * MS, 0)])
    result = diff.diff_runs(base, current)
    (htod,) = result.transfers
    assert (htod.count.base, htod.count.current) == (2.0, 1.0)
    assert htod.time_ms.base == pytest.approx(0.001)
    assert htod.gbps.current == pytest.approx(4.0)
    c = result.communication
    assert (c.total_ms.base, c.total_ms.current) == pytest.approx((2.0, 1.0))
    assert (c.exposed_ms.base, c.exposed_ms.current) == pytest.approx((1.5, 1.0))
    assert (c.overlapped_ms.base, c.overlapped_ms.current) == pytest.approx((0.5, 0.0))


# Findings, layouts ------------------------------------------------------------------------------


def test_findings_resolved_new_changed() -> None:
    base = [
        {"id": "excessive_sync", "title": "sync", "severity_ms": 2.0, "severity_pct": 10.0},
        {"id": "memcpy_heavy", "title": "copies", "severity_ms": 1.0, "severity_pct": 5.0},
        {"id": "long_tail_ops", "title": "tail", "severity_ms": 0.5, "severity_pct": 2.5},
    ]
    current = [
        {"id": "memcpy_heavy", "title": "copies", "severity_ms": 3.0, "severity_pct": 15.0},
        {"id": "long_tail_ops", "title": "tail", "severity_ms": 0.5, "severity_pct": 2.5},
        {"id": "dataloader_bound", "title": "loader", "severity_ms": 4.0, "severity_pct": 20.0},
    ]
    found = diff.findings_diff(base, current)
    assert [f["id"] for f in found.resolved] == ["excessive_sync"]
    assert [f["id"] for f in found.new] == ["dataloader_bound"]
    (changed,) = found.changed
    assert (changed.id, changed.base_severity_ms, changed.current_severity_ms) == (
        "memcpy_heavy",
        1.0,
        3.0,
    )
    assert found.unchanged == ("long_tail_ops",)


def host_run(walls_ms: Sequence[float], overhead_ms: float) -> diff.RunTables:
    rows = []
    for step, wall_ms in enumerate(walls_ms, start=1):
        row = dict.fromkeys(HOST_STEP_TRACE_COLUMNS, 0)
        wall = round(wall_ms * MS)
        overhead = round(overhead_ms * MS)
        row.update(
            rank=0,
            device=-1,
            step=step,
            wall_ns=wall,
            end_ns=wall,
            forward_ns=wall,
            operator_ns=wall - overhead,
            overhead_ns=overhead,
        )
        rows.append(row)
    ops = pa.Table.from_pylist(
        [
            {
                "rank": 0,
                "device": -1,
                "stream": 1,
                "step": 1,
                "kind": "cpu_op",
                "name": "aten::addmm",
                "start_ns": 0,
                "dur_ns": 5 * MS,
                "self_ns": 2 * MS,
                "shapes": None,
                "dtypes": None,
            }
        ],
        schema=HOST_OP_SUMMARY_SCHEMA,
    )
    return diff.RunTables(
        label="cpu",
        path="cpu",
        source_kind="kineto",
        step_count=len(walls_ms),
        step_trace=pa.Table.from_pylist(rows),
        gaps=GAPS_SCHEMA.empty_table(),
        op_summary=ops,
        transfers=TRANSFERS_SCHEMA.empty_table(),
        communication=COMMUNICATION_SCHEMA.empty_table(),
    )


def test_host_only_runs_compare_host_categories() -> None:
    result = diff.diff_runs(host_run([10.0, 10.0], 4.0), host_run([8.0, 8.0], 2.0))
    assert [c.name for c in result.categories] == list(diff.HOST_CATEGORIES)
    overhead = result.category("overhead")
    assert overhead is not None
    assert (overhead.ms.base, overhead.ms.current) == pytest.approx((4.0, 2.0))
    assert (overhead.share.base, overhead.share.current) == pytest.approx((40.0, 25.0))
    assert result.utilization.base is None
    (matmul,) = result.ops.classes
    # self time, not inclusive time, per step
    assert (matmul.op_class, matmul.base_ms) == ("matmul", pytest.approx(1.0))
    assert result.step_time.median.change_pct == pytest.approx(-20.0)


def test_host_against_device_compares_step_time_only() -> None:
    result = diff.diff_runs(host_run([10.0], 4.0), run([5.0]))
    assert result.categories == ()
    assert result.step_time.median.change_pct == pytest.approx(-50.0)
    (check,) = diff.evaluate_gates(result, [parse_threshold("idle>+1pp")])
    assert check.status == diff.UNKNOWN


def test_no_step_annotation_has_no_step_time() -> None:
    result = diff.diff_runs(run([5.0], step_count=0, label="flat"), run([4.0, 4.0]))
    assert result.step_time.median.within_noise is None
    assert result.verdict == "step time not compared: flat has no step annotation"
    compute = result.category("compute")
    assert compute is not None and compute.ms.base == pytest.approx(5.0)


def test_gap_samples_per_step() -> None:
    base = run([1.0, 1.0], gaps_us=[10, 20, 30, 0])  # the zero-length gap is left out
    current = run([1.0, 1.0], gaps_us=[5, 5])
    gaps = diff.diff_runs(base, current).gaps
    assert gaps.duration_us.base == pytest.approx(20.0)
    assert gaps.count_per_step.base == pytest.approx(1.5)
    assert gaps.count_per_step.current == pytest.approx(1.0)
    assert gaps.idle_ms_per_step.base == pytest.approx(0.030)
    assert dict(gaps.by_cause_ms)["sync"].current == pytest.approx(0.005)


def test_document_is_plain_json_with_fixed_keys() -> None:
    import json

    result = diff.diff_runs(run(NOISY), run([w * 1.2 for w in NOISY]))
    checks = diff.evaluate_gates(result, [parse_threshold("step_time>+5%")])
    document = diff_document(result, checks)
    text = json.dumps(document, allow_nan=False)
    assert json.loads(text) == document
    assert {"base", "current", "step_time_ms", "categories", "failed"} <= set(document)
    assert set(document["step_time_ms"]) >= {"base", "current", "change_pct", "within_noise"}
    (failed,) = document["failed"]
    assert failed["threshold"] == "step_time>+5%"
    assert failed["value"] == 20.0
    assert failed["status"] == "crossed"
