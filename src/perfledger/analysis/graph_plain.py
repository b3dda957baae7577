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
from collections.abc import Callable, Iterator, Mapping, MutableSequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfledger.analysis.intervals import Int64Array

if TYPE_CHECKING:
    from perfledger.analysis.graph import StepGraph

# A column of the loop: a C array (any sequence of ints for the Python loop).
IntColumn = MutableSequence[int]


class NodeEdges(Mapping[int, Any]):
    """A graph's edges by node as the compiled walk reads them (``rows``: (node count, where
    each node's edges begin (count + 1 offsets), their sources, their gaps), each node's
    edges in its own order; for wake-ups: (node count, each node's source or -1, its gap);
    None where not made), and as a dict by node for the Python loop, made by ``make`` on
    its first read only: where the compiled walk is built, a replay reads the rows alone (by
    hand, a dict of 56,560 event edges, as many as the 1.5 GB bench trace's graph has, takes
    0.036 s to make and 14 MB to hold: once per graph, and again for each replay that
    overlaps the communication)."""

    def __init__(self, rows: tuple[Any, ...] | None, make: Callable[[], dict[int, Any]]) -> None:
        self.rows = rows
        self._make = make
        self._table: dict[int, Any] | None = None

    def _by_node(self) -> dict[int, Any]:
        table = self._table
        if table is None:  # two threads may both make it: the same dict either way
            table = self._table = self._make()
        return table

    def __getitem__(self, node: int) -> Any:
        return self._by_node()[node]

    def get(self, node: int, default: Any = None) -> Any:
        return self._by_node().get(node, default)

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_node())

    def __len__(self) -> int:
        return len(self._by_node())

    def nodes(self) -> Int64Array:
        """The nodes that have edges, from ``rows`` where made."""
        if self.rows is None:
            return np.fromiter(self._by_node(), dtype=np.int64)
        if len(self.rows) == 3:  # wake-ups: a source per node
            return np.flatnonzero(np.asarray(self.rows[1]) >= 0)
        return np.flatnonzero(np.diff(self.rows[1]) > 0)


def edge_nodes(*tables: Mapping[int, Any]) -> Int64Array:
    """The nodes that have edges in any of ``tables`` (each a node's at least once)."""
    parts = [
        table.nodes() if isinstance(table, NodeEdges) else np.fromiter(table, dtype=np.int64)
        for table in tables
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def event_edges(n: int, src: Int64Array, dst: Int64Array, delay: Int64Array) -> NodeEdges:
    """Event edges ``src`` -> ``dst`` (with their delays) of a graph of ``n`` nodes."""
    return NodeEdges(compressed_rows(n, dst, src, delay), lambda: events_by_node(src, dst, delay))


def wait_edges(n: int, src: Int64Array, dst: Int64Array) -> NodeEdges:
    """Synchronisation waits ``src`` -> ``dst`` of a graph of ``n`` nodes."""
    return NodeEdges(
        compressed_rows(n, dst, src, np.zeros(src.size, dtype=np.int64)),
        lambda: waits_by_node(src, dst),
    )


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
        waits = wait_edges(n, graph.wait_src, graph.wait_dst)
        woken = graph.wake_src >= 0
        wake_src, wake_delay = graph.wake_src, graph.wake_delay
        rows = None
        if wake_src.size == n and bool((wake_src[woken] < n).all()):
            rows = (
                n,
                np.where(woken, wake_src, -1).astype(np.int64),
                np.where(woken, wake_delay, 0).astype(np.int64),
            )
        wakes = NodeEdges(
            rows,
            lambda: {
                v: (int(wake_src[v]), int(wake_delay[v]))
                for v in np.flatnonzero(wake_src >= 0).tolist()
            },
        )
        events = event_edges(n, graph.event_src, graph.event_dst, graph.event_delay)
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
