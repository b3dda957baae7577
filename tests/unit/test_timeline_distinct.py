"""Timelines of a trace with many distinct names: small files cut from it hold their records'
text exactly, however many names, shapes and positions of them the trace has."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfledger.model import schema
from perfledger.render import timeline
from perfledger.render.timeline.text import PieceBuilder, joined_bytes
from perfledger.sources import kineto_scan
from tests.synth import EventsBuilder

OPS = 50_000
PERIOD = 2_000  # ns from one op's start to the next's
DUR = 1_000 + 7  # ns: a fraction of a µs to write


def _name(i: int) -> str:
    # every seventh name needs escaping in JSON
    odd = ' "quoted" é\\' if i % 7 == 0 else ""
    return f"aten::op_{i:06d}{odd}_" + "x" * 40


def _shapes(i: int) -> str | None:
    return None if i % 3 == 0 else f"[[{i}, {i % 97}]]"


@pytest.fixture(scope="module")
def prepared() -> timeline.PreparedTimeline:
    b = EventsBuilder()
    for i in range(OPS):
        b.cpu_op(i * PERIOD, DUR, _name(i), external_id=i + 1, step=i // 1000, shapes=_shapes(i))
    return timeline.prepare_timeline(b.table())


def _ops(path: Path) -> list[dict[str, Any]]:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def _expected_args(i: int) -> dict[str, Any]:
    args: dict[str, Any] = {"step": i // 1000, "external_id": i + 1}
    if _shapes(i) is not None:
        args["shapes"] = _shapes(i)
    return args


@pytest.mark.parametrize(("first", "count"), [(0, 1), (49_999, 1), (12_345, 7), (30_000, 1500)])
def test_small_windows_of_many_distinct_names_hold_their_records_exactly(
    tmp_path: Path, prepared: timeline.PreparedTimeline, first: int, count: int
) -> None:
    # op j lies in [j * PERIOD, j * PERIOD + DUR): this window overlaps ops first..first+count-1
    window = (first * PERIOD, (first + count - 1) * PERIOD + 1)
    path = tmp_path / "w.json.gz"
    timeline.write_prepared_timeline(path, prepared, window=window)
    ops = _ops(path)
    assert [e["name"] for e in ops] == [_name(i) for i in range(first, first + count)]
    for i, e in zip(range(first, first + count), ops, strict=True):
        # times are µs from the profile's start (op 0 at 0), Perfetto-exact in ns
        assert round(e["ts"] * 1000) == i * PERIOD
        assert round(e["dur"] * 1000) == DUR
        assert e["cat"] == schema.CPU_OP
        assert e["args"] == _expected_args(i)


def test_every_window_of_many_distinct_names_equals_its_part_of_the_whole_file(
    tmp_path: Path, prepared: timeline.PreparedTimeline
) -> None:
    timeline.write_prepared_timeline(tmp_path / "whole.json.gz", prepared)
    whole = _ops(tmp_path / "whole.json.gz")
    assert [e["name"] for e in whole] == [_name(i) for i in range(OPS)]
    for first in range(0, OPS, 9_973):
        path = tmp_path / f"w{first}.json.gz"
        timeline.write_prepared_timeline(
            path, prepared, window=(first * PERIOD, (first + 5) * PERIOD)
        )
        assert _ops(path) == whole[first : first + 5]


@pytest.mark.parametrize("compiled", [True, False])
def test_records_from_a_large_table_with_rows_left_out_take_only_their_texts(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compiled and not kineto_scan.AVAILABLE:
        pytest.skip("no C compiler where the project was installed")
    monkeypatch.setattr(kineto_scan, "AVAILABLE", compiled)
    rng = np.random.default_rng(7)
    texts = [f"<{i}>" for i in range(20_000)]
    rows = 300
    codes = rng.integers(0, len(texts), rows)
    shown = rng.random(rows) < 0.6
    line = PieceBuilder(rows)
    line.text("[")
    line.table(pa.array(texts, pa.string()), codes, shown)
    line.ints(np.arange(rows), before=":")
    line.table(pa.array(texts, pa.string()), codes[::-1])
    line.text("]")
    # a second kind of record, interleaved with the first
    other = PieceBuilder(2)
    other.values(pa.array(["(a)", "(b)"], pa.string()))
    at = np.arange(rows + 2)
    mine, theirs = np.delete(at, [5, 100]), np.array([5, 100])
    parts = [(line.build(), mine), (other.build(), theirs)]
    expected = [
        "[" + (texts[c] if s else "") + f":{r}" + texts[back] + "]"
        for r, (c, s, back) in enumerate(zip(codes, shown, codes[::-1], strict=True))
    ]
    expected.insert(5, "(a)")
    expected.insert(100, "(b)")
    # the bytes the writer compresses: the compiled join's, or Arrow's take's where not built
    assert bytes(joined_bytes(parts, rows + 2)) == "".join(expected).encode()
