"""union: the compiled pass over starts in order gives what the numpy passes give, runs,
first intervals and prefix sums alike, and unordered starts still come out right."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import intervals
from perfledger.analysis.intervals import IntervalSet, union


def numpy_union(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    saved = intervals._union_runs
    intervals._union_runs = None
    try:
        return union(starts, ends)
    finally:
        intervals._union_runs = saved


def assert_same(got: IntervalSet, expected: IntervalSet) -> None:
    for name in ("starts", "ends", "first", "cumulative"):
        a, b = getattr(got, name), getattr(expected, name)
        assert a.dtype == np.int64 and a.tolist() == b.tolist(), name


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.integers(-3, 12)),
        max_size=60,
    ),
    st.booleans(),
)
def test_the_compiled_union_is_the_numpy_one(pairs: list[tuple[int, int]], ordered: bool) -> None:
    # GIVEN intervals (empty and negative ones among them, touching and nested ones), their
    # starts in order or not
    if ordered:
        pairs = sorted(pairs, key=lambda p: p[0])
    starts = np.array([s for s, _ in pairs], dtype=np.int64)
    ends = np.array([s + d for s, d in pairs], dtype=np.int64)
    # THEN the union is the numpy passes' one, whichever way it was made
    assert_same(union(starts, ends), numpy_union(starts, ends))


def test_starts_out_of_order_only_among_empty_intervals_still_count_as_ordered() -> None:
    # the empty intervals are left out before the order is looked at
    starts = np.array([5, 1, 6, 6, 20], dtype=np.int64)
    ends = np.array([8, 1, 7, 9, 21], dtype=np.int64)
    got = union(starts, ends)
    assert got.starts.tolist() == [5, 20] and got.ends.tolist() == [9, 21]
    assert got.first.tolist() == [0, 4] and got.cumulative.tolist() == [0, 4, 5]
    assert_same(got, numpy_union(starts, ends))


def test_views_and_large_times() -> None:
    base = 1_700_000_000_000_000_000
    table = np.array([[base, base + 10], [base + 10, base + 30], [base + 40, base + 41]])
    got = union(table[:, 0], table[:, 1])  # strided views of one array
    assert got.starts.tolist() == [base, base + 40] and got.total == 31
    assert_same(got, numpy_union(table[:, 0].copy(), table[:, 1].copy()))
    assert len(union(np.zeros(0, np.int64), np.zeros(0, np.int64))) == 0
