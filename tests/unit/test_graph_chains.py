"""The step graph's chain positions: the compiled walk against chains laid out by hand and
against the pointer jumping it replaces (``graph.jumped_positions``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from perfledger.analysis import columns
from perfledger.analysis.graph import jumped_positions


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
    if columns._compiled is None:
        assert columns.chain_positions(np.array([-1, 0], dtype=np.int64)) is None
        return
    assert columns.chain_positions(np.array([2, 0, 1], dtype=np.int64)) is None  # a cycle
    assert columns.chain_positions(np.array([-1, 7], dtype=np.int64)) is None  # past the end
    assert columns.chain_positions(np.array([1, 1], dtype=np.int64)) is None  # its own pred
