"""Where host events between two nodes of a thread go when the gap between them is replayed
longer or shorter: the thread's wait keeps its length, its work scales."""

from __future__ import annotations

import numpy as np

from perfledger.analysis.graph import StepGraph
from perfledger.analysis.graph_codes import SYNC_WAIT
from perfledger.analysis.intervals import Int64Array


def thread_wait(graph: StepGraph, node: Int64Array, following: Int64Array) -> Int64Array:
    """Of the gap between host ``node`` and the ``following`` node of its thread, the time
    the thread waited (its chain delay's part that is not the thread's work): 0 where the
    following node is not the next of the node's chain or is the end of a synchronisation's
    wait (a time of the device's, not of the thread's)."""
    # the nodes' ends from their starts and lengths: graph.end adds every node's
    gap = graph.start[following] - (graph.start[node] + graph.dur[node])
    chained = (graph.chain_pred[following] == node) & (graph.kind[following] != SYNC_WAIT)
    return np.asarray(np.where(chained, np.clip(gap - graph.chain_busy[following], 0, None), 0))


def gap_offset(
    offset: Int64Array, new_len: Int64Array, old_len: Int64Array, wait: Int64Array
) -> Int64Array:
    """A time ``offset`` into a gap of a host thread between two of its nodes, replayed. The
    thread's wait in the gap (``wait``: the profiler writing its trace between two recorded
    steps, a wait for another thread) keeps its length and comes first; its work, after it,
    takes the rest of the replayed gap, in proportion. Without a wait, or where the replayed
    gap is shorter than the wait, the offset scales with the gap (:func:`scaled_offset`)."""
    scaled = scaled_offset(offset, new_len, old_len)
    work = old_len - wait
    ratio = np.where(work > 0, (new_len - wait) / np.maximum(work, 1), 1.0)
    kept = np.minimum(offset, wait) + np.rint(np.clip(offset - wait, 0, None) * ratio)
    return np.asarray(np.where((wait > 0) & (new_len >= wait), kept, scaled), np.int64)


def scaled_offset(offset: Int64Array, new_len: Int64Array, old_len: Int64Array) -> Int64Array:
    """``offset`` scaled by new_len / old_len (offset kept where old_len is 0)."""
    ratio = np.where(old_len > 0, new_len / np.maximum(old_len, 1), 1.0)
    return np.asarray(np.rint(np.minimum(offset, np.maximum(old_len, offset)) * ratio), np.int64)
