"""The step graph's task nodes (:func:`task_part`: stream chains, event edges, launch
delays, classes) and the helpers the host nodes share: chains of nodes on a thread or a
stream, and indices of event rows (:mod:`perfledger.analysis.graph`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns, opclass
from perfledger.analysis.graph_codes import (
    CLASS_CODE,
    COMMUNICATION,
    COPIES,
    FREE,
    OTHER,
    QUEUED_GAP_NS,
)
from perfledger.analysis.graph_waits import event_edges, host_ops, is_kind, unique_pairs
from perfledger.analysis.intervals import Int64Array
from perfledger.model import schema, vendors

_BoolArray = npt.NDArray[np.bool_]


class RowIndex:
    """Rows of the events (each once) -> a value each (their position by default), -1 else."""

    def __init__(self, rows: Int64Array, values: Int64Array | None = None) -> None:
        order = np.argsort(rows, kind="stable")
        self.rows = rows[order]
        self.values = order if values is None else values[order]

    def __call__(self, rows: Int64Array) -> Int64Array:
        if self.rows.size == 0:
            return np.full(rows.size, -1, dtype=np.int64)
        at = np.clip(np.searchsorted(self.rows, rows), 0, self.rows.size - 1)
        return np.where(self.rows[at] == rows, self.values[at], -1).astype(np.int64)


def running_max(values: Int64Array, same_as_previous: _BoolArray) -> Int64Array:
    """The running maximum of ``values``, restarted where a row starts a new group."""
    if values.size == 0:
        return values
    group = np.cumsum(~same_as_previous)
    low = int(values.min())
    span = int(values.max()) - low + 1
    shifted = (values - low) + group * span
    return np.asarray(np.maximum.accumulate(shifted) - group * span + low, dtype=np.int64)


def chain(
    chain: Int64Array, start: Int64Array, dur: Int64Array, *, pin_first: bool
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """For nodes sorted by (chain, start): each one's predecessor, the delay from its end, and
    the release (the observed start for the first node of a chain when ``pin_first``)."""
    size = chain.size
    pred = np.full(size, -1, dtype=np.int64)
    delay = np.zeros(size, dtype=np.int64)
    release = np.full(size, FREE, dtype=np.int64)
    if size == 0:
        return pred, delay, release
    same = np.zeros(size, dtype=bool)
    same[1:] = chain[1:] == chain[:-1]
    index = np.arange(size)
    pred[same] = index[same] - 1
    delay[same] = start[same] - (start + dur)[index[same] - 1]
    if pin_first:
        release[~same] = start[~same]
    return pred, delay, release


def task_part(
    events: pa.Table,
    host: _BoolArray,
    device: Int64Array,
    start: Int64Array,
    end: Int64Array,
    correlation: Int64Array,
    task_rows: Int64Array,
    launch_of_task: Int64Array,
) -> tuple[dict[str, np.ndarray], int, RowIndex]:
    """The task nodes (:func:`_task_nodes`) with their event edges, the edges the trace's
    times contradict, and the index of the tasks' rows."""
    src, dst, contradicted = event_edges(
        events, host, device, start, end, correlation, task_rows, launch_of_task
    )
    index_of = RowIndex(task_rows)
    block = _task_nodes(
        events, device, start, end, task_rows, launch_of_task, index_of(src), index_of(dst)
    )
    return block, contradicted, index_of


