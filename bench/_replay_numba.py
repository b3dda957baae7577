"""The replay's longest-path loop compiled by numba, for ``whatif_replay.py --fixes --numba``
only: what a compiled loop would save, measured beside the pure-Python one (perfledger does
not use numba; bench/README.md, "Why not numba"). numba is not a project dependency: install
it into a folder of its own and put that folder on PYTHONPATH for the run."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba import njit  # type: ignore[import-not-found]

from perfledger.analysis.graph_codes import FREE
from perfledger.analysis.replay import AWAITED, CHAIN, LAUNCHED, RELEASE, WAITED, WOKEN

Int64Array = np.ndarray


@njit(cache=False)  # type: ignore[untyped-decorator]
def _kernel(
    pred: Any,
    delay: Any,
    launch_src: Any,
    launch_delay: Any,
    release: Any,
    dur: Any,
    observed: Any,
    wake_src: Any,
    wake_delay: Any,
    ev_ptr: Any,
    ev_src: Any,
    ev_gap: Any,
    wt_ptr: Any,
    wt_src: Any,
    tr_ready: Any,
    tr_size: Any,
    has_tr: Any,
) -> Any:
    n = dur.size
    start = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    via = np.full(n, -1, np.int64)
    how = np.zeros(n, np.int8)
    for v in range(n):
        s = release[v]
        by = -1
        kind = RELEASE
        p = pred[v]
        if p >= 0:
            t = end[p] + delay[v]
            if t > s:
                s, by, kind = t, p, CHAIN
        q = launch_src[v]
        if q >= 0:
            t = start[q] + launch_delay[v]
            if t > s:
                s, by, kind = t, q, LAUNCHED
        w = wake_src[v]
        if w >= 0:
            t = start[w] + wake_delay[v]
            if t > s:
                s, by, kind = t, w, WOKEN
        for i in range(ev_ptr[v], ev_ptr[v + 1]):
            t = end[ev_src[i]] + ev_gap[i]
            if t > s:
                s, by, kind = t, ev_src[i], AWAITED
        for i in range(wt_ptr[v], wt_ptr[v + 1]):
            t = end[wt_src[i]]
            if t > s:
                s, by, kind = t, wt_src[i], WAITED
        if s == FREE:
            s = observed[v]
        start[v] = s
        end[v] = max(s, tr_ready[v]) + tr_size[v] if has_tr[v] else s + dur[v]
        via[v] = by
        how[v] = kind
    return start, end, via, how


def _csr(n: int, table: dict[int, list[Any]], pairs: bool) -> tuple[Any, Any, Any]:
    counts = np.zeros(n + 1, dtype=np.int64)
    src: list[int] = []
    gap: list[int] = []
    for v in sorted(table):  # the few nodes with such edges
        counts[v + 1] = len(table[v])
        for item in table[v]:
            src.append(item[0] if pairs else item)
            gap.append(item[1] if pairs else 0)
    return np.cumsum(counts), np.asarray(src, np.int64), np.asarray(gap, np.int64)


def compiled_schedule(*args: Any) -> tuple[Any, Any, Any, Any]:
    """:func:`perfledger.analysis.replay._schedule`'s arguments in, its results out (as
    arrays), the loop run by the compiled kernel; the lists made arrays first."""
    pred, delay, launch_src, launch_delay, release, dur, observed = (
        np.asarray(a, dtype=np.int64) for a in args[:7]
    )
    waits, wakes, events, transfers = args[7:]
    n = dur.size
    wake_src = np.full(n, -1, np.int64)
    wake_delay = np.zeros(n, np.int64)
    for v, (w, d) in wakes.items():
        wake_src[v], wake_delay[v] = w, d
    ev_ptr, ev_src, ev_gap = _csr(n, events, True)
    wt_ptr, wt_src, _ = _csr(n, waits, False)
    tr_ready = np.zeros(n, np.int64)
    tr_size = np.zeros(n, np.int64)
    has_tr = np.zeros(n, np.bool_)
    for v, (ready, size) in transfers.items():
        tr_ready[v], tr_size[v], has_tr[v] = ready, size, True
    result: tuple[Any, Any, Any, Any] = _kernel(
        pred,
        delay,
        launch_src,
        launch_delay,
        release,
        dur,
        observed,
        wake_src,
        wake_delay,
        ev_ptr,
        ev_src,
        ev_gap,
        wt_ptr,
        wt_src,
        tr_ready,
        tr_size,
        has_tr,
    )
    return result


def compile_seconds() -> float:
    """The JIT compile of the kernel (its first call, on a graph of two nodes)."""
    started = time.perf_counter()
    compiled_schedule([-1, 0], [0, 0], [-1, -1], [0, 0], [0, FREE], [1, 1], [0, 0], {}, {}, {}, {})
    return time.perf_counter() - started
