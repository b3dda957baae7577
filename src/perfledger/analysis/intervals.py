"""Interval algebra on integer nanoseconds, vectorised with numpy.

A set of intervals is kept as an :class:`IntervalSet`: disjoint, sorted, half-open [start, end)
runs with prefix sums of their lengths, so the covered length of any window is two binary
searches away. Every figure of the time account is built from these measures.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class IntervalSet:
    """Disjoint, sorted half-open intervals.

    Attributes:
        starts, ends: the runs, sorted, ``starts[i] < ends[i] < starts[i + 1]`` (touching
            intervals are merged into one run).
        first: for each run, the index (into the arrays given to :func:`union`) of the interval
            that opens it (the earliest start; the lowest index among equal starts).
        cumulative: ``cumulative[i]`` is the total length of runs ``0 .. i-1``.
    """

    starts: Int64Array
    ends: Int64Array
    first: Int64Array
    cumulative: Int64Array

    @property
    def total(self) -> int:
        """Total covered length."""
        return int(self.cumulative[-1])

    def __len__(self) -> int:
        return int(self.starts.size)

    def covered(self, window_starts: Int64Array, window_ends: Int64Array) -> Int64Array:
        """Length of this set inside each window [a, b) (vectorised over windows)."""
        a = np.asarray(window_starts, dtype=np.int64)
        b = np.asarray(window_ends, dtype=np.int64)
        out = np.zeros(a.shape, dtype=np.int64)
        if self.starts.size == 0:
            return out
        # runs overlapping [a, b): from the first whose end > a to the last whose start < b
        lo = np.searchsorted(self.ends, a, side="right")
        hi = np.searchsorted(self.starts, b, side="left")
        some = (hi > lo) & (b > a)
        lo_s, hi_s = lo[some], hi[some]
        full = self.cumulative[hi_s] - self.cumulative[lo_s]
        head_cut = np.maximum(a[some] - self.starts[lo_s], 0)
        tail_cut = np.maximum(self.ends[hi_s - 1] - b[some], 0)
        out[some] = full - head_cut - tail_cut
        return out

    def contains(self, points: Int64Array, *, closed_end: bool = False) -> npt.NDArray[np.bool_]:
        """Whether each point lies inside a run ([start, end), or [start, end] if closed_end)."""
        p = np.asarray(points, dtype=np.int64)
        if self.starts.size == 0:
            return np.zeros(p.shape, dtype=bool)
        i = np.searchsorted(self.starts, p, side="right") - 1
        valid = i >= 0
        i_c = np.clip(i, 0, None)
        end = self.ends[i_c]
        inside = p <= end if closed_end else p < end
        return valid & inside


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> IntervalSet:
    """The union of intervals [starts[i], ends[i]); empty intervals are ignored."""
    s_all = np.asarray(starts, dtype=np.int64)
    e_all = np.asarray(ends, dtype=np.int64)
    # starts in order (rows of a table sorted by start): the runs in one compiled pass
    ordered = _ordered_union(s_all, e_all)
    if ordered is not None:
        return ordered
    keep = np.flatnonzero(e_all > s_all)
    if keep.size == 0:
        return _empty()
    # by start, ties in index order: a stable sort (fast on starts that come almost in order)
    order = keep[np.argsort(s_all[keep], kind="stable")]
    s = s_all[order]
    e = e_all[order]
    reach = np.maximum.accumulate(e)
    opens = np.empty(s.size, dtype=bool)
    opens[0] = True
    opens[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(opens)
    run_starts = s[heads]
    tails = np.append(heads[1:], s.size) - 1
    run_ends = reach[tails]
    cumulative = np.zeros(heads.size + 1, dtype=np.int64)
    np.cumsum(run_ends - run_starts, out=cumulative[1:])
    return IntervalSet(run_starts, run_ends, order[heads].astype(np.int64), cumulative)


def _empty() -> IntervalSet:
    empty = np.zeros(0, dtype=np.int64)
    return IntervalSet(empty, empty, empty, np.zeros(1, dtype=np.int64))


def _ordered_union(starts: Int64Array, ends: Int64Array) -> IntervalSet | None:
    """:func:`union` by the compiled pass where the starts of the intervals of positive length
    come in order (what the numpy passes give then: no sort needed); None where they do not,
    or the pass was not built."""
    if _union_runs is None or starts.ndim != 1 or starts.shape != ends.shape:
        return None
    starts, ends = np.ascontiguousarray(starts), np.ascontiguousarray(ends)
    runs = _union_runs(starts, ends, None, None, None, None)
    if runs < 0:
        return None
    if runs == 0:
        return _empty()
    run_starts, run_ends, first = (np.empty(runs, dtype=np.int64) for _ in range(3))
    cumulative = np.empty(runs + 1, dtype=np.int64)
    _union_runs(starts, ends, run_starts, run_ends, first, cumulative)
    return IntervalSet(run_starts, run_ends, first, cumulative)


def merge(*sets: IntervalSet) -> IntervalSet:
    """The union of several interval sets (``first`` indices are not meaningful afterwards)."""
    return union(np.concatenate([s.starts for s in sets]), np.concatenate([s.ends for s in sets]))


def hull(starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[int, int] | None:
    """The smallest interval holding all the given ones, or None when there are none."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if s.size == 0:
        return None
    return int(s.min()), int(e.max())


