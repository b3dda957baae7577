"""columns.take: rows of a chunked column picked chunk by chunk."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.analysis import columns
from perfledger.sources import kineto_scan


@given(
    st.lists(st.lists(st.one_of(st.none(), st.text(max_size=4)), max_size=6), max_size=5),
    st.data(),
)
def test_take_picks_the_rows_of_every_chunk(
    chunks: list[list[str | None]], data: st.DataObject
) -> None:
    column = pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
    values = [v for c in chunks for v in c]
    rows = sorted(data.draw(st.sets(st.integers(0, max(len(values) - 1, 0)))) if values else [])
    taken = columns.take(column, np.array(rows, dtype=np.int64))
    assert taken.type == pa.string()
    assert taken.to_pylist() == [values[r] for r in rows]


def test_take_rows_keeps_dictionary_columns_and_reads_only_the_named_columns() -> None:
    names = pa.array(["a", "b", "a", "c", "b"]).dictionary_encode()
    table = pa.table(
        {
            "name": pa.chunked_array([names.slice(0, 2), names.slice(2)]),
            "start_ns": pa.chunked_array([[10, 20], [30], [40, 50]], pa.int64()),
            "args": pa.chunked_array([["x", "y", "z", "w", "v"]]),
        }
    )
    taken = columns.take_rows(table, np.array([1, 2, 4]), ["name", "start_ns"])
    assert taken.column_names == ["name", "start_ns"]
    assert taken.schema.field("name").type == table.schema.field("name").type
    assert taken.column("name").to_pylist() == ["b", "a", "b"]
    assert taken.column("start_ns").to_pylist() == [20, 30, 50]
    assert columns.take_rows(table, np.zeros(0, np.int64), ["args"]).num_rows == 0


@given(
    st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=12),
    st.integers(0, 3),
    st.data(),
)
def test_strings_at_gives_what_take_gives(
    values: list[str | None], start: int, data: st.DataObject
) -> None:
    array = pa.array(values, pa.string()).slice(min(start, len(values)))
    picked = data.draw(st.lists(st.integers(-1, len(array) - 1), max_size=40)) if len(array) else []
    rows = np.array(picked or [-1], dtype=np.int64)[: len(picked)]
    expected = array.take(pa.array(rows, pa.int64(), mask=rows < 0))
    # the compiled gather where it is built, and the text filled batch by batch without it
    # (batches of one row and of many)
    ways = [(True, 0)] if kineto_scan.AVAILABLE else []
    for compiled, batch in (*ways, (False, 1), (False, 1 << 14)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(kineto_scan, "AVAILABLE", compiled)
            patch.setattr(columns, "_STRINGS_BATCH", batch)
            taken = columns.strings_at(array, rows)
        taken.validate(full=True)
        assert taken.type == pa.string()
        assert taken.to_pylist() == expected.to_pylist()
        assert taken.null_count == expected.null_count


@pytest.mark.parametrize("compiled", [True, False])
def test_strings_at_of_long_names_keeps_their_order(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compiled and not kineto_scan.AVAILABLE:
        pytest.skip("the compiled scanner is not built here")
    monkeypatch.setattr(kineto_scan, "AVAILABLE", compiled)
    names = pa.array([f"kernel_{i}_" + "x" * (100 + i) for i in range(50)])
    rows = np.arange(1000, dtype=np.int64) * 7 % 50
    taken = columns.strings_at(names.slice(3), rows % 47)
    assert taken.equals(names.slice(3).take(pa.array(rows % 47)))
    assert taken.null_count == 0


@given(
    st.lists(st.lists(st.one_of(st.none(), st.text(max_size=4)), max_size=6), max_size=5),
    st.data(),
)
def test_take_paged_gives_what_take_gives(
    chunks: list[list[str | None]], data: st.DataObject
) -> None:
    column = pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
    values = [v for c in chunks for v in c]
    rows = sorted(data.draw(st.sets(st.integers(0, max(len(values) - 1, 0)))) if values else [])
    wanted = np.array(rows, dtype=np.int64)
    # batches of one and two rows: the rows of a batch may span chunks
    for batch in (1, 2):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(columns, "_PAGED_ROWS", batch)
            taken = columns.take_paged(column, wanted)
        assert taken.type == pa.string()
        assert taken.to_pylist() == columns.take(column, wanted).to_pylist()


def test_strings_at_of_no_text_gives_nulls() -> None:
    # a dictionary whose codes are all null has no text to take from
    taken = columns.strings_at(pa.array([], pa.string()), np.array([-1, -1], dtype=np.int64))
    assert taken.to_pylist() == [None, None]


@given(st.lists(st.integers(-5, 5) | st.integers(-(2**62), 2**62), max_size=80), st.booleans())
def test_first_seen_gives_each_value_once_in_the_order_they_come(
    values: list[int], compiled: bool
) -> None:
    # both ways: the compiled hash pass, and numpy where it is not built
    saved = columns._compiled
    try:
        if not compiled:
            columns._compiled = None
        got = columns.first_seen(np.array(values, dtype=np.int64))
    finally:
        columns._compiled = saved
    assert got.tolist() == list(dict.fromkeys(values))
