"""The numbering of rows by hashing (compiled, and per column where nothing was compiled)
agrees with numpy's sort-based unique."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import columns as columns_module
from perfledger.analysis.columns import distinct, factorize, unique_rows

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=5).flatmap(
        lambda width: st.lists(
            st.lists(st.one_of(st.integers(-3, 3), _INT64), min_size=width, max_size=width),
            min_size=1,
            max_size=60,
        )
    )
)
def test_unique_rows_matches_numpy(rows: list[list[int]]) -> None:
    table = np.array(rows, dtype=np.int64)
    columns = [table[:, j].copy() for j in range(table.shape[1])]
    keys, inverse = unique_rows(columns)
    want_keys, want_inverse = np.unique(table, axis=0, return_inverse=True)
    assert keys.tolist() == want_keys.tolist()
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(1, 6)), min_size=1, max_size=40
    )
)
def test_runs_of_equal_rows_are_numbered_as_numpy_numbers_them(
    runs: list[tuple[int, int, int]],
) -> None:
    # rows in runs of equal ones (a trace's rows in time order, a track after a track), and
    # rows that differ from the one before in one column only
    table = np.array([[a, b] for a, b, length in runs for _ in range(length)], dtype=np.int64)
    columns = [table[:, j].copy() for j in range(2)]
    keys, inverse = unique_rows(columns)
    want_keys, want_inverse = np.unique(table, axis=0, return_inverse=True)
    assert keys.tolist() == want_keys.tolist()
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()
    ids = columns_module.first_seen_ids(columns)
    if ids is not None:  # numbered in order of first appearance
        _, first = np.unique(table, axis=0, return_index=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(order.size, np.int64)
        rank[order] = np.arange(order.size)
        assert ids.tolist() == rank[want_inverse.reshape(-1)].tolist()


def test_unique_rows_renumbers_before_the_code_overflows() -> None:
    # Five columns of 2000 distinct values each: 2000**5 > 2**62 combinations.
    rng = np.random.default_rng(7)
    table = rng.integers(0, 2000, size=(3000, 5), dtype=np.int64)
    keys, inverse = unique_rows([table[:, j].copy() for j in range(5)])
    want_keys, want_inverse = np.unique(table, axis=0, return_inverse=True)
    assert np.array_equal(keys, want_keys)
    assert np.array_equal(inverse, want_inverse.reshape(-1))
    assert np.array_equal(keys[inverse], table)


def test_unique_rows_of_nothing() -> None:
    keys, inverse = unique_rows([np.zeros(0, np.int64), np.zeros(0, np.int64)])
    assert keys.shape == (0, 2)
    assert inverse.size == 0


def test_factorize_and_distinct() -> None:
    values = np.array([7, -2, 7, 2**40, -2, 0], dtype=np.int64)
    values_sorted, index = factorize(values)
    assert values_sorted.tolist() == [-2, 0, 7, 2**40]
    assert index.tolist() == [2, 0, 2, 3, 0, 1]
    assert distinct(values).tolist() == [-2, 0, 7, 2**40]
    assert distinct(np.zeros(0, np.int64)).tolist() == []


def test_the_numbering_is_built_where_a_compiler_is() -> None:
    # pip install builds it (optional: without a compiler each column is numbered apart)
    if shutil.which("cc") or shutil.which("gcc"):
        assert columns_module._compiled is not None, "run pip install -e . again: not built"


@pytest.fixture(params=["compiled", "per column"])
def numbering(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """unique_rows by the compiled pass, and by the per-column numbering it replaces."""
    if request.param == "compiled" and columns_module._compiled is None:
        pytest.skip("no C compiler where the project was installed")
    if request.param == "per column":
        monkeypatch.setattr(columns_module, "_compiled", None)
    return str(request.param)


@pytest.mark.parametrize("width", [1, 2, 5, 8, 9])
def test_many_distinct_rows_both_ways(numbering: str, width: int) -> None:
    # enough distinct rows to grow the compiled pass's table many times; 9 columns: per column
    rng = np.random.default_rng(width)
    table = rng.integers(-3, 3, size=(20_000, width), dtype=np.int64)
    table[::7, 0] = rng.integers(-(2**63), 2**63 - 1, size=table[::7].shape[0], dtype=np.int64)
    keys, inverse = unique_rows([table[:, j].copy() for j in range(width)])
    want_keys, want_inverse = np.unique(table, axis=0, return_inverse=True)
    assert np.array_equal(keys, want_keys)
    assert np.array_equal(inverse, want_inverse.reshape(-1))


def test_the_compiled_numbering_refuses_other_arrays() -> None:
    if columns_module._compiled is None:
        pytest.skip("no C compiler where the project was installed")
    first_seen = columns_module._compiled.first_seen
    codes = np.empty(3, np.int64)
    with pytest.raises(ValueError, match="int64 columns and codes of one length"):
        first_seen((np.zeros(3, np.int64), np.zeros(2, np.int64)), codes)
    with pytest.raises(ValueError, match="int64 columns and codes of one length"):
        first_seen((np.zeros(3, np.int32),), codes)
    with pytest.raises(ValueError, match="1 to 8 columns"):
        first_seen((), codes)
    with pytest.raises(ValueError, match="1 to 8 columns"):
        first_seen(tuple(np.zeros(3, np.int64) for _ in range(9)), codes)
