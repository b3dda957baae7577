"""summary.json: fixed keys in a fixed order, figures taken from the results, stable bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pytest

from perfledger.analysis.gaps import gap_report
from perfledger.analysis.transfers import transfers
from perfledger.model.accounts import HostWindowAccount, WindowAccount
from perfledger.render.summary import summary_document, summary_json, write_summary
from perfledger.version import __version__
from tests.synth import EventsBuilder, gaps_table

MS = 1_000_000


def account(step: int, start_ms: int, wall_ms: int, device: int = 0) -> WindowAccount:
    """A window: compute 50%, communication 10%, memcpy 5%, memset 5%, idle 30% of the wall.

    idle: host_dispatch 10%, sync 10%, dataloader 5%, launch_latency 3%, other 2%.
    """
    w = wall_ms * MS
    return WindowAccount(
        rank=0,
        device=device,
        step=step,
        start_ns=start_ms * MS,
        end_ns=start_ms * MS + w,
        compute_ns=w * 50 // 100,
        communication_ns=w * 10 // 100,
        overlapped_communication_ns=w * 4 // 100,
        memcpy_ns=w * 5 // 100,
        memset_ns=w * 5 // 100,
        idle_ns=w * 30 // 100,
        idle_host_dispatch_ns=w * 10 // 100,
        idle_sync_ns=w * 10 // 100,
        idle_dataloader_ns=w * 5 // 100,
        idle_launch_latency_ns=w * 3 // 100,
        idle_other_ns=w * 2 // 100,
    )


def three_steps() -> list[WindowAccount]:
    # steps of 10, 12 and 20 ms on two devices; span rows cover 42 ms
    windows = []
    for device in (0, 1):
        windows += [
            account(1, 0, 10, device),
            account(2, 10, 12, device),
            account(3, 22, 20, device),
            account(-1, 0, 42, device),
        ]
    return windows


@dataclass(frozen=True)
class Finding:
    verify: str
    id: str
    title: str
    severity_ms: float
    severity_pct: float
    evidence: tuple[str, ...]
    suggestion: str


def test_keys_in_fixed_order_and_headline_figures() -> None:
    copies = EventsBuilder().memcpy(0, 100_000, bytes=1 << 20).memcpy(200_000, 50, "Memcpy DtoD")
    doc = summary_document(
        source_kind="kineto",
        source_files=[Path("/data/rank0.json.gz")],
        ranks=[0],
        step_count=3,
        step_time_ms=12.0004,
        device_utilization_pct=70.0049,
        windows=three_steps(),
        op_statistic=pa.table(
            {
                "name": ["aten::addmm", "aten::relu"],
                "kind": ["kernel", "kernel"],
                "count": [2, 1],
                "total_ns": [15_000, 5_000],
                "min_ns": [5_000, 5_000],
                "avg_ns": [7_500.0, 5_000.0],
                "max_ns": [10_000, 5_000],
                "ratio": [0.75, 0.25],
            }
        ),
        transfers=transfers(copies.table()),
        findings=[
            Finding("rerun", "excessive_sync", "Sync", 1.23456789, 12.5, ("a", "b"), "remove"),
            {"title": "Dispatch", "id": "host_dispatch_bound", "severity_ms": float("nan")},
        ],
        loss="rank0.json.gz: truncated after 1 000 events",
        profiler_overhead_pct=3.14159,
        profiler_overhead_noise_pct=1.23456,
        unprofiled_step_ms=11.6361234,
        top_operators=1,
    )
    assert list(doc) == [
        "format_version",
        "tool_version",
        "source",
        "ranks",
        "step_count",
        "step_time_ms",
        "device_utilization_pct",
        "device_compute_pct",
        "profiler_overhead_pct",
        "profiler_overhead_noise_pct",
        "unprofiled_step_ms",
        "unread_input",
        "loss",
        "quality",
        "findings",
        "advisor_skipped",
        "devices",
        "host",
        "top_operators",
        "transfers",
        "gap_histogram",
        "critical_path",
        "whatif_combined",
    ]
    assert doc["format_version"] == 2
    assert doc["tool_version"] == __version__
    assert doc["source"] == {"kind": "kineto", "files": ["/data/rank0.json.gz"]}
    assert doc["step_time_ms"] == 12.0  # the figure given, rounded to the µs
    assert doc["device_utilization_pct"] == 70.0
    assert doc["profiler_overhead_pct"] == 3.14
    assert doc["profiler_overhead_noise_pct"] == 1.23
    assert doc["unprofiled_step_ms"] == 11.636
    assert doc["unread_input"] == "rank0.json.gz: truncated after 1 000 events"
    assert doc["loss"] == doc["unread_input"]  # the format-1 name, kept one version
    assert doc["findings"] == [
        {
            "id": "excessive_sync",
            "title": "Sync",
            "severity_ms": 1.234568,
            "severity_pct": 12.5,
            "evidence": ["a", "b"],
            "suggestion": "remove",
            "verify": "rerun",
        },
        {"id": "host_dispatch_bound", "title": "Dispatch", "severity_ms": None},
    ]
    assert list(doc["findings"][0]) == [
        "id",
        "title",
        "severity_ms",
        "severity_pct",
        "evidence",
        "suggestion",
        "verify",
    ]
    assert [(d["rank"], d["device"]) for d in doc["devices"]] == [(0, 0), (0, 1)]
    assert doc["devices"][0] == {
        "rank": 0,
        "device": 0,
        "span_ms": 42.0,
        "busy_ms": 29.4,  # 70% of 42 ms
        "utilization_pct": 70.0,
        "compute_ms": 21.0,
        "communication_ms": 4.2,
        "communication_wait_ms": 0.0,
        "communication_transfer_ms": 4.2,
        "overlapped_communication_ms": 1.68,
        "memcpy_ms": 2.1,
        "memset_ms": 2.1,
        "idle_ms": 12.6,
        "idle_pct": 30.0,
        "idle_by_cause_ms": {
            "host_dispatch": 4.2,
            "sync": 4.2,
            "dataloader": 2.1,
            "launch_latency": 1.26,
            "other": 0.84,
        },
    }
    assert doc["host"] == []
    assert doc["top_operators"] == [
        {
            "name": "aten::addmm",
            "kind": "kernel",
            "count": 2,
            "total_ms": 0.015,
            "avg_us": 7.5,
            "max_us": 10.0,
            "ratio_pct": 75.0,
        }
    ]
    assert doc["transfers"] == [
        {
            "direction": "HtoD",
            "count": 1,
            "bytes": 1 << 20,
            "time_ms": 0.1,
            "gbps": 10.486,  # 1 048 576 B / 100 000 ns, rounded
            "pageable_count": 1,
            "small_count": 0,
            "unknown_bytes_count": 0,
        },
        {
            "direction": "DtoD",
            "count": 1,
            "bytes": 0,
            "time_ms": 0.0,
            "gbps": None,  # no size known: NaN in the table, null here
            "pageable_count": 0,
            "small_count": 0,
            "unknown_bytes_count": 1,
        },
    ]
    assert doc["gap_histogram"] is None
    json.loads(summary_json(doc))  # valid JSON: no NaN left


def test_no_step_annotation_means_no_step_time() -> None:
    doc = summary_document(
        source_kind="kineto",
        source_files=[],
        ranks=[1, 0],
        step_count=0,
        windows=[account(0, 0, 10), account(-1, 0, 10)],
    )
    assert doc["step_time_ms"] is None
    assert doc["ranks"] == [0, 1]
    assert (doc["findings"], doc["top_operators"], doc["transfers"]) == ([], [], [])


def test_host_only_headline() -> None:
    host = HostWindowAccount(
        rank=0,
        step=-1,
        start_ns=0,
        end_ns=8 * MS,
        dataloader_ns=1 * MS,
        forward_ns=3 * MS,
        backward_ns=3 * MS,
        optimizer_ns=1 * MS,
        operator_ns=5 * MS,
        overhead_ns=2 * MS,
    )
    step = replace(host, step=4)
    doc = summary_document(
        source_kind="kineto",
        source_files=[],
        ranks=[0],
        step_count=1,
        step_time_ms=8.0,
        host_windows=[host, step],
    )
    assert doc["step_time_ms"] == 8.0
    assert doc["device_utilization_pct"] is None
    assert doc["devices"] == []
    assert doc["host"] == [
        {
            "rank": 0,
            "span_ms": 8.0,
            "dataloader_ms": 1.0,
            "forward_ms": 3.0,
            "backward_ms": 3.0,
            "optimizer_ms": 1.0,
            "operator_ms": 5.0,
            "overhead_ms": 2.0,
            "overhead_pct": 25.0,
        }
    ]


def test_gap_histogram_section() -> None:
    gaps = gaps_table(
        [
            {"start_ns": 0, "end_ns": 5_000, "cause": "sync"},
            {"start_ns": 10_000, "end_ns": 2_010_000, "cause": "host_dispatch"},
        ]
    )
    doc = summary_document(
        source_kind="kineto",
        source_files=[],
        ranks=[0],
        step_count=0,
        gaps=gap_report(gaps, EventsBuilder().table()),
    )
    histogram = doc["gap_histogram"]
    assert (histogram["count"], histogram["total_ms"]) == (2, 2.005)
    small, _, _, one_to_ten, huge = histogram["buckets"]
    assert (small["label"], small["lower_ns"], small["upper_ns"]) == ("<10us", 0, 10_000)
    assert small["by_cause"]["sync"] == {"count": 1, "total_ms": 0.005}
    assert small["by_cause"]["host_dispatch"] == {"count": 0, "total_ms": 0.0}
    assert one_to_ten["by_cause"]["host_dispatch"] == {"count": 1, "total_ms": 2.0}
    assert huge["upper_ns"] is None


def test_write_summary_is_deterministic_and_atomic(tmp_path: Path) -> None:
    def build() -> dict[str, object]:
        return summary_document(
            source_kind="kineto",
            source_files=["a.json"],
            ranks=[0],
            step_count=3,
            windows=three_steps(),
            loss="naïve </script> name",
        )

    target = tmp_path / "summary.json"
    write_summary(build(), target)
    first = target.read_bytes()
    write_summary(build(), target)
    assert target.read_bytes() == first
    assert first.endswith(b"}\n")
    assert b"\r" not in first
    assert first.startswith(b'{\n  "format_version": 2,\n  "tool_version": ')
    assert json.loads(first)["loss"] == "naïve </script> name"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_nan_outside_known_fields_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_summary({"x": float("nan")}, tmp_path / "summary.json")
    assert list(tmp_path.iterdir()) == []
