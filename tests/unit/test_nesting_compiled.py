"""The compiled nesting pass (one sweep in start order, a stack per thread) against the numpy
passes of operator_nesting and innermost_enclosing: the same parents and the same intervals
running at each instant wherever it answers, and an answer on every nested thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import nesting
from perfledger.analysis.nesting import innermost_enclosing, operator_nesting

pytestmark = pytest.mark.skipif(
    nesting._nest is None, reason="no C compiler where the project was installed"
)


@contextmanager
def _numpy_passes() -> Iterator[None]:
    compiled, nesting._nest = nesting._nest, None
    try:
        yield
    finally:
        nesting._nest = compiled


def _by_numpy(
    g: np.ndarray, s: np.ndarray, e: np.ndarray, qg: np.ndarray, qt: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    with _numpy_passes():
        parent = operator_nesting(g, s, e)
        return parent, innermost_enclosing(g, s, e, parent, qg, qt)


def _arrays(*columns: list[int]) -> list[np.ndarray]:
    return [np.array(c, dtype=np.int64) for c in columns]


# intervals of up to three threads on a small time range: many share a start, an end or both,
# some last no time at all
intervals = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(0, 6)), max_size=40
)
queries = st.lists(st.tuples(st.integers(-1, 3), st.integers(-1, 20)), max_size=30)


@settings(max_examples=400, deadline=None)
@given(intervals, queries, st.booleans())
def test_where_the_pass_answers_it_answers_as_the_numpy_passes(
    rows: list[tuple[int, int, int]], asked: list[tuple[int, int]], in_start_order: bool
) -> None:
    if in_start_order:  # as the events come: by start, ties in any order
        rows = sorted(rows, key=lambda row: row[1])
    g, s, d = _arrays(*zip(*rows, strict=True)) if rows else _arrays([], [], [])
    asked = sorted(asked, key=lambda q: q[1])
    qg, qt = _arrays(*zip(*asked, strict=True)) if asked else _arrays([], [])
    e = s + d
    expected_parent, expected_found = _by_numpy(g, s, e, qg, qt)
    answered = nesting._nested(g, s, e, qg, qt)
    if answered is not None:
        np.testing.assert_array_equal(answered[0], expected_parent)
        np.testing.assert_array_equal(answered[1], expected_found)
    np.testing.assert_array_equal(operator_nesting(g, s, e), expected_parent)
    np.testing.assert_array_equal(
        innermost_enclosing(g, s, e, expected_parent, qg, qt), expected_found
    )


@st.composite
def nested_threads(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """Intervals (thread, start, end) that nest, opened and closed at random; some opened and
    closed at one instant, some opened again with the same start and end as the one before."""
    rows: list[tuple[int, int, int]] = []
    for thread in range(draw(st.integers(1, 3))):
        now, stack = 0, []
        for action in draw(st.lists(st.sampled_from("ocz2"), max_size=30)) + ["c"] * 30:
            if action == "o":
                now += draw(st.integers(0, 2))
                stack.append(len(rows))
                rows.append((thread, now, -1))
            elif action == "z":  # an instant one
                rows.append((thread, now, now))
            elif stack:
                now += draw(st.integers(0 if action == "2" else 1, 2))
                at = stack.pop()
                rows[at] = (thread, rows[at][1], max(now, rows[at][1]))
                if action == "2":  # a twin: the same interval again
                    rows.append(rows[at])
    return sorted(rows, key=lambda row: row[1])


@settings(max_examples=300, deadline=None)
@given(nested_threads(), queries)
def test_every_nested_thread_in_start_order_is_answered(
    rows: list[tuple[int, int, int]], asked: list[tuple[int, int]]
) -> None:
    g, s, e = _arrays(*zip(*rows, strict=True)) if rows else _arrays([], [], [])
    asked = sorted(asked, key=lambda q: q[1])
    qg, qt = _arrays(*zip(*asked, strict=True)) if asked else _arrays([], [])
    answered = nesting._nested(g, s, e, qg, qt)
    assert answered is not None
    expected_parent, expected_found = _by_numpy(g, s, e, qg, qt)
    np.testing.assert_array_equal(answered[0], expected_parent)
    np.testing.assert_array_equal(answered[1], expected_found)


def test_a_twin_and_an_instant_nest_in_the_interval_before_them() -> None:
    # [0, 10) holds its twin, which holds [2, 5), then the instant at 5 that [2, 5) has
    # closed at, then a second instant at 5 that nests in the first
    g, s, e = _arrays([0] * 5, [0, 0, 2, 5, 5], [10, 10, 5, 5, 5])
    qg, qt = _arrays([0, 1, 0, 0], [2, 3, 5, 10])
    answered = nesting._nested(g, s, e, qg, qt)
    assert answered is not None
    assert answered[0].tolist() == [-1, 0, 1, 1, 3]
    # thread 1 has none; at 5 the instants have ended as they began: the twin runs; at 10
    # nothing
    assert answered[1].tolist() == [2, -1, 1, -1]


@pytest.mark.parametrize(
    ("g", "s", "e", "why"),
    [
        ([0, 0], [0, 5], [10, 15], "crossing"),
        ([0, 0], [5, 0], [6, 10], "starts out of order"),
        ([0, 0], [0, 5], [10, 4], "an end before its start"),
        ([-1, 0], [0, 5], [10, 6], "a negative thread number"),
    ],
)
def test_what_the_pass_cannot_answer_goes_to_the_numpy_passes(
    g: list[int], s: list[int], e: list[int], why: str
) -> None:
    arrays = _arrays(g, s, e)
    assert nesting._nested(*arrays) is None, why
    with _numpy_passes():
        expected = operator_nesting(*arrays)
    np.testing.assert_array_equal(operator_nesting(*arrays), expected)


def test_queries_out_of_order_go_to_the_numpy_passes() -> None:
    g, s, e = _arrays([0, 0], [0, 2], [10, 5])
    qg, qt = _arrays([0, 0], [3, 1])
    assert nesting._nested(g, s, e, qg, qt) is None
    parent, found = _by_numpy(g, s, e, qg, qt)
    assert innermost_enclosing(g, s, e, parent, qg, qt).tolist() == found.tolist() == [1, 0]
