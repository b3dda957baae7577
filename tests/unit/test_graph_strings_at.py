"""strings_at: a string column's values at some rows, on chunked and dictionary columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.graph_waits import int64_at, strings_at


def test_values_at_rows_across_chunks_with_their_own_dictionaries() -> None:
    # GIVEN a column in two chunks, each dictionary-encoded with a different dictionary
    first = pa.array(["gemm", "relu", "gemm"]).dictionary_encode()
    second = pa.array(["copy", "gemm"]).dictionary_encode()
    table = pa.table({"name": pa.chunked_array([first, second])})
    # WHEN rows of both chunks are read, out of order and repeated
    rows = np.array([4, 0, 3, 1, 4], dtype=np.int64)
    # THEN each row has its own chunk's value, in the order asked
    assert strings_at(table, "name", rows).tolist() == ["gemm", "gemm", "copy", "relu", "gemm"]


def test_plain_strings_and_nulls() -> None:
    table = pa.table({"args": pa.chunked_array([pa.array(["a", None]), pa.array(["c"])])})
    assert strings_at(table, "args", np.array([2, 1], dtype=np.int64)).tolist() == ["c", None]


def test_no_rows() -> None:
    table = pa.table({"name": pa.array(["x"]).dictionary_encode()})
    got = strings_at(table, "name", np.zeros(0, dtype=np.int64))
    assert got.dtype == object and got.size == 0


def test_int64_at_is_the_whole_columns_values_at_the_rows() -> None:
    # GIVEN integer columns of several widths, cut in small chunks
    values = np.arange(40, dtype=np.int64) * 7 - 100
    chunks = [values[i : i + 3] for i in range(0, values.size, 3)]
    table = pa.table(
        {
            "wide": pa.chunked_array([pa.array(c, pa.int64()) for c in chunks]),
            "narrow": pa.chunked_array([pa.array(c, pa.int16()) for c in chunks]),
        }
    )
    # WHEN rows of many chunks are read, out of order and repeated
    rows = np.array([39, 0, 5, 5, 17, 2, 38, 21, 3], dtype=np.int64)
    for name in ("wide", "narrow"):
        got = int64_at(table, name, rows)
        # THEN they are the whole column's values at those rows, as int64
        assert got.dtype == np.int64
        assert np.array_equal(got, columns.int64(table, name)[rows])
    assert int64_at(table, "wide", np.zeros(0, dtype=np.int64)).size == 0
