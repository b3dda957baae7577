"""exposed_communication, memcpy_heavy, dataloader_bound, low_utilization_windows,
host_cpu_saturated, profiler_overhead_high on hand-built steps."""

from __future__ import annotations

from perfledger.analysis.advisor import AdvisorConfig, DeviceOverride, Skipped
from perfledger.model import schema
from tests.advisor_synth import (
    US,
    V100_META,
    analyse,
    counters_table,
    finding,
    host_bound_steps,
    outcome,
)
from tests.synth import EventsBuilder

STEP = 1000 * US


def comm_steps(comm_start_us: int) -> EventsBuilder:
    """Three 1 ms steps: a 500 µs kernel from 10 µs, a 300 µs all-reduce on another stream."""
    b = EventsBuilder()
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        b.launch(t0, 1 * US, t0 + 10 * US, 500 * US, "gemm")
        b.launch(
            t0 + 2 * US,
            1 * US,
            t0 + comm_start_us * US,
            300 * US,
            "ncclKernel_AllReduce_RING_LL_Sum_float",
            kind=schema.COMM,
            stream=8,
        )
    return b


def test_exposed_communication_fires() -> None:
    f = finding(analyse(comm_steps(400)), "exposed_communication")
    e = f.evidence
    # the all-reduce [400, 700) runs under the kernel [10, 510) for 110 µs, alone for 190 µs
    assert e["exposed_ms_per_step"] == 0.19
    assert e["exposed_pct_of_step"] == 19.0
    assert e["overlapped_ms_per_step"] == 0.11
    assert e["overlap_pct_of_communication"] == round(100 * 110 / 300, 2)
    (op,) = e["by_operation"]
    assert (op["count"], op["total_ms"], op["exposed_ms"]) == (3, 0.9, 0.57)
    worst = e["worst_tasks"][0]
    assert (worst["exposed_us"], worst["dur_us"], worst["step"]) == (190.0, 300.0, 1)
    assert (worst["start_ns"], worst["end_ns"]) == (400 * US, 700 * US)
    assert (f.severity_ms, f.severity_pct) == (0.19, 19.0)


def test_exposed_communication_silent_when_hidden_and_skipped_without_comm() -> None:
    assert outcome(analyse(comm_steps(100)), "exposed_communication") is None
    b = EventsBuilder().step_mark(0, STEP, 1).launch(0, US, 10 * US, 500 * US, "gemm")
    assert isinstance(outcome(analyse(b), "exposed_communication"), Skipped)


# --- memcpy_heavy ------------------------------------------------------------------------------


def copy_steps() -> EventsBuilder:
    """Per 1 ms step: a 400 µs kernel, an 8 MiB pageable copy of 400 µs, four 4 KiB copies."""
    b = EventsBuilder()
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        b.launch(t0, 1 * US, t0 + 10 * US, 400 * US, "gemm")
        b.launch(
            t0 + 2 * US,
            1 * US,
            t0 + 410 * US,
            400 * US,
            "Memcpy HtoD (Pageable -> Device)",
            kind=schema.MEMCPY,
            bytes=8 * 2**20,
        )
        for i in range(4):
            b.launch(
                t0 + (4 + i) * US,
                1 * US,
                t0 + (820 + 10 * i) * US,
                5 * US,
                "Memcpy HtoD (Pinned -> Device)",
                kind=schema.MEMCPY,
                bytes=4096,
            )
    return b


