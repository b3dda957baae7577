"""memory_bound_ops, fusion_candidates, precision_mix, long_tail_ops on hand-built steps."""

from __future__ import annotations

from typing import Any

import pytest

from perfledger.analysis.advisor import AdvisorConfig, DeviceOverride, Skipped
from tests.advisor_synth import US, V100_META, analyse, finding, outcome
from tests.synth import EventsBuilder

STEP = 1000 * US
MM = ("[[1024, 1024], [1024, 1024]]", '["float", "float"]')
CAST = ("[[4096, 1024], [4096, 1024], []]", '["c10::Half", "float", "Scalar"]')
ADD = ("[[4096, 1024], [4096, 1024], []]", '["float", "float", "Scalar"]')

# V100: 15.7 TFLOP/s fp32 = 15 700 flop/ns, 900 GB/s = 900 bytes/ns.
MM_FLOPS = 2 * 1024**3
CAST_BYTES = 4096 * 1024 * (4 + 2)  # reads fp32, writes fp16
ADD_BYTES = 3 * 4096 * 1024 * 4  # reads two fp32 tensors, writes one
ADD_FLOPS = 4096 * 1024


def op_steps(
    ops: list[tuple[str, tuple[str, str] | None, int, str]],
    *,
    steps: int = 3,
    step_ns: int = STEP,
) -> EventsBuilder:
    """Steps that each run ``ops`` back to back: (host op, (shapes, dtypes), µs, kernel)."""
    b = EventsBuilder()
    ext = 0
    for s in range(steps):
        t0 = s * step_ns
        b.step_mark(t0, step_ns, s + 1)
        at = 10
        for i, (op, recorded, dur_us, kernel) in enumerate(ops):
            ext += 1
            fields: dict[str, Any] = {}
            if recorded is not None:
                fields = {"shapes": recorded[0], "dtypes": recorded[1]}
            b.cpu_op(t0 + 3 * i * US, 3 * US, op, external_id=ext, **fields)
            b.launch(
                t0 + (3 * i + 1) * US, 1 * US, t0 + at * US, dur_us * US, kernel, external_id=ext
            )
            at += dur_us
    return b


def case2(cast_us: int = 300, add_us: int = 100, shapes: bool = True) -> EventsBuilder:
    """The msprof guides' case 2: a matmul, then a cast taking 30% of the step, then an add."""

    def rec(r: tuple[str, str]) -> tuple[str, str] | None:
        return r if shapes else None

    return op_steps(
        [
            ("aten::mm", rec(MM), 500, "volta_sgemm_128x64_nn"),
            ("aten::copy_", rec(CAST), cast_us, "unrolled_elementwise_kernel<copy>"),
            ("aten::add", rec(ADD), add_us, "vectorized_elementwise_kernel<add>"),
        ]
    )


# --- memory_bound_ops --------------------------------------------------------------------------


def test_memory_bound_ops_finds_the_cast() -> None:
    f = finding(analyse(case2(), meta=V100_META), "memory_bound_ops")
    e = f.evidence
    assert e["method"] == "roofline from recorded shapes"
    assert e["device"][0]["name"] == "V100-SXM2"
    # mm: 2·1024³ flops over 12 MiB is far above the fp32 ridge (15 700 / 900 = 17.4)
    assert e["kernel_time_ms_per_step"] == 0.9
    assert e["memory_bound_ms_per_step"] == 0.4  # the cast and the add
    assert e["memory_bound_pct_of_step"] == 40.0
    assert e["memory_bound_pct_of_kernel_time"] == round(100 * 400 / 900, 2)
    assert e["data_movement_ms_per_step"] == 0.3
    assert e["coverage"] == {"operator_calls": 9, "placed": 9, "placed_time_pct": 100.0}
    cast, add = e["top_memory_bound_ops"]
    assert (cast["op"], cast["family"], cast["calls"], cast["ms_per_step"]) == (
        "aten::copy_",
        "layout",
        3,
        0.3,
    )
    assert cast["flops_per_byte"] == 0.0
    assert cast["achieved_gbps"] == round(CAST_BYTES / 300_000, 1)
    assert cast["bandwidth_pct"] == round(100 * CAST_BYTES / 300_000 / 900, 1)
    assert cast["recoverable_ms_per_step"] == 0.3  # data movement: removable as a whole
    assert (cast["step"], cast["start_ns"], cast["end_ns"]) == (1, 510 * US, 810 * US)
    assert add["flops_per_byte"] == round(ADD_FLOPS / ADD_BYTES, 3)
    # the add only down to its roofline time, bytes / bandwidth
    add_recoverable = 100_000 - ADD_BYTES / 900
    assert add["recoverable_ms_per_step"] == round(add_recoverable / 1e6, 3)
    assert f.severity_ms == round((300_000 + add_recoverable) / 1e6, 3)
    assert f.severity_pct == round(100 * (300_000 + add_recoverable) / 1e6, 2)


