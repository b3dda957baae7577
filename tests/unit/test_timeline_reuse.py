"""The whole timeline and the step slices can share one preparation; each writer prepares its own
inputs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from perfledger.model import schema
from perfledger.model.accounts import StepWindow
from perfledger.render import timeline
from perfledger.render.timeline import writer
from tests.synth import EventsBuilder

US = 1_000


def _events(kernel_name: str) -> pa.Table:
    b = EventsBuilder()
    b.step_mark(0, 50 * US, 1, step=1)
    b.cpu_op(1 * US, 20 * US, "aten::mm", external_id=1, step=1, shapes="[[2, 3]]", dtypes="")
    b.launch(2 * US, 5 * US, 10 * US, 20 * US, kernel_name, external_id=1, step=1)
    b.step_mark(50 * US, 50 * US, 2, step=2)
    b.cpu_op(51 * US, 20 * US, "aten::add", external_id=2, step=2, dtypes="float")
    b.launch(52 * US, 4 * US, 60 * US, 10 * US, kernel_name, external_id=2, step=2)
    return b.table()


WINDOWS = [
    StepWindow(0, 1, 0, 50 * US, 0, 50 * US),
    StepWindow(0, 2, 50 * US, 100 * US, 50 * US, 100 * US),
]


def _trace(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def _names(path: Path) -> set[str]:
    return {e["name"] for e in _trace(path)["traceEvents"] if e.get("ph") == "X"}


def _write_both(directory: Path, prepared: timeline.PreparedTimeline, runs: int = 1) -> list[bytes]:
    """The whole timeline and the step slices of one preparation, written ``runs`` times."""
    out: list[bytes] = []
    for run in range(runs):
        whole = directory / f"timeline_{run}.json.gz"
        timeline.write_prepared_timeline(whole, prepared)
        slices = timeline.write_prepared_step_timelines(
            directory / f"timeline_{run}", prepared, WINDOWS
        )
        out.extend(gzip.decompress(p.read_bytes()) for p in (whole, *slices))
    return out


def test_step_slices_of_the_whole_timelines_preparation_equal_fresh_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events("gemm")
    prepared = timeline.prepare_timeline(events)
    prepare = writer.prepare_timeline
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return prepare(*args, **kwargs)

    monkeypatch.setattr(writer, "prepare_timeline", counted)
    # written twice from the same preparation: writing leaves it as it was
    together = _write_both(tmp_path / "a", prepared, runs=2)
    assert not calls  # writing a preparation prepares nothing anew
    assert together[:3] == together[3:]
    monkeypatch.undo()
    # the whole timeline and the step slices alone, each preparing for itself
    whole = timeline.write_timeline(tmp_path / "b" / "timeline.json.gz", events)
    alone = timeline.write_step_timelines(tmp_path / "b" / "timeline", events, WINDOWS, None, None)
    assert together[:3] == [gzip.decompress(p.read_bytes()) for p in (whole.path, *alone)]


def test_a_different_table_or_findings_is_prepared_anew(tmp_path: Path) -> None:
    first, second = _events("gemm"), _events("other_kernel")
    timeline.write_timeline(tmp_path / "first.json.gz", first)
    timeline.write_step_timelines(tmp_path / "steps", second, WINDOWS, None, None)
    assert "other_kernel" in _names(tmp_path / "steps" / "step_1.json.gz")
    assert "gemm" not in _names(tmp_path / "steps" / "step_1.json.gz")

    finding = {"id": "x", "title": "t", "spans": [{"rank": 0, "start_ns": 0, "end_ns": 5 * US}]}
    timeline.write_timeline(tmp_path / "plain.json.gz", first)
    timeline.write_step_timelines(
        tmp_path / "found", first, WINDOWS, None, None, findings=[finding]
    )
    assert "x" in _names(tmp_path / "found" / "step_1.json.gz")


def test_shapes_and_dtypes_of_a_many_chunk_table(tmp_path: Path) -> None:
    events = _events("gemm")
    # the same rows split into single-row chunks, as the importer's pieces are
    chunked = pa.Table.from_batches(events.to_batches(max_chunksize=1), schema=events.schema)
    assert chunked.column("shapes").num_chunks == events.num_rows
    timeline.write_timeline(tmp_path / "t.json.gz", chunked)
    ops = {
        e["name"]: e["args"]
        for e in _trace(tmp_path / "t.json.gz")["traceEvents"]
        if e.get("cat") == schema.CPU_OP
    }
    assert ops["aten::mm"].get("shapes") == "[[2, 3]]"
    assert "dtypes" not in ops["aten::mm"]  # empty text is left out
    assert ops["aten::add"].get("dtypes") == "float"
    assert "shapes" not in ops["aten::add"]  # null is left out


def test_step_slices_written_together_equal_slices_written_one_by_one(tmp_path: Path) -> None:
    b = EventsBuilder()
    windows = []
    for step in range(1, 9):
        t0 = step * 100 * US
        b.step_mark(t0, 100 * US, step, step=step)
        b.cpu_op(t0 + US, 50 * US, "aten::mm", external_id=step, step=step)
        b.launch(
            t0 + 2 * US, 5 * US, t0 + 10 * US, 60 * US, f"k{step}", external_id=step, step=step
        )
        windows.append(StepWindow(0, step, t0, t0 + 100 * US, t0, t0 + 100 * US))
    events = b.table()
    together = timeline.write_step_timelines(tmp_path / "together", events, windows, None, None)
    alone = timeline.write_step_timelines(
        tmp_path / "alone", events, windows, None, None, writers=1
    )
    assert [p.name for p in together] == [f"step_{s}.json.gz" for s in range(1, 9)]
    assert [p.read_bytes() for p in together] == [p.read_bytes() for p in alone]
    for step, path in enumerate(together, start=1):
        assert f"k{step}" in _names(path)


def test_a_failing_step_slice_is_raised(tmp_path: Path) -> None:
    events = _events("gemm")
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "step_2.json.gz").mkdir()  # a folder where a file must go
    with pytest.raises(OSError):
        timeline.write_step_timelines(tmp_path / "steps", events, WINDOWS, None, None)