def test_memcpy_heavy_fires_with_every_symptom() -> None:
    analysis = analyse(copy_steps(), meta=V100_META)
    # four small copies per step are not "many" by default ...
    assert len(finding(analysis, "memcpy_heavy").evidence["symptoms"]) == 2
    # ... but are with a lower minimum
    f = finding(analysis, "memcpy_heavy", thresholds={"small_min_per_step": 4})
    e = f.evidence
    # copies alone on the device: 400 + 4 x 5 µs of 820 µs busy
    assert e["exposed_copy_ms_per_step"] == 0.42
    assert e["exposed_copy_pct_of_busy"] == round(100 * 420 / 820, 2)
    assert e["pageable_pct_of_host_copies"] == 20.0
    assert e["small_pct_of_copies"] == 80.0
    assert len(e["symptoms"]) == 3
    (htod,) = e["by_direction"]
    assert htod == {
        "direction": "HtoD",
        "count_per_step": 5.0,
        "ms_per_step": 0.42,
        "mb_per_step": round((8 * 2**20 + 4 * 4096) / 1e6, 3),
        "gbps": round((8 * 2**20 + 4 * 4096) / 420_000, 2),
        "pageable": 3,
        "small": 12,
    }
    # the 8 MiB copy runs at 21 GB/s, above the V100's PCIe 3 link: not a slow-link symptom
    (link,) = e["link_efficiency"]
    assert (link["copies"], link["gbps"], link["link_gbps"]) == (
        3,
        round(8 * 2**20 / 400_000, 2),
        15.75,
    )
    assert e["longest_copies"][0]["bytes"] == 8 * 2**20
    assert (f.severity_ms, f.severity_pct) == (0.42, 42.0)


def test_memcpy_heavy_slow_link_from_a_device_override() -> None:
    b = EventsBuilder()
    for s in range(2):
        t0 = s * 10 * STEP
        b.step_mark(t0, 10 * STEP, s + 1)
        b.launch(t0, US, t0 + 10 * US, 8990 * US, "gemm")
        b.launch(
            t0 + 2 * US,
            US,
            t0 + 9000 * US,
            1000 * US,
            "Memcpy HtoD (Pinned -> Device)",
            kind=schema.MEMCPY,
            bytes=8 * 2**20,
        )
    analysis = analyse(b, meta=V100_META)
    assert outcome(analysis, "memcpy_heavy") is None  # 8.4 GB/s is half of PCIe 3
    fast_link = AdvisorConfig(device=DeviceOverride(host_link_gbps=100.0))
    f = outcome(analysis, "memcpy_heavy", config=fast_link)
    assert f is not None and not isinstance(f, Skipped)
    (link,) = f.evidence["link_efficiency"]
    assert link["link_pct"] == round(100 * (8 * 2**20 / 1_000_000) / 100.0, 2)
    assert f.evidence["symptoms"] == ["host-device copies reach a small part of the link bandwidth"]


def test_memcpy_heavy_silent_for_a_few_large_pinned_copies() -> None:
    b = EventsBuilder()
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        b.launch(t0, US, t0 + 10 * US, 900 * US, "gemm")
        b.launch(
            t0 + 2 * US,
            US,
            t0 + 910 * US,
            50 * US,
            "Memcpy HtoD (Pinned -> Device)",
            kind=schema.MEMCPY,
            bytes=2**20,
        )
    assert outcome(analyse(b, meta=V100_META), "memcpy_heavy") is None


# --- dataloader_bound --------------------------------------------------------------------------


def loader_steps(loader_us: int, launch_at_us: int) -> EventsBuilder:
    b = EventsBuilder()
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        b.dataloader(t0, loader_us * US)
        b.launch(
            t0 + launch_at_us * US,
            US,
            t0 + (launch_at_us + 10) * US,
            (980 - launch_at_us) * US,
            "gemm",
        )
    return b


def test_dataloader_bound_fires() -> None:
    f = finding(analyse(loader_steps(300, 300)), "dataloader_bound")
    e = f.evidence
    # the host loads [0, 300); the device idles [0, 310): 300 µs for the batch, then 10 for
    # the host to launch the kernel once it has it (the accounting's cause of the whole gap is
    # dataloader, the wait for data is the loading's part)
    assert e["host_loading_ms_per_step"] == 0.3
    assert e["host_loading_pct_of_step"] == 30.0
    assert e["device_idle_for_data_ms_per_step"] == 0.3
    assert e["device_idle_for_data_pct_of_step"] == 30.0
    assert e["longest_loads"][0]["dur_us"] == 300.0
    assert (f.severity_ms, f.severity_pct) == (0.3, 30.0)


