"""The replay loop's columns (analysis/graph_plain.py) hold the values of the graph's columns
they stand for, whatever the array they come from."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from perfledger.analysis.graph_plain import (
    NodeEdges,
    c_array,
    edge_nodes,
    event_edges,
    patched,
    wait_edges,
)

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


EDGES = st.integers(1, 12).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(
            st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(-50, 50)),
            max_size=30,
        ),
    )
)


@given(EDGES)
def test_edge_tables_read_the_same_by_node_and_as_rows(
    graph: tuple[int, list[tuple[int, int, int]]],
) -> None:
    n, edges = graph
    src = np.asarray([s for s, _, _ in edges], dtype=np.int64)
    dst = np.asarray([d for _, d, _ in edges], dtype=np.int64)
    delay = np.asarray([g for _, _, g in edges], dtype=np.int64)
    # by hand: each node's edges in their order
    expected: dict[int, list[tuple[int, int]]] = {}
    for s, d, g in edges:
        expected.setdefault(d, []).append((s, g))
    events = event_edges(n, src, dst, delay)
    waits = wait_edges(n, src, dst)
    # the nodes from the rows, before any dict is made
    assert sorted(events.nodes().tolist()) == sorted(expected)
    assert sorted(edge_nodes(waits, {n - 1: (0, 0)}).tolist()) == sorted([*expected, n - 1])
    assert dict(events) == expected
    assert dict(waits) == {d: [s for s, _ in pairs] for d, pairs in expected.items()}
    assert events.get(n) is None and len(events) == len(expected)
    # the rows hold each node's edges in the same order
    assert events.rows is not None
    _, ptr, sources, gaps = events.rows
    for v in range(n):
        pairs = list(zip(sources[ptr[v] : ptr[v + 1]], gaps[ptr[v] : ptr[v + 1]], strict=True))
        assert pairs == expected.get(v, [])


def test_the_dict_by_node_is_made_once_and_only_when_read() -> None:
    made: list[int] = []

    def make() -> dict[int, Any]:
        made.append(1)
        return {2: [(0, 5)]}

    rows = (3, np.asarray([0, 0, 0, 1]), np.asarray([0]), np.asarray([5]))
    table = NodeEdges(rows, make)
    assert table.nodes().tolist() == [2] and not made
    assert table[2] == [(0, 5)] and table.get(1, ()) == () and list(table) == [2]
    assert made == [1]
    # wake-ups: a source per node, -1 where none
    wakes = NodeEdges((3, np.asarray([-1, 0, -1]), np.asarray([0, 4, 0])), dict)
    assert wakes.nodes().tolist() == [1]
    # no rows: the nodes are the dict's
    assert NodeEdges(None, lambda: {4: [], 1: []}).nodes().tolist() == [4, 1]