def compiled_function(name: str) -> Callable[..., Any] | None:
    """The function ``name`` of the compiled module ``_columns`` (``_columns.c``), or None
    where it was not built."""
    try:
        module = importlib.import_module("perfledger.analysis._columns")
    except ImportError:
        return None
    function: Callable[..., Any] | None = getattr(module, name, None)
    return function


_laminar = compiled_function("laminar")
_union_runs = compiled_function("union_runs")


def compiled_laminar(start: Int64Array, end: Int64Array) -> bool | None:
    """Whether the intervals are laminar and come in the order a thread's slices do (by
    start, longer first; zero-length ones anywhere), by the compiled pass: one pass with a
    stack of the open ones. False where they cross or come in another order (then only
    :func:`crossing_intervals`' passes tell); None where the pass was not built."""
    if _laminar is None:
        return None
    return bool(
        _laminar(np.ascontiguousarray(start, np.int64), np.ascontiguousarray(end, np.int64))
    )


def crossing_intervals(start: Int64Array, end: Int64Array) -> BoolArray:
    """Intervals to take out so that the others are laminar (nested or disjoint): on one
    thread, the slices that overlap another without nesting in it."""
    out = np.zeros(start.size, dtype=bool)
    if compiled_laminar(start, end):  # the usual thread: none to take out, no pass needed
        return out
    rows = np.flatnonzero(end > start)
    rounds = 0
    while rows.size > 1:
        true_crossing, unsure = _violations(start[rows], end[rows])
        # The first crossing in start order is always a true one; after a few rounds also
        # drop the intervals only suspected, so that the loop ends quickly on odd tracks.
        drop = true_crossing | unsure if rounds >= 8 else true_crossing
        if not drop.any():
            break
        out[rows[drop]] = True
        rows = rows[~drop]
        rounds += 1
    return out


def _violations(start: Int64Array, end: Int64Array) -> tuple[BoolArray, BoolArray]:
    """Intervals (all of positive length) that cross their parent, vectorised.

    In start order (longer first on ties), the depth of interval i is the number of
    intervals open at its start, itself included; in a laminar prefix its parent is the
    last earlier interval one level up. Interval i crosses when it outlives an open parent;
    it is ``unsure`` when that parent is already closed (a crossing happened before it).
    """
    n = start.size
    # a track's slices come in start order, longer first on ties, as a rule: sorted only if not
    ahead = (start[1:] > start[:-1]) | ((start[1:] == start[:-1]) & (end[1:] <= end[:-1]))
    order = None if bool(ahead.all()) else np.lexsort((-end, start))
    s = start if order is None else start[order]
    e = end if order is None else end[order]
    # the ends sorted: nested slices' ends come partly in order, a stable sort's runs
    closed = np.searchsorted(np.sort(e, kind="stable"), s, side="right")
    depth = np.arange(1, n + 1, dtype=np.int64) - closed
    stride = np.int64(n + 1)
    # the intervals by (depth, position): a stable sort by depth, a radix sort while the
    # depths fit in 16 bits
    narrow = depth.astype(np.uint16) if n and int(depth.max()) < 1 << 16 else depth
    by_depth = np.argsort(narrow, kind="stable")
    key_sorted = depth[by_depth] * stride + by_depth
    # the last interval before each one, one level up (the keys before (depth - 1, position))
    before = np.searchsorted(key_sorted, key_sorted - stride, side="left") - 1
    pos = np.empty(n, dtype=np.int64)
    pos[by_depth] = before
    nested = depth >= 2
    parent = by_depth[np.clip(pos, 0, n - 1)]
    found = nested & (pos >= 0) & (depth[parent] == depth - 1)
    parent_end = e[parent]
    open_parent = found & (parent_end > s)
    true_crossing = open_parent & (e > parent_end)
    unsure = nested & ~open_parent
    if order is None:
        return true_crossing, unsure
    result_true = np.zeros(n, dtype=bool)
    result_unsure = np.zeros(n, dtype=bool)
    result_true[order] = true_crossing
    result_unsure[order] = unsure
    return result_true, result_unsure
