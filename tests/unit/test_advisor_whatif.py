"""The advisor on replay: each finding's ``whatif_ms`` on hand-built steps of known answers,
the ranking by it, and the top fixes combined.

Every step here is one step window ``[0, mark end]`` (the step mark) or up to its last task's
end; the replayed step is derived by hand in each test from the trace it builds: host calls and
host work in order on the thread, each task after its launch call's start plus its observed
latency and after the task before it on its stream. The step mark's end keeps its distance to
the last host call before it (host time after the last call is not moved by a change).
"""

from __future__ import annotations

from typing import Any

import pytest

from perfledger.analysis.advisor import Finding, advise, diagnose
from perfledger.model.findings import COMBINED_FIXES
from tests.advisor_synth import MS, US, V100_META, analyse, finding, outcome
from tests.synth import EventsBuilder


def sync_after_each_kernel() -> EventsBuilder:
    """One 1 ms step: 10 times a 5 µs launch, a 50 µs kernel 10 µs after it, a stream
    synchronisation from the launch's end until 2 µs after the kernel, 38 µs of host work."""
    b = EventsBuilder().step_mark(0, 1_000 * US, 1)
    for i in range(10):
        t = 10 * US + i * 100 * US
        b.launch(t, 5 * US, t + 10 * US, 50 * US, "relu_kernel")
        b.sync(t + 5 * US, 57 * US, "cudaStreamSynchronize")
    return b


def test_removing_the_syncs_gives_back_what_the_device_then_bounds() -> None:
    result = finding(analyse(sync_after_each_kernel()), "excessive_sync")
    # Without the waits the host loops in 5 + 2 (the call's return) + 38 = 45 µs and the
    # kernels (50 µs) queue: the last one ends at 20 + 10 x 50 = 520 µs, after the step
    # mark (the last wait ends at 10 + 9 x 45 + 7 = 422 µs, the mark 28 µs later): the step
    # goes from 1,000 to 520 µs.
    assert result.whatif_ms == pytest.approx(0.480, abs=1e-9)


def dispatch_bound() -> EventsBuilder:
    """One 1 ms step: 4 launches 250 µs apart (10 µs calls), 100 µs kernels 20 µs after each
    call, 235 µs of host operator between them."""
    b = EventsBuilder().step_mark(0, 1_000 * US, 1)
    for at in (0, 250, 500, 750):
        b.launch(at * US, 10 * US, (at + 20) * US, 100 * US, "add_kernel")
        b.cpu_op((at + 15) * US, 235 * US, "host_work")
    return b


def test_faster_dispatch_halves_the_launch_overhead() -> None:
    result = finding(analyse(dispatch_bound()), "host_dispatch_bound")
    # Launch overhead x 0.5: 5 µs calls, 120 µs of dispatch between them, 10 µs latency: the
    # last call ends at 3 x 125 + 5 = 380 µs, its kernel at 375 + 10 + 100 = 485 µs; the mark's
    # 240 µs after the last call put the step's end at 620 µs.
    assert result.whatif_ms == pytest.approx(0.380, abs=1e-9)


def test_the_launch_factor_is_a_threshold() -> None:
    result = finding(
        analyse(dispatch_bound()), "host_dispatch_bound", thresholds={"whatif_launch_factor": 1.0}
    )
    assert result.whatif_ms == 0.0  # nothing changes


def loader_bound() -> EventsBuilder:
    """dispatch_bound with the data loader instead of the host operator between launches."""
    b = EventsBuilder().step_mark(0, 1_000 * US, 1)
    for at in (0, 250, 500, 750):
        b.launch(at * US, 10 * US, (at + 20) * US, 100 * US, "add_kernel")
        b.dataloader((at + 15) * US, 235 * US)
    return b


def test_faster_data_loading_removes_the_waits_for_batches() -> None:
    result = finding(analyse(loader_bound()), "dataloader_bound")
    # Without the loader the calls follow each other (0, 10, 20, 30 µs) and the kernels run
    # back to back from 20 µs: 420 µs; the mark ends 240 µs after the last call (280 µs).
    assert result.whatif_ms == pytest.approx(0.580, abs=1e-9)