def test_memory_bound_ops_silent_when_the_data_movement_is_small() -> None:
    assert (
        outcome(analyse(case2(cast_us=30, add_us=20), meta=V100_META), "memory_bound_ops") is None
    )


def test_memory_bound_ops_skips_without_shapes() -> None:
    result = outcome(analyse(case2(shapes=False), meta=V100_META), "memory_bound_ops")
    assert isinstance(result, Skipped) and "record_shapes" in result.reason


def test_memory_bound_ops_needs_device_peaks_or_an_override() -> None:
    analysis = analyse(case2())  # no device properties
    result = outcome(analysis, "memory_bound_ops")
    assert isinstance(result, Skipped) and "--peak-tflops" in result.reason
    config = AdvisorConfig(device=DeviceOverride(peak_tflops=15.7, bandwidth_gbps=900.0))
    overridden = outcome(analysis, "memory_bound_ops", config=config)
    reference = finding(analyse(case2(), meta=V100_META), "memory_bound_ops")
    assert overridden is not None and not isinstance(overridden, Skipped)
    assert overridden.severity_ms == reference.severity_ms
    named = AdvisorConfig(device=DeviceOverride(model="V100-SXM2"))
    by_name = outcome(analysis, "memory_bound_ops", config=named)
    assert by_name is not None and not isinstance(by_name, Skipped)
    assert by_name.severity_ms == reference.severity_ms


def ascend_steps(transdata_us: int) -> EventsBuilder:
    """Ascend kernels with their pipeline ratios and no shapes: a TransData, a MatMul, an Add."""
    b = EventsBuilder()
    kernels = [
        (
            "trans_TransData_1",
            "TransData",
            transdata_us,
            {"aiv_mte2_ratio": 0.6, "aiv_vec_ratio": 0.2},
        ),
        ("MatMulV2_2", "MatMulV2", 500, {"aic_mac_ratio": 0.9, "aic_mte2_ratio": 0.4}),
        ("Add_3", "Add", 100, {"aiv_vec_ratio": 0.7, "aiv_mte2_ratio": 0.3}),
    ]
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        at = 10
        for name, op_type, dur, ratios in kernels:
            b.kernel(t0 + at * US, dur * US, name, args={"op_type": op_type, **ratios})
            at += dur
    return b


def test_memory_bound_ops_on_ascend_pipeline_ratios() -> None:
    f = finding(
        analyse(ascend_steps(300), meta={"device_properties": {"name": "Ascend910B"}}),
        "memory_bound_ops",
    )
    e = f.evidence
    assert e["method"] == "Ascend pipeline ratios"
    (top,) = e["top_memory_bound_ops"]
    assert (top["op"], top["bound_pipe"], top["family"], top["calls"]) == (
        "TransData",
        "aiv_mte2",
        "layout",
        3,
    )
    assert e["memory_bound_pct_of_step"] == 30.0
    assert (f.severity_ms, f.severity_pct) == (0.3, 30.0)


def test_memory_bound_ops_on_ascend_silent_when_compute_dominates() -> None:
    analysis = analyse(ascend_steps(50))
    assert outcome(analysis, "memory_bound_ops") is None


# --- precision_mix -----------------------------------------------------------------------------


def test_precision_mix_fires_on_fp32_matmul() -> None:
    f = finding(analyse(case2(), meta=V100_META), "precision_mix")
    e = f.evidence
    assert e["matmul_conv_ms_per_step"] == 0.5
    assert e["matmul_conv_pct_of_kernel_time"] == round(100 * 500 / 900, 2)
    assert e["fp32_pct_of_matmul_conv_time"] == 100.0
    assert e["ms_per_step_by_precision"] == {"fp32": 0.5}
    assert e["device_peaks"][0]["fp32_tflops"] == 15.7
    (top,) = e["top_fp32_ops"]
    assert (top["op"], top["calls"], top["ms_per_step"]) == ("aten::mm", 3, 0.5)
    # fp32 time x (1 - 1/2)
    assert (f.severity_ms, f.severity_pct) == (0.25, 25.0)


def test_precision_mix_silent_in_bf16_and_on_tf32_kernels() -> None:
    bf16 = ("[[1024, 1024], [1024, 1024]]", '["c10::BFloat16", "c10::BFloat16"]')
    b = op_steps([("aten::mm", bf16, 500, "sm80_gemm_bf16")])
    assert outcome(analyse(b), "precision_mix") is None
    tf32 = op_steps([("aten::mm", MM, 500, "cutlass_80_tensorop_s1688gemm_64x64_32x6_tn")])
    assert outcome(analyse(tf32), "precision_mix") is None


def test_precision_mix_skips_without_types() -> None:
    result = outcome(analyse(case2(shapes=False)), "precision_mix")
    assert isinstance(result, Skipped) and "input types" in result.reason


# --- fusion_candidates -------------------------------------------------------------------------

CHAIN_SHAPES = {
    "aten::copy_": ("[[1024, 256], [1024, 256], []]", '["float", "float", "Scalar"]'),
    "aten::add": ("[[1024, 256], [1024, 256], []]", '["float", "float", "Scalar"]'),
    "aten::mul": ("[[1024, 256], [1024, 256]]", '["float", "float"]'),
}


