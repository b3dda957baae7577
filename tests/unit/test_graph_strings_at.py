"""strings_at: a string column's values at some rows, on chunked and dictionary columns; the
graph's other column helpers (values and codes at rows, distinct pairs)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import columns
from perfledger.analysis.columns import codes_at, int64_at
from perfledger.analysis.graph_waits import coded_at, strings_at, unique_pairs


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
        ascending = np.sort(rows)  # read without a sort, slice by slice
        assert np.array_equal(
            int64_at(table, name, ascending), columns.int64(table, name)[ascending]
        )
    assert int64_at(table, "wide", np.zeros(0, dtype=np.int64)).size == 0


def test_values_at_rows_of_a_column_of_one_chunk() -> None:
    # GIVEN columns of one chunk each (a rank's events), of several integer widths, and a
    # dictionary column
    rng = np.random.default_rng(3)
    values = rng.integers(-(10**12), 10**12, 500)
    names = [f"op{v % 7}" for v in values.tolist()]
    table = pa.table(
        {
            "wide": pa.array(values, pa.int64()),
            "narrow": pa.array(values % 1000, pa.int16()),
            "name": pa.array(names).dictionary_encode(),
        }
    )
    # WHEN rows are read in any order, repeated, ascending, or none
    for rows in (rng.integers(0, 500, 800), np.sort(rng.integers(0, 500, 300)), np.arange(0)):
        rows = rows.astype(np.int64)
        # THEN the values are the whole column's at those rows
        for name in ("wide", "narrow"):
            assert np.array_equal(int64_at(table, name, rows), columns.int64(table, name)[rows])
        codes, distinct = codes_at(table, "name", rows)
        assert [distinct[c] for c in codes.tolist()] == [names[r] for r in rows.tolist()]


def test_codes_at_are_equal_where_the_values_are() -> None:
    # GIVEN a dictionary column in chunks with dictionaries of their own, a null code and a
    # repeated text among the values
    dictionary = pa.dictionary(pa.int32(), pa.string())
    first = pa.DictionaryArray.from_arrays(pa.array([1, 0, None], pa.int32()), ["gemm", "relu"])
    second = pa.DictionaryArray.from_arrays(pa.array([0, 2, 1], pa.int32()), ["relu", "x", "relu"])
    table = pa.table({"name": pa.chunked_array([first, second], type=dictionary)})
    rows = np.array([5, 0, 2, 3, 1, 4, 3], dtype=np.int64)
    # WHEN read at rows of both chunks, out of order and repeated
    codes, values = codes_at(table, "name", rows)
    # THEN each row's code names its value, and equal values have one code
    every = pc.cast(table["name"], pa.string()).to_pylist()
    texts = [every[r] for r in rows.tolist()]
    assert [values[c] for c in codes.tolist()] == texts
    assert len(set(values)) == len(values)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-(2**62), 2**62), st.sampled_from([-1, 0, 3, 7, 2**40])),
        max_size=60,
    )
)
def test_unique_pairs_are_those_of_numpy_over_the_stacked_rows(
    pairs: list[tuple[int, int]],
) -> None:
    # wide values and a few repeated ones (the streams of a thread's launches, the lanes)
    first = np.array([a for a, _ in pairs], dtype=np.int64)
    second = np.array([b for _, b in pairs], dtype=np.int64)
    distinct, inverse = unique_pairs(first, second)
    if not pairs:
        assert distinct.shape == (0, 2) and inverse.size == 0
        return
    expected, expected_inverse = np.unique(
        np.stack([first, second], axis=1), axis=0, return_inverse=True
    )
    assert np.array_equal(distinct, expected)
    assert np.array_equal(inverse, expected_inverse.reshape(-1))


# A string column in chunks (dictionary-encoded chunk by chunk, or plain) and rows of it.
NAMED_ROWS = st.tuples(
    st.lists(st.lists(st.sampled_from(["gemm", "relu", "copy", "x"]), max_size=6), max_size=5),
    st.lists(st.integers(0, 10_000), max_size=30),
    st.booleans(),
)


def named_rows(
    drawn: tuple[list[list[str]], list[int], bool],
) -> tuple[pa.Table, np.ndarray, list[str]]:
    """The table of the drawn column, the drawn rows of it and the names at those rows."""
    chunks, picks, dictionary = drawn
    texts = [name for chunk in chunks for name in chunk]
    column = pa.chunked_array(
        [pa.array(c, pa.string()).dictionary_encode() if dictionary else pa.array(c, pa.string())
         for c in chunks],
        type=pa.dictionary(pa.int32(), pa.string()) if dictionary else pa.string(),
    )  # fmt: skip
    rows = np.array([p % len(texts) for p in picks] if texts else [], dtype=np.int64)
    return pa.table({"name": column}), rows, [texts[r] for r in rows.tolist()]


@settings(max_examples=100, deadline=None)
@given(NAMED_ROWS)
def test_coded_values_at_rows_name_each_rows_value(
    drawn: tuple[list[list[str]], list[int], bool],
) -> None:
    # GIVEN a string column in chunks, dictionary-encoded chunk by chunk or plain
    table, rows, names = named_rows(drawn)
    # WHEN read as codes at some rows
    codes, values = coded_at(table, "name", rows)
    # THEN each code names its row's value, one code a value: two rows share a code exactly
    # where they share a value
    assert codes.dtype == np.int32 and codes.size == rows.size
    assert [values[c] for c in codes.tolist()] == names
    assert len(set(values)) == len(values)
