"""A step graph's columns as the replay's longest-path loop reads them: plain lists, and the
few edges of the full path by node.

Made once per graph (``StepGraph.plain``) and shared by every replay of it: a change rebuilds
only the columns it changes, and a column it changes in a few nodes is the graph's list with
those items replaced (:func:`patched`) rather than a whole array turned into a list again.
The columns of node indices (chain predecessors, launch calls), a distinct value per node, are
C arrays of 8 bytes a node (:func:`c_array`) rather than lists of as many int objects: the
loop reads them one item at a time just as fast.
"""

from __future__ import annotations

from array import array
from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfledger.analysis.intervals import Int64Array

if TYPE_CHECKING:
    from perfledger.analysis.graph import StepGraph

# A column of the loop: a list, or a C array of node indices.
IntColumn = MutableSequence[int]


@dataclass(frozen=True)
class PlainColumns:
    """The columns of a graph the loop reads unchanged by most changes, as lists (node
    order), and its synchronisation waits, wake-ups and event edges by node."""

    chain_pred: IntColumn
    chain_delay: list[int]
    launch_src: IntColumn
    launch_delay: list[int]
    release: list[int]
    dur: list[int]
    waits: dict[int, list[int]]
    wakes: dict[int, tuple[int, int]]
    events: dict[int, list[tuple[int, int]]]

    @staticmethod
    def of(graph: StepGraph) -> PlainColumns:
        """The plain columns of ``graph``."""
        return PlainColumns(
            c_array(graph.chain_pred),
            shared_values(graph.chain_delay),
            c_array(graph.launch_src),
            shared_values(graph.launch_delay),
            shared_values(graph.release),
            shared_values(graph.dur),
            waits_by_node(graph.wait_src, graph.wait_dst),
            {
                v: (int(graph.wake_src[v]), int(graph.wake_delay[v]))
                for v in np.flatnonzero(graph.wake_src >= 0).tolist()
            },
            events_by_node(graph.event_src, graph.event_dst, graph.event_delay),
        )


def c_array(column: Int64Array) -> array[int]:
    """``column`` as a C array of int64: 8 bytes an item, read one item at a time (copied
    straight from the column's buffer, without an intermediate bytes object)."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(column, dtype=np.int64).data.cast("B"))
    return out


def shared_values(column: Int64Array) -> list[int]:
    """``column`` as a list whose equal items are one object where it holds few distinct
    values (delays, durations, releases: a few hundred over 400k nodes): a pointer per node
    rather than an int object each."""
    values, inverse = np.unique(column, return_inverse=True)
    if values.size * 4 > column.size:
        return list(column.tolist())
    return list(map(values.tolist().__getitem__, inverse.reshape(-1).tolist()))


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
    when ``new`` is ``old``, a copy of the list with the changed items replaced when few
    changed, else ``new`` as a C array (:func:`c_array`: a copy of its bytes, rather than an
    int object per node)."""
    if new is old:
        return base
    if isinstance(base, array):
        return c_array(new)
    changed = np.flatnonzero(new != old)
    if changed.size * 4 > new.size:
        return c_array(new)
    out = list(base)
    for i, value in zip(changed.tolist(), new[changed].tolist(), strict=True):  # the changed
        out[i] = value
    return out