def chain_steps(member_us: int = 10, blocks: int = 4) -> EventsBuilder:
    """Per 1 ms step, ``blocks`` x (a 100 µs matmul, then copy_ → add → mul, 2 µs apart)."""
    b = EventsBuilder()
    ext = 0
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        at = 10
        host = 0
        for _ in range(blocks):
            for op, dur in (
                ("aten::mm", 100),
                ("aten::copy_", member_us),
                ("aten::add", member_us),
                ("aten::mul", member_us),
            ):
                ext += 1
                recorded = CHAIN_SHAPES.get(op, MM)
                b.cpu_op(
                    t0 + host * US,
                    1 * US,
                    op,
                    external_id=ext,
                    shapes=recorded[0],
                    dtypes=recorded[1],
                )
                b.launch(t0 + host * US, 1 * US, t0 + at * US, dur * US, f"k_{op}", external_id=ext)
                host += 1
                at += dur + (2 if op != "aten::mm" else 0)
    return b


def test_fusion_candidates_finds_the_repeated_chain() -> None:
    f = finding(analyse(chain_steps()), "fusion_candidates")
    e = f.evidence
    assert e["candidates"] == 1
    (chain,) = e["chains"]
    assert chain["ops"] == ["aten::copy_", "aten::add", "aten::mul"]
    assert (chain["occurrences"], chain["per_step"]) == (12, 4.0)
    assert chain["mean_chain_us"] == 30.0
    assert chain["mean_internal_gaps_us"] == 4.0
    # copy_ and add each write a 1024 x 256 fp32 tensor that the next kernel reads back
    assert chain["intermediate_mb_per_occurrence"] == round(2 * 1024 * 256 * 4 / 1e6, 3)
    # gaps inside (4 µs) + every member but the longest (20 µs)
    assert chain["saving_us_per_occurrence"] == 24.0
    assert chain["saving_ms_per_step"] == 0.096
    assert (chain["step"], chain["start_ns"]) == (1, 110 * US)
    assert (f.severity_ms, f.severity_pct) == (0.096, 9.6)


def test_fusion_candidates_silent_for_long_kernels_or_few_repeats() -> None:
    assert outcome(analyse(chain_steps(member_us=80)), "fusion_candidates") is None
    # 3 steps x 2 blocks = 6 occurrences: still > 5 ...
    assert outcome(analyse(chain_steps(blocks=2)), "fusion_candidates") is not None
    # ... but not more than 6
    analysis = analyse(chain_steps(blocks=2))
    assert outcome(analysis, "fusion_candidates", thresholds={"min_repeats": 6}) is None


# --- long_tail_ops -----------------------------------------------------------------------------


def slow_instance_steps(slow_us: int) -> EventsBuilder:
    """Three 1 ms steps of ten 20 µs matmuls on the same shapes; the 5th of step 2 takes
    ``slow_us``."""
    b = EventsBuilder()
    ext = 0
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        at = 10
        for i in range(10):
            ext += 1
            dur = slow_us if (s == 1 and i == 4) else 20
            b.cpu_op(
                t0 + 3 * i * US, 3 * US, "aten::mm", external_id=ext, shapes=MM[0], dtypes=MM[1]
            )
            b.launch(
                t0 + (3 * i + 1) * US,
                1 * US,
                t0 + at * US,
                dur * US,
                "volta_sgemm",
                external_id=ext,
            )
            at += dur
    return b


def test_long_tail_ops_fires_on_the_slow_instance() -> None:
    f = finding(analyse(slow_instance_steps(200)), "long_tail_ops")
    e = f.evidence
    assert (e["slow_instances"], e["groups_with_slow_instances"]) == (1, 1)
    (worst,) = e["worst_instances"]
    assert (worst["op"], worst["dur_us"], worst["median_us"], worst["ratio"]) == (
        "aten::mm",
        200.0,
        20.0,
        10.0,
    )
    assert (worst["instances"], worst["step"]) == (30, 2)
    assert (worst["start_ns"], worst["end_ns"]) == (STEP + 90 * US, STEP + 290 * US)
    assert e["slow_instances_in_first_profiled_step_pct"] == 0.0
    # 180 µs above the median, over three steps
    assert (f.severity_ms, f.severity_pct) == (0.06, 6.0)


@pytest.mark.parametrize("slow_us", [20, 59])
def test_long_tail_ops_silent_without_a_real_outlier(slow_us: int) -> None:
    # 59 µs is under 3 x 20 µs
    assert outcome(analyse(slow_instance_steps(slow_us)), "long_tail_ops") is None


def test_long_tail_ops_skips_without_any_size_information() -> None:
    b = EventsBuilder().step_mark(0, STEP, 1)
    for i in range(10):
        b.launch(i * US, 1 * US, (20 + 30 * i) * US, (20 if i else 200) * US, "k")
    result = outcome(analyse(b), "long_tail_ops")
    assert isinstance(result, Skipped)