def tiny_kernels(count: int = 1_200) -> EventsBuilder:
    """One step of ``count`` 2 µs kernels, each launched 10 µs after the previous one (5 µs
    calls, 5 µs of host time between), 8 µs after its call began."""
    b = EventsBuilder().step_mark(0, count * 10 * US, 1)
    for i in range(count):
        b.launch(i * 10 * US, 5 * US, i * 10 * US + 8 * US, 2 * US, "vectorized_elementwise")
    return b


def test_cuda_graphs_make_a_step_of_tiny_kernels_device_bound() -> None:
    result = finding(analyse(tiny_kernels()), "small_op_explosion")
    # Launch overhead x 0.1: a launch every 1 µs, each kernel 0.8 µs after: the kernels run
    # back to back from 0.8 µs, the last ends at 0.8 + 1,200 x 2 = 2,400.8 µs (the host ends
    # at 1,199.5 + 5 µs). Measured: 12,000 µs.
    assert result.whatif_ms == pytest.approx(9.599, abs=1e-9)


def exposed_allreduce() -> EventsBuilder:
    """A 1 ms kernel, a 0.5 ms all-reduce and a 1 ms kernel queued on one stream."""
    b = EventsBuilder().step_mark(0, 100 * US, 1)
    b.launch(10 * US, 5 * US, 20 * US, 1_000 * US, "gemm")
    b.launch(20 * US, 5 * US, 1_020 * US, 500 * US, "ncclKernel_AllReduce", kind="comm")
    b.launch(30 * US, 5 * US, 1_520 * US, 1_000 * US, "gemm")
    return b


def test_overlapping_the_collective_gains_its_exposed_time() -> None:
    result = finding(analyse(exposed_allreduce()), "exposed_communication")
    # The second kernel starts right after the first (1,020 µs) beside the all-reduce.
    assert result.whatif_ms == pytest.approx(0.500, abs=1e-9)


def pageable_copy() -> EventsBuilder:
    """A blocking 400 µs pageable copy (the call returns 2 µs after it), 8 µs of host work, a
    5 µs launch and its 200 µs kernel 10 µs later; the step mark ends at 650 µs."""
    b = EventsBuilder().step_mark(0, 650 * US, 1)
    corr = b.new_correlation()
    b.sync(10 * US, 412 * US, "cudaMemcpy", correlation=corr)
    b.memcpy(20 * US, 400 * US, correlation=corr, bytes=64 * 2**20)
    b.launch(430 * US, 5 * US, 440 * US, 200 * US, "gemm")
    return b


def test_pinned_copies_run_faster_and_stop_blocking_the_host() -> None:
    result = finding(analyse(pageable_copy()), "memcpy_heavy")
    # Pinned: the copy takes 200 µs ([20, 220]) and the host goes on at once: the launch at
    # 20 µs (2 µs return, 8 µs work), its kernel queued behind the copy: [220, 420]; the mark
    # ends 215 µs after the launch (240 µs). 650 -> 420 µs.
    assert result.whatif_ms == pytest.approx(0.230, abs=1e-9)


def copy_kernels_without_pageable() -> EventsBuilder:
    b = EventsBuilder().step_mark(0, 650 * US, 1)
    b.launch(10 * US, 5 * US, 20 * US, 400 * US, "Memcpy DtoD", kind="memcpy")
    b.launch(30 * US, 5 * US, 440 * US, 200 * US, "gemm")
    return b


def test_pinned_copies_do_not_apply_without_pageable_copies() -> None:
    result = finding(analyse(copy_kernels_without_pageable()), "memcpy_heavy")
    assert result.whatif_ms is None


CHAIN = ("aten::contiguous", "aten::to", "aten::clone")


