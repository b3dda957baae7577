"""The widest gap the outlier repair cuts at: the compiled pass against numpy's arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import columns, repair

intervals = st.lists(st.tuples(st.integers(-50, 50), st.integers(-5, 30)), min_size=2, max_size=40)


@settings(max_examples=400, deadline=None)
@given(intervals, st.booleans())
def test_the_compiled_widest_gap_is_numpys(pairs: list[tuple[int, int]], ordered: bool) -> None:
    """Rows in start order: (cut, gap, left span, right span) as the numpy passes find them
    (the first of equal gaps, overlaps as negative gaps, negative durations as they come);
    rows out of order: None, left to the numpy path and its sort."""
    if columns.widest_gap(np.zeros(2, np.int64), np.zeros(2, np.int64)) is None:
        pytest.skip("no C compiler where the project was installed")
    if ordered:
        pairs = sorted(pairs, key=lambda p: p[0])
    start = np.array([s for s, _ in pairs], np.int64)
    dur = np.array([d for _, d in pairs], np.int64)
    found = columns.widest_gap(start, dur)
    if bool((start[1:] >= start[:-1]).all()):
        assert found == repair._widest_gap(start, dur, None)
    else:
        assert found is None


def test_the_widest_gap_of_a_fault_on_one_side() -> None:
    # three events together, then one stamped an hour later: the gap after the third
    start = np.array([0, 10, 20, 3_600_000_000_000], np.int64)
    dur = np.array([15, 5, 10, 7], np.int64)
    assert columns.widest_gap(start, dur) in (None, (2, 3_600_000_000_000 - 30, 30, 7))
    assert repair._widest_gap(start, dur, None) == (2, 3_600_000_000_000 - 30, 30, 7)


def test_the_widest_gap_refuses_other_arrays() -> None:
    if columns.widest_gap(np.zeros(2, np.int64), np.zeros(2, np.int64)) is None:
        pytest.skip("no C compiler where the project was installed")
    with pytest.raises(ValueError, match="2 or more"):
        columns.widest_gap(np.zeros(1, np.int64), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="one length"):
        columns.widest_gap(np.zeros(3, np.int64), np.zeros(2, np.int64))
