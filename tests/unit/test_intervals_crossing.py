"""crossing_intervals: the slices to take out so that a thread's others nest, against pairwise
checks of nesting."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import intervals
from perfledger.analysis.intervals import crossing_intervals

slices = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 40)), min_size=2, max_size=40)


def _crossing_pairs(start: np.ndarray, end: np.ndarray) -> int:
    """Pairs of intervals that overlap without one holding the other, counted one by one."""
    count = 0
    for i in range(start.size):
        for j in range(i + 1, start.size):
            overlap = start[i] < end[j] and start[j] < end[i]
            nested = (start[i] <= start[j] and end[j] <= end[i]) or (
                start[j] <= start[i] and end[i] <= end[j]
            )
            count += overlap and not nested
    return count


def _arrays(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    start = np.array([s for s, _ in pairs], dtype=np.int64)
    return start, start + np.array([d for _, d in pairs], dtype=np.int64)


def test_the_later_of_two_crossing_slices_is_taken_out() -> None:
    # [0, 10) then [5, 15): the second outlives the first it starts in; [20, 30) and the
    # [22, 25) inside it nest
    start = np.array([0, 5, 20, 22], dtype=np.int64)
    end = np.array([10, 15, 30, 25], dtype=np.int64)
    assert crossing_intervals(start, end).tolist() == [False, True, False, False]


@settings(max_examples=300, deadline=None)
@given(slices)
def test_what_is_left_nests(pairs: list[tuple[int, int]]) -> None:
    start, end = _arrays(pairs)
    crossing = crossing_intervals(start, end)
    assert _crossing_pairs(start[~crossing], end[~crossing]) == 0
    if _crossing_pairs(start, end) == 0:
        assert not crossing.any()
    else:
        assert crossing.any()


@settings(max_examples=300, deadline=None)
@given(slices, st.randoms(use_true_random=False))
def test_the_slices_taken_out_do_not_depend_on_their_order(pairs, random) -> None:
    # in start order (longer first on ties), as a thread's slices come, and shuffled
    ordered = sorted(pairs, key=lambda p: (p[0], -p[1]))
    shuffled = list(ordered)
    random.shuffle(shuffled)
    taken: list[Counter[tuple[int, int]]] = []
    for case in (ordered, shuffled):
        start, end = _arrays(case)
        crossing = crossing_intervals(start, end)
        taken.append(Counter(zip(start[crossing].tolist(), end[crossing].tolist(), strict=True)))
    assert taken[0] == taken[1]


@settings(max_examples=300, deadline=None)
@given(slices, st.booleans())
def test_the_compiled_shortcut_takes_out_what_the_passes_take_out(
    pairs: list[tuple[int, int]], ordered: bool
) -> None:
    """A thread found laminar by the compiled pass (one stack walk) gives what the numpy
    passes give: none taken out; any other goes through the passes."""
    if intervals._laminar is None:
        pytest.skip("no C compiler where the project was installed")
    if ordered:  # as a thread's slices come: by start, longer first
        pairs = sorted(pairs, key=lambda p: (p[0], -p[1]))
    start, end = _arrays(pairs)
    with_shortcut = crossing_intervals(start, end)
    compiled, intervals._laminar = intervals._laminar, None
    try:
        assert crossing_intervals(start, end).tolist() == with_shortcut.tolist()
    finally:
        intervals._laminar = compiled
    assert intervals.compiled_laminar(start, end) in (True, False)
