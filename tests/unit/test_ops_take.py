"""Taking rows from a column of many chunks, chunk by chunk, as text or as codes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis.columns import codes_taken
from perfledger.analysis.ops import take_rows


def test_take_rows_across_chunks_in_any_order_with_missing_rows() -> None:
    column = pa.chunked_array([["a", "b"], [], ["c", None, "e"], ["f"]], pa.string())
    rows = np.array([5, 0, -1, 3, 2, 2, 4], dtype=np.int64)
    assert take_rows(column, rows).to_pylist() == ["f", "a", None, None, "c", "c", "e"]


def test_take_rows_decodes_dictionary_chunks_with_different_dictionaries() -> None:
    first = pa.array(["x", "y", "x"]).dictionary_encode()
    second = pa.array(["z", "x"]).dictionary_encode()
    column = pa.chunked_array([first, second])
    taken = take_rows(column, np.array([3, 1, 4, 0], dtype=np.int64))
    assert taken.type == pa.string()
    assert taken.to_pylist() == ["z", "y", "x", "x"]


def test_take_rows_of_nothing() -> None:
    column = pa.chunked_array([[1, 2]], pa.int64())
    assert take_rows(column, np.zeros(0, dtype=np.int64)).to_pylist() == []
    assert take_rows(column, np.array([-1, -1], dtype=np.int64)).to_pylist() == [None, None]


def test_take_rows_decodes_one_dictionary_chunk_with_null_values_and_missing_rows() -> None:
    values = ["k1", None, "k2", "k1", "k3"]
    column = pa.chunked_array([pa.array(values).dictionary_encode()])
    rows = np.array([4, -1, 1, 0, 0, 2, 3], dtype=np.int64)
    taken = take_rows(column, rows)
    assert taken.type == pa.string()
    assert taken.to_pylist() == [values[r] if r >= 0 else None for r in rows]


@pytest.mark.parametrize(
    "column",
    [
        pa.chunked_array([["k1", None, "k2"], ["k3", "k1"]], pa.string()),
        pa.chunked_array(
            [
                pa.array(["k1", None, "k2"]).dictionary_encode(),
                pa.array(["k3", "k1"]).dictionary_encode(),
            ]
        ),
        pa.chunked_array([pa.array(["k1", None, "k2", "k3", "k1"]).dictionary_encode()]),
    ],
)
def test_codes_taken_are_the_values_at_the_rows_with_only_those_values_kept(
    column: pa.ChunkedArray,
) -> None:
    values = column.to_pylist()
    rows = np.array([4, -1, 1, 3, 0, 3], dtype=np.int64)
    taken = codes_taken(column, rows)
    assert taken.to_pylist() == [values[r] if r >= 0 else None for r in rows]
    # k2 (row 2) is not taken: not a value of the result's dictionary
    assert taken.dictionary.to_pylist() == ["k1", "k3"]
    assert codes_taken(column, np.zeros(0, dtype=np.int64)).to_pylist() == []
