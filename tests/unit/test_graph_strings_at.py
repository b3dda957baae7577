"""strings_at: a string column's values at some rows, on chunked and dictionary columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from perfledger.analysis.graph_waits import strings_at


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
