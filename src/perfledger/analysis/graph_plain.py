"""A step graph's columns as the replay's longest-path walk reads them: C arrays of int64
(8 bytes a node), and the few edges of the full path by node.

Made once per graph (``StepGraph.plain``) and shared by every replay of it: a change rebuilds
only the columns it changes (:func:`patched`). The compiled walk (``_schedule.c``) reads the
arrays' buffers as they are, without a conversion per replay; the Python loop, where the walk
was not built, reads them one item at a time (11–16 % slower than from lists of shared int
objects, which took as many bytes a node but had to be converted for the compiled walk at
every replay: more than half its time).
"""

from __future__ import annotations

from array import array
from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfledger.analysis.intervals import Int64Array

if TYPE_CHECKING:
    from perfledger.analysis.graph import StepGraph

# A column of the loop: a C array (any sequence of ints for the Python loop).
IntColumn = MutableSequence[int]


class NodeEdges(dict[int, Any]):
    """A graph's edges by node (a dict, as the Python loop reads them) that also keeps them
    as the compiled walk reads them, made once with the graph's columns rather than from the
    dict at every replay: ``rows`` is (node count, where each node's edges begin (count + 1
    offsets), their sources, their gaps), each node's edges in its own order (for wake-ups:
    (node count, each node's source or -1, its gap)); None where not made."""

    rows: tuple[Any, ...] | None = None


def compressed_rows(
    n: int, dst: Int64Array, src: Int64Array, gap: Int64Array
) -> tuple[int, Int64Array, Int64Array, Int64Array] | None:
    """Edges ``src`` -> ``dst`` (with their ``gap``) as compressed rows of ``n`` nodes, each
    node's edges in their order here; None where a destination is not a node."""
    dst = np.asarray(dst, dtype=np.int64)
    if dst.size and (int(dst.min()) < 0 or int(dst.max()) >= n):
        return None
    order = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    return (
        n,
        ptr,
        np.ascontiguousarray(np.asarray(src, dtype=np.int64)[order]),
        np.ascontiguousarray(np.asarray(gap, dtype=np.int64)[order]),
    )


@dataclass(frozen=True)
class PlainColumns:
    """The columns of a graph the loop reads unchanged by most changes, as C arrays (node
    order), and its synchronisation waits, wake-ups and event edges by node."""

    chain_pred: array[int]
    chain_delay: array[int]
    launch_src: array[int]
    launch_delay: array[int]
    release: array[int]
    dur: array[int]
    waits: NodeEdges  # node -> the tasks it waits for
    wakes: NodeEdges  # node -> (the call that woke it, the gap)
    events: NodeEdges  # node -> [(an awaited task, the gap)]

    @staticmethod
    def of(graph: StepGraph) -> PlainColumns:
        """The plain columns of ``graph``."""
        n = graph.size
        waits = NodeEdges(waits_by_node(graph.wait_src, graph.wait_dst))
        waits.rows = compressed_rows(
            n, graph.wait_dst, graph.wait_src, np.zeros(graph.wait_src.size, dtype=np.int64)
        )
        woken = graph.wake_src >= 0
        wakes = NodeEdges(
            {
                v: (int(graph.wake_src[v]), int(graph.wake_delay[v]))
                for v in np.flatnonzero(woken).tolist()
            }
        )
        if graph.wake_src.size == n and bool((graph.wake_src[woken] < n).all()):
            wakes.rows = (
                n,
                np.where(woken, graph.wake_src, -1).astype(np.int64),
                np.where(woken, graph.wake_delay, 0).astype(np.int64),
            )
        events = NodeEdges(events_by_node(graph.event_src, graph.event_dst, graph.event_delay))
        events.rows = compressed_rows(n, graph.event_dst, graph.event_src, graph.event_delay)
        return PlainColumns(
            c_array(graph.chain_pred),
            c_array(graph.chain_delay),
            c_array(graph.launch_src),
            c_array(graph.launch_delay),
            c_array(graph.release),
            c_array(graph.dur),
            waits,
            wakes,
            events,
        )


def c_array(column: Int64Array) -> array[int]:
    """``column`` as a C array of int64: 8 bytes an item, read one item at a time (copied
    straight from the column's buffer, without an intermediate bytes object)."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(column, dtype=np.int64).data.cast("B"))
    return out


def waits_by_node(src: Int64Array, dst: Int64Array) -> dict[int, list[int]]:
    """The tasks each synchronisation wait node waits for."""
    waits: dict[int, list[int]] = {}
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):  # the graph's few waits
        waits.setdefault(d, []).append(s)
    return waits


def events_by_node(
    src: Int64Array, dst: Int64Array, delay: Int64Array
) -> dict[int, list[tuple[int, int]]]:
    """The awaited tasks (and the edge's delay) of each task that waited for an event."""
    events: dict[int, list[tuple[int, int]]] = {}
    for s, d, gap in zip(src.tolist(), dst.tolist(), delay.tolist(), strict=True):
        events.setdefault(d, []).append((s, gap))
    return events


def patched(base: IntColumn, old: Int64Array, new: Int64Array) -> IntColumn:
    """``new`` as a column of the loop, given ``base``, the column of ``old``: ``base`` itself
    when ``new`` is ``old``, else ``new`` as a C array (:func:`c_array`)."""
    return base if new is old else c_array(new)