def test_dataloader_bound_silent_and_skipped() -> None:
    assert outcome(analyse(loader_steps(30, 0)), "dataloader_bound") is None
    b = EventsBuilder().step_mark(0, STEP, 1).launch(0, US, 10 * US, 900 * US, "gemm")
    assert isinstance(outcome(analyse(b), "dataloader_bound"), Skipped)


def test_dataloader_bound_on_a_host_only_profile() -> None:
    b = EventsBuilder()
    for s in range(2):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        b.dataloader(t0, 200 * US)
        b.cpu_op(t0 + 200 * US, 700 * US, "aten::mm")
    f = finding(analyse(b), "dataloader_bound")
    assert f.evidence["host_loading_pct_of_step"] == 20.0
    assert f.evidence["device_idle_for_data_ms_per_step"] is None
    assert (f.severity_ms, f.severity_pct) == (0.2, 20.0)


# --- low_utilization_windows -------------------------------------------------------------------


def utilization_steps(dip: bool) -> EventsBuilder:
    """Seven 1 ms steps with the device busy throughout, but for step 4 (index 3) when
    ``dip``: only its first 100 µs."""
    b = EventsBuilder()
    for s in range(7):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        b.launch(t0, US, t0, (100 if dip and s == 3 else 1000) * US, "gemm")
    return b


def test_low_utilization_windows_fires_on_the_dip() -> None:
    f = finding(analyse(utilization_steps(dip=True)), "low_utilization_windows")
    e = f.evidence
    # The span (tasks issued before the last step) is [0, 6 ms): thirty 200 µs slices; the
    # slice [3000, 3200) is 50% busy (not under 50%), the next four are idle.
    (device,) = e["devices"]
    assert (device["window_ms"], device["median_busy_pct"], device["dips"]) == (0.2, 100.0, 4)
    assert [d["window"] for d in e["dips"]] == [16, 17, 18, 19]
    assert e["dips"][0]["busy_pct"] == 0.0
    assert (e["dips"][0]["start_ns"], e["dips"][0]["end_ns"]) == (3200 * US, 3400 * US)
    assert e["dips"][0]["step"] == 4
    assert e["periodicity"] == {"median_spacing_ms": 0.2, "regular": True}
    # 4 slices x 200 µs below the median (100%) over 7 steps of 1 ms
    assert (f.severity_ms, f.severity_pct) == (round(0.8 / 7, 3), round(100 * 800 / 7000, 2))


def test_low_utilization_windows_silent_when_busy() -> None:
    assert outcome(analyse(utilization_steps(dip=False)), "low_utilization_windows") is None


# --- host_cpu_saturated ------------------------------------------------------------------------


def cpu_counters(process: list[float]) -> list[tuple[str, str, int, float]]:
    rows = []
    for i, value in enumerate(process):
        ts = (100 + 250 * i) * US
        rows.append(("process_tree", "cpu_percent", ts, value))
        rows.append(("cpu_cores", "cpu0", ts, 100.0))
        rows.append(("cpu_cores", "cpu1", ts, 50.0))
    return rows


def test_host_cpu_saturated_fires() -> None:
    counters = counters_table(cpu_counters([98.0] * 8 + [40.0] * 2))
    f = finding(analyse(host_bound_steps(), counters=counters), "host_cpu_saturated")
    e = f.evidence
    assert (e["samples"], e["median_cpu_pct"], e["saturated_samples_pct"]) == (10, 98.0, 80.0)
    assert e["machine_cores"] == {
        "cores": 2,
        "mean_busy_pct": 75.0,
        "all_cores_busy_samples_pct": 0.0,
    }
    # a Python frame covers every step on the launching thread
    assert e["dispatch_thread_busy_pct_of_step"] == 100.0
    assert e["device_idle_host_dispatch_ms_per_step"] == 0.47
    assert (f.severity_ms, f.severity_pct) == (0.47, 47.0)


