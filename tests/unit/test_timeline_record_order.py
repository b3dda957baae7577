"""A file's records in one order: a stable sort by time, class, longer first, nesting."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.render.timeline.file import _record_order

# few distinct values: most records tie with others on time and class
_RECORDS = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(-3, 3), st.integers(0, 3)),
    max_size=60,
)


@given(records=_RECORDS, far=st.booleans())
@settings(max_examples=300, deadline=None)
def test_the_order_is_a_stable_sort_by_every_key(
    records: list[tuple[int, int, int, int]], far: bool
) -> None:
    ts = np.array([r[0] for r in records], np.int64)
    if far:  # times too far apart for the packed key: the sort by every key
        ts = ts * (1 << 58)
    cls = np.array([r[1] for r in records], np.int8)
    longer_first = np.array([r[2] for r in records], np.int64)
    nesting = np.array([r[3] for r in records], np.int8)
    want = np.lexsort((nesting, longer_first, cls, ts))  # stable: ties keep their order
    assert _record_order(ts, cls, longer_first, nesting).tolist() == want.tolist()
