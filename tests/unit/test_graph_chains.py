"""The step graph's chain positions: the compiled walk against chains laid out by hand and
against the pointer jumping it replaces (``graph.jumped_positions``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.analysis import columns
from perfledger.analysis.graph import jumped_positions, moved_pointers, relaxed_keys


@st.composite
def _chains(draw: st.DrawFn) -> tuple[np.ndarray, list[int], list[int]]:
    """Nodes in a random order cut into chains: (pred, each node's first node, its place)."""
    n = draw(st.integers(0, 60))
    order = draw(st.permutations(list(range(n))))
    cuts = sorted(draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=n)) if n > 1 else set())
    pred = np.full(n, -1, dtype=np.int64)
    root, place = [0] * n, [0] * n
    for lo, hi in zip([0, *cuts], [*cuts, n], strict=True):
        chain = order[lo:hi]
        for k, node in enumerate(chain):
            pred[node] = chain[k - 1] if k else draw(st.sampled_from([-1, -5]))
            root[node], place[node] = chain[0], k
    return pred, root, place


@given(_chains())
def test_the_walk_and_the_jumps_find_each_nodes_chain_and_place(chains) -> None:
    pred, root, place = chains
    jumped = jumped_positions(pred)
    assert jumped[0].tolist() == root
    assert jumped[1].tolist() == place
    walked = columns.chain_positions(pred)
    if columns._compiled is None:  # no compiler where the project was installed
        assert walked is None
        return
    assert walked is not None
    assert walked[0].tolist() == root
    assert walked[1].tolist() == place


def test_the_walk_refuses_what_are_not_chains() -> None:
    if columns._compiled is None:  # no compiler where the project was installed
        assert columns.chain_positions(np.array([-1, 0], dtype=np.int64)) is None
        return
    for pred in ([2, 0, 1], [-1, 7], [1, 1]):  # a cycle, past the end, its own predecessor
        with pytest.raises(ValueError, match="no chains"):
            columns.chain_positions(np.array(pred, dtype=np.int64))


@st.composite
def _keyed_graphs(draw: st.DrawFn) -> tuple[np.ndarray, SimpleNamespace, np.ndarray, np.ndarray]:
    """Sort keys, the pointers they are raised above, and chains: as _topological has them."""
    n = draw(st.integers(1, 40))
    key = np.array(draw(st.lists(st.integers(-50, 50), min_size=n, max_size=n)), np.int64)
    pointer = st.lists(st.integers(-1, n - 1), min_size=n, max_size=n)
    m = draw(st.integers(0, 30))
    edge = st.lists(st.integers(0, n - 1), min_size=m, max_size=m)
    graph = SimpleNamespace(
        launch_src=np.array(draw(pointer), np.int64),
        wake_src=np.array(draw(pointer), np.int64),
        wait_src=np.array(draw(edge), np.int64),
        wait_dst=np.array(draw(edge), np.int64),
        event_src=np.array(draw(edge), np.int64),
        event_dst=np.array(draw(edge), np.int64),
    )
    chain_order = np.array(draw(st.permutations(list(range(n)))), np.int64)
    same = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    same[0] = False
    return key, graph, chain_order, same


@given(_keyed_graphs(), st.integers(1, 5))
def test_the_compiled_rounds_raise_the_keys_as_numpys_do(keyed, rounds) -> None:
    key, graph, chain_order, same = keyed
    expected = key.copy()
    relaxed_keys(expected, graph, chain_order, same, rounds)  # type: ignore[arg-type]
    compiled = key.copy()
    if not columns.relax_keys(compiled, graph, chain_order, same, rounds):
        assert columns._compiled is None  # no compiler where the project was installed
        return
    assert compiled.tolist() == expected.tolist()


@given(st.data())
def test_the_compiled_remap_moves_pointers_as_numpys_does(data) -> None:
    n = data.draw(st.integers(1, 40))
    pointers = np.array(data.draw(st.lists(st.integers(-1, n - 1), min_size=n, max_size=n)))
    order = np.array(data.draw(st.permutations(list(range(n)))), np.int64)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    found = columns.remap_pointers(pointers, rank, order)
    if found is None:
        assert columns._compiled is None
        return
    # numpy's way, worked out here: each pointer's new place, dropped unless before its node
    expected = [
        -1 if p < 0 or rank[p] >= k else int(rank[p])
        for k, p in enumerate(pointers[order].tolist())
    ]
    assert found[0].tolist() == expected
    assert found[1] == sum(
        1 for k, p in enumerate(pointers[order].tolist()) if p >= 0 and rank[p] >= k
    )
    assert moved_pointers(pointers, rank, order)[0].tolist() == expected
