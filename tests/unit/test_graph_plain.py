"""The replay loop's columns (analysis/graph_plain.py) hold the values of the graph's columns
they stand for, whatever the array they come from."""

from __future__ import annotations

from array import array

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from perfledger.analysis.graph_plain import c_array, patched

VALUES = st.lists(st.integers(-(2**40), 2**40), max_size=60)


@given(VALUES)
def test_a_c_array_holds_the_column_values(values: list[int]) -> None:
    column = np.asarray(values, dtype=np.int64)
    assert c_array(column).tolist() == values
    # a strided view and a narrower dtype give the same values
    assert c_array(np.repeat(column, 2)[::2]).tolist() == values
    small = np.asarray([v % 1000 for v in values], dtype=np.int32)
    assert c_array(small).tolist() == small.tolist()


@given(VALUES, st.lists(st.integers(0, 59), max_size=60))
def test_a_patched_column_holds_the_new_values(values: list[int], edits: list[int]) -> None:
    old = np.asarray(values, dtype=np.int64)
    new = old.copy()
    for i in edits:
        if i < new.size:
            new[i] += 7
    base = c_array(old)
    got = patched(base, old, new)
    assert isinstance(got, array) and got.tolist() == new.tolist()
    assert patched(base, old, old) is base
    assert base.tolist() == values  # the graph's own column is left as it was
