"""Synthetic profiles for the advisor's rule tests: a few steps of hand-placed host calls and
device tasks, analysed by the real pipeline, with every expected figure derived by hand in the
test that builds them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from perfledger.analysis.advisor import AdvisorConfig, Finding, Skipped, diagnose, rule_by_id
from perfledger.analysis.profile import analyze_traces
from perfledger.model import schema
from perfledger.model.profile import ProfileAnalysis
from perfledger.model.trace import Trace
from tests.synth import EventsBuilder

US = 1_000
MS = 1_000_000

V100_META: dict[str, Any] = {
    "device_properties": [
        {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16 * 2**30, "numSms": 80}
    ]
}


def analyse(
    builder: EventsBuilder,
    *,
    meta: Mapping[str, Any] | None = None,
    counters: pa.Table | None = None,
) -> ProfileAnalysis:
    """Run the pipeline's analyses over one synthetic rank."""
    trace = Trace(
        events=builder.table(),
        counters=counters if counters is not None else schema.empty_counters(),
        meta=dict(meta or {}),
        source_kind="synthetic",
    )
    return analyze_traces([trace])


def outcome(
    analysis: ProfileAnalysis,
    rule_id: str,
    *,
    thresholds: Mapping[str, float] | None = None,
    overhead_pct: float | None = None,
    overhead_noise_pct: float | None = None,
    config: AdvisorConfig | None = None,
) -> Finding | Skipped | None:
    """What one rule says about a profile: its finding, its skip, or None."""
    rule = rule_by_id(rule_id)
    assert rule is not None, rule_id
    config = config or AdvisorConfig(
        thresholds={f"{rule_id}.{k}": v for k, v in (thresholds or {}).items()}
    )
    report = diagnose(
        analysis,
        config,
        overhead_pct=overhead_pct,
        overhead_noise_pct=overhead_noise_pct,
        rules=(rule,),
    )
    if report.findings:
        return report.findings[0]
    if report.skipped:
        return report.skipped[0]
    return None


def finding(analysis: ProfileAnalysis, rule_id: str, **kwargs: Any) -> Finding:
    """The rule's finding; fails the test when the rule stays silent or skips."""
    result = outcome(analysis, rule_id, **kwargs)
    assert isinstance(result, Finding), f"{rule_id} did not fire: {result}"
    return result


def counters_table(rows: Iterable[tuple[str, str, int, float]], rank: int = 0) -> pa.Table:
    """Host counters (track, name, ts_ns, value) in COUNTERS_SCHEMA."""
    listed = [
        {"rank": rank, "track": t, "name": n, "ts_ns": ts, "value": v} for t, n, ts, v in rows
    ]
    return pa.Table.from_pylist(listed, schema=schema.COUNTERS_SCHEMA)


STEP = 1000 * US
LAUNCHES = (0, 250, 500, 750)  # µs into the step


def host_bound_steps(
    *, with_sync: bool = False, loader: bool = False, in_item: bool = False
) -> EventsBuilder:
    """Three 1 ms steps; each launches four 100 µs kernels 250 µs apart, 20 µs after the call.

    Between launches the host runs ``host_work`` (or sits in the data loader, or in a
    stream synchronisation that lasts until the kernel ends, called by ``.item()`` when
    ``in_item``).
    """
    b = EventsBuilder()
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        b.python(t0, STEP, "train.py(42): train_step")
        for at in LAUNCHES:
            b.launch(t0 + at * US, 10 * US, t0 + (at + 20) * US, 100 * US, "add_kernel")
            if with_sync:
                b.sync(t0 + (at + 10) * US, 115 * US, "cudaStreamSynchronize")
                if in_item:
                    b.cpu_op(t0 + (at + 9) * US, 117 * US, "aten::item")
                    b.cpu_op(t0 + (at + 9) * US + 500, 116 * US, "aten::_local_scalar_dense")
            elif loader:
                b.dataloader(t0 + (at + 15) * US, 235 * US)
            else:
                b.cpu_op(t0 + (at + 15) * US, 235 * US, "host_work")
    return b
