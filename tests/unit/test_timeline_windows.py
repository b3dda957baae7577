"""Step slices written together (the records near each window found through an index) hold
the same bytes as each window written alone (every record tested)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa

from perfledger.model import schema
from perfledger.model.accounts import StepWindow
from perfledger.render import timeline
from tests.synth import EventsBuilder, gaps_table

US = 1_000
STEP = 100 * US


def _profile() -> tuple[pa.Table, pa.Table, pa.Table, list[StepWindow]]:
    """Eight steps; records that reach into other steps: a host call over three steps, an
    idle gap over two, a zero-length event on a step boundary, and memory samples of two
    series only in some steps (so a window opens on values set steps before)."""
    b = EventsBuilder()
    windows = []
    for step in range(1, 9):
        t0 = step * STEP
        b.step_mark(t0, STEP, step, step=step)
        b.cpu_op(t0 + US, 50 * US, "aten::mm", external_id=step, step=step)
        b.launch(
            t0 + 2 * US, 5 * US, t0 + 10 * US, 60 * US, f"k{step}", external_id=step, step=step
        )
        windows.append(StepWindow(0, step, t0, t0 + STEP, t0, t0 + STEP))
    b.annotation(2 * STEP + 30 * US, 3 * STEP, "long_region", step=2)
    b.cpu_op(5 * STEP, 0, "aten::empty", step=5)
    events = b.table()
    gaps = gaps_table(
        [
            {
                "start_ns": 3 * STEP + 80 * US,
                "end_ns": 5 * STEP + 5 * US,
                "cause": "host",
                "step": 3,
            },
            {
                "start_ns": 7 * STEP + 70 * US,
                "end_ns": 7 * STEP + 90 * US,
                "cause": "sync",
                "step": 7,
            },
        ]
    )
    samples = [
        ("cuda:0", "allocated_bytes", 1 * STEP + 5 * US, 10.0),
        ("cuda:0", "allocated_bytes", 1 * STEP + 5 * US, 11.0),  # same time: the later wins
        ("cuda:0", "reserved_bytes", 2 * STEP + 7 * US, 20.0),
        ("cuda:0", "allocated_bytes", 4 * STEP + 50 * US, 12.0),
        ("cpu", "allocated_bytes", 6 * STEP, 5.0),
    ]
    counters = pa.Table.from_pylist(
        [{"rank": 0, "track": t, "name": n, "ts_ns": ts, "value": v} for t, n, ts, v in samples],
        schema=schema.COUNTERS_SCHEMA,
    )
    return events, gaps, counters, windows


def _text(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode()


def test_step_slices_through_the_window_index_equal_windows_written_alone(
    tmp_path: Path,
) -> None:
    events, gaps, counters, windows = _profile()
    findings = [
        {
            "rule": "host_dispatch_bound",
            "severity": "warning",
            "title": "spans two steps",
            "spans": [{"rank": 0, "start_ns": 3 * STEP + 50 * US, "end_ns": 4 * STEP + 50 * US}],
        }
    ]
    _, together = timeline.write_profile_timelines(
        None,
        tmp_path / "together",
        [timeline.TimelinePart(0, events, gaps)],
        windows,
        counters=counters,
        findings=findings,
        step_max_events=None,
    )
    assert [p.name for p in together] == [f"step_{s}.json.gz" for s in range(1, 9)]
    assert not (tmp_path / "together" / "timeline.json.gz").exists()
    origin = timeline.profile_origin_ns(events, counters)
    for window, path in zip(windows, together, strict=True):
        alone = tmp_path / "alone" / path.name
        alone.parent.mkdir(exist_ok=True)
        timeline.write_ranks_timeline(
            alone,
            [0],
            lambda _: timeline.TimelinePart(0, events, gaps),
            origin_ns=origin,
            window=(window.start_ns, window.end_ns),
            counters=counters,
            findings=findings,
        )
        assert path.read_bytes() == alone.read_bytes(), path.name
    # what reaches in from other steps is there: the region of steps 2-4 in step 4, the gap
    # of steps 3-5 in step 5, the memory values set in step 1 and 2 when step 3 opens
    step4 = _text(together[3])
    assert "long_region" in step4
    step3 = json.loads(_text(together[2]))
    opening = (3 * STEP - STEP) / US  # the window's start, from the origin (step 1)
    carried = [
        (e["name"], e["args"])
        for e in step3["traceEvents"]
        if e.get("ph") == "C" and e["ts"] == opening and e["name"] == "cuda:0"
    ]
    assert carried == [("cuda:0", {"allocated_bytes": 11}), ("cuda:0", {"reserved_bytes": 20})]
    assert "host" in _text(together[4])  # the gap's cause, on the idle track