def memory_chains(side: int, kernel_us: int, repeats: int = 6) -> EventsBuilder:
    """``repeats`` chains contiguous -> to -> clone over side x side fp32 tensors (each kernel
    ``kernel_us`` long, back to back), a 100 µs gemm between two chains; every launch issued
    in the first microseconds, so the device runs everything back to back."""
    b = EventsBuilder().step_mark(0, 50 * US, 1)
    shapes, dtypes = f"[[{side}, {side}]]", '["float"]'
    t = 10 * US
    host = 0
    ext = 1
    for _ in range(repeats):
        for op in CHAIN:
            b.cpu_op(host, 400, op, external_id=ext, shapes=shapes, dtypes=dtypes)
            b.launch(host + 100, 200, t, kernel_us * US, f"{op}_kernel", external_id=ext)
            host += 500
            ext += 1
            t += kernel_us * US
        b.cpu_op(host, 400, "aten::mm", external_id=ext)
        b.launch(host + 100, 200, t, 100 * US, "gemm", external_id=ext)
        host += 500
        ext += 1
        t += 100 * US
    return b


def test_fusing_a_chain_of_large_memory_bound_kernels_saves_its_intermediate_traffic() -> None:
    result = finding(analyse(memory_chains(8192, 900), meta=V100_META), "fusion_candidates")
    # Two intermediates of 8192 x 8192 x 4 bytes, written and read back: 2 x 536,870,912 B
    # at the V100's 900 GB/s = 1,193.046 µs per chain, 6 chains in the step (device-bound).
    traffic_us = 2 * 2 * 8192 * 8192 * 4 / 900 / 1e3
    assert result.whatif_ms == pytest.approx(6 * traffic_us / 1e3, abs=2e-3)
    chains = result.evidence["chains"]
    assert chains[0]["intermediate_traffic_us_per_occurrence"] == pytest.approx(
        traffic_us, abs=1e-3
    )


def test_a_chain_of_long_kernels_gains_more_than_a_chain_of_5_us_kernels() -> None:
    long = finding(analyse(memory_chains(8192, 900), meta=V100_META), "fusion_candidates")
    short = finding(analyse(memory_chains(64, 5), meta=V100_META), "fusion_candidates")
    # Short kernels: one fused kernel about as long as the longest member: 10 µs per chain.
    assert short.whatif_ms == pytest.approx(6 * 10 / 1e3, abs=2e-3)
    assert long.whatif_ms is not None and short.whatif_ms is not None
    assert long.whatif_ms > 100 * short.whatif_ms


def test_long_kernels_join_chains_only_when_their_traffic_is_known() -> None:
    # without a known device the bytes cannot become time: 900 µs kernels are no candidates
    assert not isinstance(outcome(analyse(memory_chains(8192, 900)), "fusion_candidates"), Finding)


def test_findings_are_ranked_by_replayed_gain_and_the_top_fixes_combine() -> None:
    analysis = analyse(sync_after_each_kernel())
    report = diagnose(analysis)
    gains = [f.gain_ms for f in report.findings]
    assert gains == sorted(gains, reverse=True)
    combined = report.combined
    assert combined is not None
    replayed = [f for f in report.findings if f.whatif_ms]
    assert list(combined.findings) == [f.id for f in replayed][:COMBINED_FIXES]
    # together, not summed: no more than the best fix plus the others, no less than the best
    best = max(f.whatif_ms or 0.0 for f in replayed)
    assert best - 1e-3 <= combined.gains.gain_ms <= sum(f.whatif_ms or 0.0 for f in replayed)
    assert combined.gains.gain_ms <= combined.gains.baseline_ms
    assert combined.to_dict()["predicted_ms"] == pytest.approx(
        combined.gains.baseline_ms - combined.gains.gain_ms, abs=1e-3
    )


def test_every_gain_lies_between_zero_and_the_step() -> None:
    for builder in (sync_after_each_kernel(), dispatch_bound(), loader_bound(), pageable_copy()):
        analysis = analyse(builder)
        step_ms = analysis.steps.column("wall_ns").to_pylist()[0] / MS
        for f in advise(analysis):
            if f.whatif_ms is not None:
                assert 0.0 <= f.whatif_ms <= step_ms, f.id


