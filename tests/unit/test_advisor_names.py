"""The device tasks' names as dictionary codes: the rules read the same texts and codes as
from a text per task (encode, coalesce_text, names_at against the decoded columns)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.advisor.common import coalesce_text, encode
from perfledger.analysis.advisor.context import names_at

CODED = pa.dictionary(pa.int32(), pa.string())


def coded(indices: list[int | None], dictionary: list[str | None]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(dictionary))


def names() -> pa.ChunkedArray:
    """Names in small chunks with dictionaries of their own: repeated texts, null codes and
    a null text among the values."""
    return pa.chunked_array(
        [
            coded([1, 0, None, 1], ["gemm", "relu"]),
            coded([2, 0, 1], ["relu", "copy", None]),
            coded([0, 0], ["gemm", "gemm"]),
        ],
        type=CODED,
    )


def test_encode_of_codes_is_encode_of_the_texts() -> None:
    column = names()
    texts = pc.cast(column, pa.string())
    got_codes, got_distinct = encode(column)
    want_codes, want_distinct = encode(texts)
    assert np.array_equal(got_codes, want_codes)
    assert got_distinct.tolist() == want_distinct.tolist()
    one_chunk = column.chunk(1)
    assert np.array_equal(encode(one_chunk)[0], encode(pc.cast(one_chunk, pa.string()))[0])
    empty = pa.chunked_array([], type=CODED)
    assert encode(empty)[1].tolist() == encode(pa.array([], pa.string()))[1].tolist()


def test_coalesce_text_is_the_coalesce_of_the_texts() -> None:
    column = names()
    first = pa.array([None, "op_a", None, None, "op_b", None, None, None, None])
    second = pa.chunked_array([pa.array([None, None, "x"]), pa.array([None] * 6, pa.string())])
    got = coalesce_text(first, second, column)
    want = pc.coalesce(first, second, pc.cast(column, pa.string()))
    assert got.type == pa.string()
    assert got.to_pylist() == want.to_pylist()
    full = pa.array(["a"] * 9)
    assert coalesce_text(full, column).to_pylist() == ["a"] * 9


def test_names_at_rows_are_the_texts_at_the_rows() -> None:
    events = pa.table({"name": names()})
    rows = np.array([8, 0, 2, 5, 4, 4, 1], dtype=np.int64)
    got = names_at(events, rows)
    assert got.type == CODED
    want = pc.cast(events["name"], pa.string()).to_pylist()
    assert got.to_pylist() == [want[r] for r in rows.tolist()]


def test_names_at_number_the_names_as_the_chunks_first_give_them() -> None:
    events = pa.table({"name": names()})
    # a null code (row 2) and a null text (row 4) among the rows: both null names
    got = names_at(events, np.array([8, 6, 2, 4, 7], dtype=np.int64))
    assert got.dictionary.to_pylist() == ["gemm", "relu", "copy"]
    assert got.indices.to_pylist() == [0, 2, None, None, 0]
    # rows of the later chunks only: their dictionaries alone, in their order
    assert names_at(events, np.array([6, 5], dtype=np.int64)).dictionary.to_pylist() == [
        "relu",
        "copy",
    ]
    assert names_at(events, np.zeros(0, dtype=np.int64)).to_pylist() == []
