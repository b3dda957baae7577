"""_first_of_groups (the launch of a correlation id, the operator of an external id): per
(rank, id) group the element first by the ordering keys, then by position, against a
one-by-one reading of the groups."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis.ops import _first_of_groups

# few ranks and ids: most groups of one element, some of many; keys with many ties
rows = st.lists(
    st.tuples(st.integers(0, 2), st.integers(-1, 6), st.integers(0, 3), st.integers(-3, 3)),
    max_size=60,
)


def _one_by_one(rank: list[int], ident: list[int], *keys: list[int]) -> list[int]:
    groups: dict[tuple[int, int], list[int]] = {}
    for position, key in enumerate(zip(rank, ident, strict=True)):
        groups.setdefault(key, []).append(position)
    return [
        min(members, key=lambda p: (*(k[p] for k in keys), p))
        for _, members in sorted(groups.items())
    ]


@settings(max_examples=400, deadline=None)
@given(rows, st.booleans(), st.integers(0, 2))
def test_the_first_of_each_group_by_its_keys_then_position(
    drawn: list[tuple[int, int, int, int]], one_rank: bool, key_count: int
) -> None:
    rank = [0 if one_rank else r for r, _, _, _ in drawn]
    ident = [i for _, i, _, _ in drawn]
    keys = [[a for _, _, a, _ in drawn], [b for _, _, _, b in drawn]][:key_count]
    arrays = [np.array(c, dtype=np.int64) for c in (rank, ident, *keys)]
    assert _first_of_groups(*arrays).tolist() == _one_by_one(rank, ident, *keys)