def test_a_fix_on_one_rank_of_two_gains_half_as_much_per_step() -> None:
    from perfledger.analysis.profile import analyze_traces
    from perfledger.model import schema
    from perfledger.model.trace import Trace

    quiet = EventsBuilder(rank=1).step_mark(0, 1_000 * US, 1)
    for i in range(10):  # the same kernels, no synchronisation: the host is far ahead
        quiet.launch(10 * US + i * 5 * US, 5 * US, 20 * US + i * 50 * US, 50 * US, "relu_kernel")
    traces = [
        Trace(b.table(), schema.empty_counters(), {"rank": r}, "synthetic")
        for r, b in ((0, sync_after_each_kernel()), (1, quiet))
    ]
    report = diagnose(analyze_traces(traces))
    (sync,) = [f for f in report.findings if f.id == "excessive_sync"]
    # 480 µs on rank 0's one step, nothing on rank 1's: 240 µs per replayed step
    assert sync.evidence["ranks"] == [0]
    assert sync.whatif_ms == pytest.approx(0.240, abs=1e-9)
    assert report.combined is not None and "excessive_sync" in report.combined.findings
    assert report.combined.gains.steps == 2


def test_fixes_of_the_same_work_do_not_compound() -> None:
    from perfledger.model.whatif import HOST, LAUNCH, Scale, WhatIf, together

    dispatch = WhatIf(scales=(Scale(LAUNCH, 0.5),))
    small_ops = WhatIf(scales=(Scale(LAUNCH, 0.1),), no_sync=True)
    host = WhatIf(scales=(Scale(HOST, 0.8),))
    both = together([dispatch, small_ops, host])
    # launch overhead x0.1 (the stronger fix), not x0.05; other work keeps its own scale
    assert sorted(both.scales, key=lambda s: s.selector) == [Scale(HOST, 0.8), Scale(LAUNCH, 0.1)]
    assert both.no_sync


def test_the_rules_that_replay_are_those_marked_so() -> None:
    # the advisor checks the marked rules first and replays their top fixes together while
    # the others run: a rule that replays its fix says so
    import inspect

    from perfledger.analysis.advisor import RULES

    for rule in RULES:
        source = inspect.getsource(inspect.getmodule(rule.check))  # type: ignore[arg-type]
        assert rule.replays == ("whatif_ms(" in source), rule.id


def test_the_combination_replayed_ahead_is_replayed_once_and_reported() -> None:
    from perfledger.analysis.advisor import context as advisor_context
    from perfledger.analysis.advisor import whatif
    from perfledger.model.findings import AdvisorConfig
    from perfledger.model.whatif import together

    analysis = analyse(sync_after_each_kernel())
    replayed: list[object] = []
    original = advisor_context.predicted_gains

    def counted(prepared: Any, change: Any) -> Any:
        replayed.append(change)
        return original(prepared, change)

    combine = whatif.combined_here

    def combined_here(*args: Any) -> Any:
        replayed.append("combined_here")
        return combine(*args)

    advisor_context.predicted_gains = counted  # type: ignore[assignment]
    whatif.combined_here = combined_here  # type: ignore[assignment]
    try:
        report = diagnose(analysis)
    finally:
        advisor_context.predicted_gains = original  # type: ignore[assignment]
        whatif.combined_here = combine  # type: ignore[assignment]
    combined = report.combined
    assert combined is not None and len(combined.findings) > 1
    change = advisor_context.effective_change(
        together([report.fixes[i] for i in combined.findings])
    )
    # replayed once, ahead of the combination, which takes it from the context
    assert replayed.count(change) == 1
    assert replayed.index(change) < replayed.index("combined_here")
    # what a context of its own replays for those fixes, after every rule has run
    fresh = advisor_context.AdvisorContext(analysis, AdvisorConfig()).step_gains(change)
    assert combined.gains == fresh


def test_a_rule_that_replays_unmarked_still_joins_the_combination() -> None:
    from dataclasses import replace

    from perfledger.analysis.advisor import RULES

    analysis = analyse(sync_after_each_kernel())
    marked = diagnose(analysis)
    unmarked = [replace(r, replays=False) if r.id == "excessive_sync" else r for r in RULES]
    report = diagnose(analysis, rules=unmarked)
    assert marked.combined is not None and "excessive_sync" in marked.combined.findings
    assert report.combined == marked.combined
    assert report.findings == marked.findings
