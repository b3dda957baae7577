"""columns.isin and columns.matches: row masks of dictionary and plain string columns, against
the values tested row by row (a null row is in none); columns.texts against the values row
by row; columns.pair_order against a sort of the pairs; kineto_layout.codes_among (the kind masks'
comparisons) against each code's membership; columns.lexsort against np.lexsort."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import columns
from perfledger.sources.kineto_layout import codes_among

ALPHABET = ["kernel", "memcpy", "memset", "cpu_op", "runtime", "annotation", "step", "comm"]

chunked = st.lists(st.lists(st.sampled_from(ALPHABET), max_size=12), min_size=1, max_size=4)
with_nulls = st.lists(
    st.lists(st.sampled_from([*ALPHABET, None]), max_size=12), min_size=1, max_size=4
)
wanted = st.sets(st.sampled_from(ALPHABET))


def _table(chunks: list[list[str | None]], dictionary: bool) -> pa.Table:
    arrays = [pa.array(c, pa.string()) for c in chunks]
    if dictionary:
        # each chunk with a dictionary of its own, as concatenated imports have them
        arrays = [a.dictionary_encode() for a in arrays]
        kind = pa.dictionary(pa.int32(), pa.string())
        return pa.table({"kind": pa.chunked_array(arrays, kind)})
    return pa.table({"kind": pa.chunked_array(arrays, pa.string())})


@given(with_nulls, wanted, st.booleans())
def test_isin_marks_the_rows_holding_one_of_the_values(chunks, values, dictionary) -> None:
    mask = columns.isin(_table(chunks, dictionary), "kind", values)
    assert mask.dtype == bool
    assert mask.tolist() == [v in values for c in chunks for v in c]


@given(with_nulls, wanted, st.booleans())
def test_matches_marks_the_rows_whose_value_passes(chunks, values, dictionary) -> None:
    mask = columns.matches(_table(chunks, dictionary), "kind", lambda v: v not in values)
    assert mask.tolist() == [v is not None and v not in values for c in chunks for v in c]


@given(with_nulls, st.booleans())
def test_texts_are_the_rows_values_a_null_empty(chunks, dictionary) -> None:
    found = columns.texts(_table(chunks, dictionary), "kind")
    assert found.dtype.kind == "U"
    assert found.tolist() == [v or "" for c in chunks for v in c]
    assert (found == "kernel").tolist() == [v == "kernel" for c in chunks for v in c]


def test_a_dictionary_of_many_values_marks_the_rows_of_each() -> None:
    # more values wanted, and more left out, than the few compared one by one
    names = [f"kernel_{i % 23}" for i in range(200)]
    table = pa.table({"name": pa.array(names).dictionary_encode()})
    chosen = {f"kernel_{i}" for i in range(0, 23, 2)}
    assert columns.isin(table, "name", chosen).tolist() == [n in chosen for n in names]
    assert columns.isin(table, "name", []).tolist() == [False] * 200
    every = {f"kernel_{i}" for i in range(23)}
    assert columns.isin(table, "name", every - {"kernel_5"}).tolist() == [
        n != "kernel_5" for n in names
    ]


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3)), max_size=40))
def test_pair_order_is_the_order_by_key_then_name_then_row(pairs) -> None:
    keys = np.array([k for k, _ in pairs], dtype=np.int64)
    names = np.array([n for _, n in pairs], dtype=np.int64)
    expected = sorted(range(len(pairs)), key=lambda i: (pairs[i][0], pairs[i][1], i))
    assert columns.pair_order(keys, names).tolist() == expected


@given(
    st.lists(st.lists(st.sampled_from([*ALPHABET, "", None]), max_size=12), min_size=1, max_size=4),
    st.lists(st.sampled_from(ALPHABET), max_size=4),
    st.booleans(),
)
def test_distinct_strings_are_the_non_empty_values_rows_hold(chunks, unused, dictionary) -> None:
    arrays = [pa.array(c, pa.string()) for c in chunks]
    if dictionary:
        # each chunk's dictionary with values no row of it uses (as a take of rows leaves it)
        kind = pa.dictionary(pa.int32(), pa.string())
        encoded = []
        for values in chunks:
            words = sorted({v for v in values if v is not None} | set(unused))
            codes = pa.array([None if v is None else words.index(v) for v in values], pa.int32())
            encoded.append(pa.DictionaryArray.from_arrays(codes, pa.array(words, pa.string())))
        column = pa.chunked_array(encoded, kind)
    else:
        column = pa.chunked_array(arrays, pa.string())
    expected = sorted({v for c in chunks for v in c if v})
    assert columns.distinct_strings(column) == expected


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-(2**62), 2**62)), max_size=60))
def test_first_seen_ids_number_rows_in_their_first_appearance_order(rows) -> None:
    numbered = columns.first_seen_ids(
        [np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64)]
    )
    if columns._compiled is None:  # no compiler where the project was installed
        assert numbered is None
        return
    first: dict[tuple[int, int], int] = {}
    assert numbered is not None
    assert numbered.tolist() == [first.setdefault(r, len(first)) for r in rows]


@given(
    codes=st.lists(st.integers(-1, 20), max_size=60),
    wanted_codes=st.lists(st.integers(-3, 24), max_size=8),
    width=st.sampled_from([np.int8, np.int32, np.int64]),
)
def test_codes_among_is_isin(codes: list[int], wanted_codes: list[int], width: type) -> None:
    values = np.array(codes, dtype=width)
    found = codes_among(values, wanted_codes)
    assert found.dtype == np.bool_
    assert found.tolist() == [c in set(wanted_codes) for c in codes]


_INTEGER_KEYS = st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint64", "bool"])


@settings(max_examples=300, deadline=None)
@given(st.data(), st.lists(_INTEGER_KEYS, min_size=1, max_size=4), st.integers(0, 60))
def test_lexsort_is_numpys_whatever_the_keys_ranges(
    data: st.DataObject, dtypes: list[str], size: int
) -> None:
    # keys of every integer type, narrow (packed together) or spanning their whole type
    # (sorted as they are), many ties: the order of np.lexsort, row for row
    keys = []
    for dtype in dtypes:
        info = np.iinfo(dtype) if dtype != "bool" else None
        if info is None:
            values = data.draw(st.lists(st.booleans(), min_size=size, max_size=size))
        else:
            wide = data.draw(st.booleans())
            low, high = (info.min, info.max) if wide else (max(info.min, -3), min(info.max, 3))
            values = data.draw(st.lists(st.integers(low, high), min_size=size, max_size=size))
        keys.append(np.array(values, dtype=dtype))
    assert columns.lexsort(keys).tolist() == np.lexsort(keys).tolist()