def test_host_cpu_saturated_silent_and_skipped() -> None:
    idle_cpu = counters_table(cpu_counters([40.0] * 10))
    assert outcome(analyse(host_bound_steps(), counters=idle_cpu), "host_cpu_saturated") is None
    skipped = outcome(analyse(host_bound_steps()), "host_cpu_saturated")
    assert isinstance(skipped, Skipped) and "counters" in skipped.reason


def test_host_cpu_saturated_is_silent_on_a_host_only_run() -> None:
    b = EventsBuilder()
    for s in range(2):
        b.step_mark(s * STEP, STEP, s + 1)
        b.cpu_op(s * STEP, 900 * US, "aten::mm")
    saturated = counters_table(cpu_counters([98.0] * 10))
    skipped = outcome(analyse(b, counters=saturated), "host_cpu_saturated")
    assert isinstance(skipped, Skipped) and "host-only" in skipped.reason


# --- profiler_overhead_high --------------------------------------------------------------------


def test_profiler_overhead_high() -> None:
    analysis = analyse(utilization_steps(dip=False))
    f = finding(analysis, "profiler_overhead_high", overhead_pct=25.0)
    # a 1 ms profiled step is 0.8 ms unprofiled: 0.2 ms (20%) of it is the profiler
    assert f.evidence["unprofiled_step_ms"] == 0.8
    assert (f.severity_ms, f.severity_pct) == (0.2, 20.0)
    assert outcome(analysis, "profiler_overhead_high", overhead_pct=5.0) is None
    assert isinstance(outcome(analysis, "profiler_overhead_high"), Skipped)


def test_profiler_overhead_within_its_noise_or_negative_is_no_finding() -> None:
    analysis = analyse(utilization_steps(dip=False))
    rule = "profiler_overhead_high"
    # 25 % ± 20 %: the profiler certainly added only 5 %, under the 10 % threshold
    assert outcome(analysis, rule, overhead_pct=25.0, overhead_noise_pct=20.0) is None
    assert outcome(analysis, rule, overhead_pct=-12.79, overhead_noise_pct=15.0) is None
    assert outcome(analysis, rule, overhead_pct=-40.0, overhead_noise_pct=1.0) is None
    # 40 % ± 5 %: certainly 35 %; a 1 ms profiled step is 1 / 1.4 ms unprofiled, and only the
    # certain part counts as inflation: 1 ms x 35 / 140 = 0.25 ms per step
    f = finding(analysis, rule, overhead_pct=40.0, overhead_noise_pct=5.0)
    assert f.evidence["step_time_ms"] == 1.0
    assert f.evidence["unprofiled_step_ms"] == round(1.0 / 1.4, 3)
    assert f.evidence["profiler_overhead_noise_pct"] == 5.0
    assert (f.severity_ms, f.severity_pct) == (0.25, 25.0)
    assert "--level light" in f.suggestion


def test_the_evidence_names_the_profiles_step_time_the_median_step() -> None:
    # three host-only steps of 1, 2 and 6 ms: the step time (summary.json's median) is 2 ms;
    # the severities stay means over the windows (9 ms in all)
    b = EventsBuilder()
    start = 0
    for n, length in enumerate((1000 * US, 2000 * US, 6000 * US)):
        b.step_mark(start, length, n + 1)
        b.cpu_op(start, length // 2, "aten::mm")
        start += length
    f = finding(analyse(b), "profiler_overhead_high", overhead_pct=50.0)
    assert f.evidence["steps"] == "3 steps, median 2.000 ms"
    assert f.evidence["step_time_ms"] == 2.0
    # a 3 ms mean step of which 50 / 150 is the profiler's: 1 ms per step
    assert (f.severity_ms, f.severity_pct) == (1.0, round(100 * 50 / 150, 2))