def _task_nodes(
    events: pa.Table,
    device: Int64Array,
    start: Int64Array,
    end: Int64Array,
    task_rows: Int64Array,
    launch_of_task: Int64Array,
    event_src: Int64Array,
    event_dst: Int64Array,
) -> dict[str, np.ndarray]:
    """The task nodes (in ``task_rows`` order): stream chains, event edges (``event_src`` ->
    ``event_dst``, indices into ``task_rows``), classes, and each launch's delay (the launch
    edges themselves need the host nodes: the caller's)."""
    size = task_rows.size
    stream = columns.int64_at(events, "stream", task_rows)
    t_start = start[task_rows]
    t_dur = end[task_rows] - t_start
    # the tasks' kinds and names, and the names of the host operators that launched them, as
    # codes into their distinct values: each test made once per distinct value
    kind_code, kinds = columns.codes_at(events, "kind", task_rows)
    host_op = host_ops(events, task_rows)
    launched = np.flatnonzero(host_op >= 0)
    name_code, names = columns.codes_at(
        events, "name", np.concatenate([task_rows, host_op[launched]])
    )
    host_code = np.full(size, len(names), dtype=np.int64)  # len(names): no host operator
    host_code[launched] = name_code[size:]
    name_code = name_code[:size]
    # a collective's kernel by its name: the pattern tried once per distinct name
    comm_named = np.array(
        [n is not None and vendors.COMM_KERNEL.search(n) is not None for n in names] or [False]
    )[name_code]
    is_comm = is_kind(kinds, kind_code, schema.COMM) | comm_named
    is_copy = is_kind(kinds, kind_code, schema.MEMCPY, schema.MEMSET)
    is_kernel = is_kind(kinds, kind_code, schema.KERNEL) & ~is_comm
    lane_key = unique_pairs(device[task_rows], stream)[1]
    order = np.lexsort((task_rows, t_start, lane_key))
    pred_sorted, _, _ = chain(lane_key[order], t_start[order], t_dur[order], pin_first=False)
    chain_pred = np.full(size, -1, dtype=np.int64)
    chain_pred[order] = np.where(pred_sorted >= 0, order[np.maximum(pred_sorted, 0)], -1)
    has_pred = chain_pred >= 0
    pred_end = np.where(has_pred, (t_start + t_dur)[np.maximum(chain_pred, 0)], FREE)
    stream_gap = np.where(has_pred, t_start - pred_end, 0)
    has_launch = launch_of_task >= 0
    launch_latency = np.where(has_launch, t_start - start[np.maximum(launch_of_task, 0)], 0)
    queued = has_pred & (stream_gap <= QUEUED_GAP_NS)
    t_end = t_start + t_dur
    waits_event = np.zeros(size, dtype=bool)
    waits_event[event_dst] = True
    bound = has_launch & ~queued
    plain = bound & ~waits_event
    typical_latency = (
        int(np.median(launch_latency[plain]))
        if plain.any()
        else int(np.median(launch_latency[bound]))
        if bound.any()
        else (int(np.median(launch_latency[has_launch])) if has_launch.any() else 0)
    )
    # a task that did not queue and whose awaited event came after its launch would have let
    # it start: the event's edge binds it (the latest awaited task when it waited for several)
    awaited_end = np.full(size, FREE, dtype=np.int64)
    np.maximum.at(awaited_end, event_dst, t_end[event_src])
    launch_ready = np.where(has_launch, t_start - launch_latency + typical_latency, FREE)
    event_bound = waits_event & ~queued & (awaited_end >= launch_ready)
    event_gap = t_start[event_dst] - t_end[event_src]
    binding_edge = event_bound[event_dst] & (t_end[event_src] == awaited_end[event_dst])
    typical_event_gap = int(np.median(event_gap[binding_edge])) if binding_edge.any() else 0
    event_delay = np.where(binding_edge, event_gap, np.minimum(event_gap, typical_event_gap))
    typical_gap = int(np.median(np.maximum(stream_gap[queued], 0))) if queued.any() else 0
    slack = queued | event_bound
    launch_delay = np.where(slack, np.minimum(launch_latency, typical_latency), launch_latency)
    chain_delay = np.where(queued, stream_gap, np.minimum(stream_gap, typical_gap))
    release = np.where(~has_launch & ~slack, t_start, FREE)

    # lanes for --overlap-comm: communication beside the rest of its stream
    split_key = lane_key * 2 + is_comm
    order2 = np.lexsort((task_rows, t_start, split_key))
    pred2_sorted, _, _ = chain(split_key[order2], t_start[order2], t_dur[order2], pin_first=False)
    lane_pred = np.full(size, -1, dtype=np.int64)
    lane_pred[order2] = np.where(pred2_sorted >= 0, order2[np.maximum(pred2_sorted, 0)], -1)
    lane_delay = np.where(lane_pred == chain_pred, chain_delay, np.maximum(chain_delay, 0))

    named = np.asarray([*names, None], dtype=object)  # the last: no host operator
    host_name = named[host_code]
    codes = np.full(size, CLASS_CODE[OTHER], dtype=np.int64)
    codes[is_copy] = CLASS_CODE[COPIES]
    codes[is_comm] = CLASS_CODE[COMMUNICATION]
    rest = np.flatnonzero(~is_copy & ~is_comm)
    if rest.size:
        # a class per distinct (name, kind, host operator), the triple as one integer
        triple = (name_code[rest] * (len(kinds) + 1) + kind_code[rest]) * (len(names) + 1)
        distinct, inverse = np.unique(triple + host_code[rest], return_inverse=True)
        pair, host_of = np.divmod(distinct, len(names) + 1)
        name_of, kind_of = np.divmod(pair, len(kinds) + 1)
        classes = [
            _class_code(opclass.op_class(str(named[n]), str(kinds[k]), _text(named[h])))
            for n, k, h in zip(name_of.tolist(), kind_of.tolist(), host_of.tolist(), strict=True)
        ]
        codes[rest] = np.asarray(classes, dtype=np.int64)[inverse.reshape(-1)]
    return {
        "chain_pred": chain_pred,
        "chain_delay": chain_delay,
        "lane_pred": lane_pred,
        "lane_delay": lane_delay,
        "release": release,
        "launch_delay": launch_delay,
        "node_class": codes,
        "is_kernel": is_kernel,
        "is_comm": is_comm,
        "is_copy": is_copy,
        "host_name": host_name,
        "event_src": event_src,
        "event_dst": event_dst,
        "event_delay": np.asarray(event_delay, dtype=np.int64),
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _class_code(op_class: str) -> int:
    """The graph's class code of an operator class (:func:`opclass.op_class`)."""
    if op_class == opclass.COMMUNICATION:
        return CLASS_CODE[COMMUNICATION]
    if op_class in (opclass.MEMCPY, opclass.MEMSET):
        return CLASS_CODE[COPIES]
    return CLASS_CODE[f"compute:{op_class}"]
