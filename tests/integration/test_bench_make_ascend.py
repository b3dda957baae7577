"""bench/make_ascend.py: a torch_npu export repeated K times reads back as K copies of its
source, one after the other in time, each with its own steps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfledger.sources.ascend import load_ascend
from tests.paths import bench_module

make_ascend = bench_module("make_ascend")


def _steps(events: pa.Table) -> list[int]:
    """The numbers of the trace's step marks (``ProfilerStep#N``)."""
    names = pc.unique(events.column("name").combine_chunks().cast(pa.string())).to_pylist()
    return sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"ProfilerStep#(\d+)", n)))


def _stacks(events: pa.Table) -> list[str]:
    """The call stacks the events' args hold (torch_npu's ``Call stack``)."""
    texts = [json.loads(a) for a in events.column("args").to_pylist() if a and "Call stack" in a]
    return [str(t["Call stack"]) for t in texts if t.get("Call stack")]


@pytest.mark.parametrize("kind", ["text", "db"])
def test_three_copies_read_back_as_three_runs_in_a_row(kind: str, tmp_path: Path) -> None:
    source = make_ascend.SOURCES[kind]
    size_mb = 3 * make_ascend._folder_bytes(source) / 1e6
    export = make_ascend.make_ascend_export(tmp_path, kind=kind, size_mb=size_mb)
    assert export.copies == 3
    (original,) = load_ascend(source)
    (repeated,) = load_ascend(export.path)
    assert repeated.loss is None
    # every event of the source, three times
    assert repeated.events.num_rows == 3 * original.events.num_rows
    # the steps: the source's, then renumbered after it
    first = _steps(original.events)
    count = max(first) - min(first) + 1
    assert _steps(repeated.events) == [s + k * count for k in range(3) for s in first]
    # copy k starts k shifts after the source, to the ns
    start = pc.min(original.events.column("start_ns")).as_py()
    shift_ns = export.shift_us * 1000
    assert shift_ns > pc.max(original.events.column("start_ns")).as_py() - start
    starts = set(repeated.events.column("start_ns").to_pylist())
    assert {start, start + shift_ns, start + 2 * shift_ns} <= starts
    assert pc.max(repeated.events.column("start_ns")).as_py() == (
        pc.max(original.events.column("start_ns")).as_py() + 2 * shift_ns
    )
    # each copy's host ops with the source's call stacks, not the first copy's three times
    stacks = _stacks(original.events)
    assert stacks
    assert sorted(_stacks(repeated.events)) == sorted(stacks * 3)
    # a second call reuses the export
    again = make_ascend.make_ascend_export(tmp_path, kind=kind, size_mb=size_mb)
    assert again == export
