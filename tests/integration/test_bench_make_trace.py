"""The benchmark's trace generator: copies shifted in time, links unique, Kineto's layout kept."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.paths import DATA, bench_module

TRACES = DATA


make_trace = bench_module("make_trace")

# A tiny trace laid out exactly as Kineto writes it: two steps, a launch linked to its kernel
# by correlation and a flow pair, float timestamps, metadata and the profiler's own markers.
SYNTHETIC = """{
  "schemaVersion": 1,
  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
  "traceEvents": [
  {
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 10, "tid": 11,
    "ts": 1000.5, "dur": 100,
    "args": {
      "External id": 1,"Ev Idx": 0
    }
  },
  {
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#8", "pid": 10, "tid": 11,
    "ts": 1100.5, "dur": 100,
    "args": {
      "External id": 2,"Ev Idx": 1
    }
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
    "ts": 1010, "dur": 5,
    "args": {
      "External id": 42, "cbid": 211, "correlation": 42, "Python parent id": -1
    }
  },
  {
    "ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
    "ts": 1020, "dur": 170,
    "args": {
      "External id": 42,
      "device": 0, "stream": 7, "correlation": 42,
      "grid": [1, 1, 1]
    }
  },
  {
    "ph": "s", "id": 42, "pid": 10, "tid": 11, "ts": 1010,
    "cat": "ac2g", "name": "ac2g"
  },
  {
    "ph": "f", "id": 42, "pid": 0, "tid": 7, "ts": 1020,
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  },
  {
    "name": "process_name", "ph": "M", "ts": 900, "pid": 10, "tid": 0,
    "args": {
      "name": "python3"
    }
  },
  {
    "ph": "X", "cat": "Trace", "ts": 900, "dur": 400,
    "pid": "Spans", "tid": "PyTorch Profiler",
    "name": "PyTorch Profiler (0)",
    "args": {
      "Op count": 0
    }
  },
  {
    "name": "Record Window End", "ph": "i", "s": "g",
    "pid": "", "tid": "", "ts": 1250
  }
  ],
  "traceName": "synthetic.json"
}"""


def _write_source(tmp_path: Path) -> Path:
    source = tmp_path / "synthetic.json"
    source.write_text(SYNTHETIC)
    return source


def test_synthetic_copies_by_hand(tmp_path: Path) -> None:
    scaled = make_trace.make_scaled_trace(
        tmp_path / "out", source=_write_source(tmp_path), copies=3
    )
    # Activity spans [1000.5, 1200.5): 200 µs -> whole ms above it plus one ms gap = 2000 µs.
    assert scaled.ts_shift_us == 2000
    assert scaled.id_offset == 100  # largest link id is 42
    assert scaled.step_offset == 2  # steps 7 and 8
    assert scaled.events == 3 * 6 + 3
    doc = json.loads(scaled.path.read_text())
    assert doc["distributedInfo"] == {"backend": "nccl", "rank": 3, "world_size": 8}
    assert doc["traceName"] == "synthetic.json"
    events = doc["traceEvents"]
    assert len(events) == 21
    steps = [(e["name"], e["ts"]) for e in events if e["name"].startswith("ProfilerStep")]
    assert steps == [
        ("ProfilerStep#7", 1000.5),
        ("ProfilerStep#8", 1100.5),
        ("ProfilerStep#9", 3000.5),
        ("ProfilerStep#10", 3100.5),
        ("ProfilerStep#11", 5000.5),
        ("ProfilerStep#12", 5100.5),
    ]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert [(k["ts"], k["args"]["correlation"], k["args"]["External id"]) for k in kernels] == [
        (1020, 42, 42),
        (3020, 142, 142),
        (5020, 242, 242),
    ]
    assert [e["id"] for e in events if e.get("ph") in ("s", "f")] == [42, 42, 142, 142, 242, 242]
    launches = [e for e in events if e.get("cat") == "cuda_runtime"]
    assert [e["args"]["Python parent id"] for e in launches] == [-1, -1, -1]  # -1 = no link
    # Metadata once; the profiler's span and end marker stretched over the three copies.
    tail = events[18:]
    assert tail[0] == {
        "name": "process_name",
        "ph": "M",
        "ts": 900,
        "pid": 10,
        "tid": 0,
        "args": {"name": "python3"},
    }
    assert tail[1]["dur"] == 400 + 2 * 2000
    assert tail[2]["ts"] == 1250 + 2 * 2000
    # Kineto's multi-line layout is kept (not one event per line).
    assert scaled.path.read_text().count("\n") > 10 * len(events) // 2


def test_cached_file_is_reused_and_gzip_reads_back(tmp_path: Path) -> None:
    source = _write_source(tmp_path)
    first = make_trace.make_scaled_trace(tmp_path / "out", source=source, copies=2, compress=True)
    assert first.path.name == "synthetic_x2.json.gz"
    mtime = first.path.stat().st_mtime_ns
    again = make_trace.make_scaled_trace(tmp_path / "out", source=source, copies=2, compress=True)
    assert again == first
    assert first.path.stat().st_mtime_ns == mtime
    with gzip.open(first.path, "rb") as fh:
        raw = fh.read()
    assert len(raw) == first.raw_bytes > first.file_bytes
    assert len(json.loads(raw)["traceEvents"]) == 2 * 6 + 3


def test_size_picks_nearest_copy_count() -> None:
    assert make_trace.copies_for_size(53_733_385, 500) == 9
    assert make_trace.copies_for_size(53_733_385, 100) == 2
    assert make_trace.copies_for_size(53_733_385, 1) == 1


def test_compact_json_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "compact.json"
    source.write_text(json.dumps(json.loads(SYNTHETIC)))
    with pytest.raises(make_trace.SourceTraceError, match="compact.json"):
        make_trace.make_scaled_trace(tmp_path / "out", source=source, copies=2)


def _expected_copy(event: dict[str, Any], k: int, scaled: Any) -> dict[str, Any]:
    moved = copy.deepcopy(event)
    moved["ts"] = event["ts"] + k * scaled.ts_shift_us
    if isinstance(event.get("id"), int):
        moved["id"] += k * scaled.id_offset
    for key in ("External id", "correlation", "Python id", "Python parent id"):
        value = event.get("args", {}).get(key)
        if isinstance(value, int) and value >= 0:
            moved["args"][key] += k * scaled.id_offset
    if event["name"].startswith("ProfilerStep#"):
        moved["name"] = f"ProfilerStep#{int(event['name'][13:]) + k * scaled.step_offset}"
    return moved


def test_real_rocm_trace_float_timestamps(tmp_path: Path) -> None:
    source = TRACES / "kineto" / "mi250_rocm_minitoy.json.gz"
    assert source.exists(), f"test trace missing: {source}"
    with gzip.open(source, "rb") as fh:
        original = json.loads(fh.read())
    scaled = make_trace.make_scaled_trace(tmp_path, source=source, copies=2)
    doc = json.loads(scaled.path.read_text())
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"
    }
    activity = [
        e
        for e in original["traceEvents"]
        if e.get("ph") != "M" and not isinstance(e.get("pid"), str)
    ]
    n = len(activity)
    events = doc["traceEvents"]
    assert events[:n] == activity
    for event, copied in zip(activity, events[n : 2 * n], strict=True):
        expected = _expected_copy(event, 1, scaled)
        assert copied.keys() == expected.keys()
        assert copied["ts"] == pytest.approx(expected["ts"], abs=1e-6)
        assert {k: v for k, v in copied.items() if k != "ts"} == {
            k: v for k, v in expected.items() if k != "ts"
        }
    # The second copy starts after the first one ends.
    first_end = max(e["ts"] + e.get("dur", 0) for e in events[:n])
    assert min(e["ts"] for e in events[n : 2 * n]) > first_end
