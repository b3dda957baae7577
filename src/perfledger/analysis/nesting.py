"""Nesting of host intervals: each interval's innermost enclosing one, the interval running
at an instant, and self time (the operator tables and the advisor's rules)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from perfledger.analysis.intervals import compiled_function

IntArray = npt.NDArray[np.int64]


_nest = compiled_function("nest")  # the compiled nesting pass, None where not built
_NO_QUERIES: IntArray = np.zeros(0, np.int64)


def _nested(
    group: IntArray,
    start_ns: IntArray,
    end_ns: IntArray,
    query_group: IntArray = _NO_QUERIES,
    query_ns: IntArray = _NO_QUERIES,
) -> tuple[IntArray, IntArray] | None:
    """:func:`operator_nesting` and :func:`innermost_enclosing` by the compiled pass: one
    sweep in start order with a stack of the open intervals per group. None where it was not
    built or cannot answer as the numpy passes do (starts or queries out of order, an end
    before its start, a group number past the rows' count plus 1024, intervals crossing):
    the numpy passes then."""
    if _nest is None:
        return None
    parent = np.empty(start_ns.size, np.int64)
    found = np.empty(query_ns.size, np.int64)
    values = (np.ascontiguousarray(a, np.int64) for a in (group, start_ns, end_ns))
    queries = (np.ascontiguousarray(a, np.int64) for a in (query_group, query_ns))
    if not _nest(*values, parent, *queries, found):
        return None
    return parent, found


def operator_nesting(group: IntArray, start_ns: IntArray, end_ns: IntArray) -> IntArray:
    """Index of the innermost interval of the same group enclosing each interval (-1: none).

    Intervals of one group (one host thread) are expected to nest; one that ends exactly where
    another begins is its sibling, not its parent. Among identical intervals the earlier index
    is the parent. Vectorised: a sweep over start/end boundaries gives every interval's depth,
    then each interval's parent is the closest preceding interval one level up. Intervals in
    start order that nest (a host thread's, as the events come) are answered by the compiled
    pass instead (``_columns.c``: a stack per thread, one sweep), with the same parents.
    """
    n = len(start_ns)
    nested = _nested(group, start_ns, end_ns) if n else None
    if nested is not None:
        return nested[0]
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    # lexsort is stable: ties keep the index order (no index key needed)
    order = np.lexsort((-end_ns, start_ns, group))
    group_sorted = group[order]
    start_sorted = start_ns[order]
    end_sorted = end_ns[order]
    position = np.arange(n)
    # Boundaries in time order; an end at t closes before a start at t opens (siblings touch),
    # but a zero-length interval closes after the starts at its instant so that it never
    # lowers the depth of an interval opening at the same time.
    boundary_type = np.concatenate(
        [np.ones(n, dtype=np.int8), np.where(end_sorted > start_sorted, 0, 2).astype(np.int8)]
    )
    boundary_order = np.lexsort(
        (
            np.concatenate([position, position]),
            boundary_type,
            np.concatenate([start_sorted, end_sorted]),
            np.concatenate([group_sorted, group_sorted]),
        )
    )
    delta = np.where(boundary_order < n, 1, -1)
    open_count = np.cumsum(delta)
    is_start = boundary_order < n
    depth = np.empty(n, dtype=np.int64)
    depth[boundary_order[is_start]] = open_count[is_start] - 1

    parent_sorted = np.full(n, -1, dtype=np.int64)
    by_depth = np.argsort(depth, kind="stable")  # positions grouped by depth, ascending within
    bounds = np.searchsorted(depth[by_depth], np.arange(depth.max() + 2))
    for level in range(1, int(depth.max()) + 1):
        children = by_depth[bounds[level] : bounds[level + 1]]
        candidates = by_depth[bounds[level - 1] : bounds[level]]
        k = np.searchsorted(candidates, children) - 1
        found = k >= 0
        chosen = np.where(found, candidates[np.maximum(k, 0)], -1)
        same_group = found & (group_sorted[np.maximum(chosen, 0)] == group_sorted[children])
        parent_sorted[children] = np.where(same_group, chosen, -1)
    has_parent = parent_sorted >= 0
    parent[order[has_parent]] = order[parent_sorted[has_parent]]
    return parent


def innermost_enclosing(
    group: IntArray,
    start_ns: IntArray,
    end_ns: IntArray,
    parent: IntArray,
    query_group: IntArray,
    query_ns: IntArray,
) -> IntArray:
    """For each query instant, the innermost interval of its group running then (-1: none).

    ``parent`` is ``operator_nesting(group, start_ns, end_ns)``. An interval runs at t when
    start <= t < end.
    """
    n, m = len(start_ns), len(query_ns)
    nested = _nested(group, start_ns, end_ns, query_group, query_ns) if n and m else None
    if nested is not None:
        return nested[1]
    found = np.full(m, -1, dtype=np.int64)
    if n == 0 or m == 0:
        return found
    # Intervals in (group, start, innermost last) order: for a query, the last interval of its
    # group started by then (one starting at the query instant included) is the innermost
    # one started by then. Searched thread by thread, the queries grouped by a stable sort.
    order = np.lexsort((-end_ns, start_ns, group))  # stable: ties keep the index order
    group_sorted, start_sorted = group[order], start_ns[order]
    query_order = np.argsort(query_group, kind="stable")
    groups, query_first = np.unique(query_group[query_order], return_index=True)
    query_bounds = np.append(query_first, m)
    lo = np.searchsorted(group_sorted, groups, side="left")
    hi = np.searchsorted(group_sorted, groups, side="right")
    candidate = np.full(m, -1, dtype=np.int64)
    for k in range(groups.size):  # a loop over host threads
        if hi[k] == lo[k]:
            continue
        asked = query_order[query_bounds[k] : query_bounds[k + 1]]
        at = np.searchsorted(start_sorted[lo[k] : hi[k]], query_ns[asked], side="right") - 1
        started = at >= 0
        candidate[asked[started]] = order[lo[k] + at[started]]
    # Walk up the nesting until an interval still runs at the query instant.
    for _ in range(n + 1):
        ended = candidate >= 0
        ended[ended] = end_ns[candidate[ended]] <= query_ns[ended]
        if not ended.any():
            break
        candidate[ended] = parent[candidate[ended]]
    return candidate


def self_time(start_ns: IntArray, end_ns: IntArray, parent: IntArray) -> IntArray:
    """Duration of each interval minus the time its direct children cover inside it."""
    child = np.flatnonzero(parent >= 0)
    of = parent[child]
    covered = np.minimum(end_ns[child], end_ns[of]) - np.maximum(start_ns[child], start_ns[of])
    children_ns = np.zeros(len(start_ns), dtype=np.int64)
    np.add.at(children_ns, of, np.maximum(covered, 0))
    own_ns: IntArray = np.maximum(end_ns - start_ns - children_ns, 0)
    return own_ns
