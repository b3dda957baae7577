"""The time account of every step: device busy time by category and idle time by cause.

The definitions are DESIGN.md's ("Time accounting"), implemented exactly and in integer ns:

- every instant of a window is compute > communication > memcpy > memset > idle, by priority,
  with busy time the union over all streams of a device;
- each idle gap is attributed to the first matching cause: launch_latency (the task that ends
  the gap was already issued when the device went idle), sync (a host synchronisation call was
  running when the device went idle), dataloader (the host spent at least half of the wait in
  the data loader), host_dispatch (anything else on the host), other (no task ends the gap inside
  the window, or its launch is unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.intervals import Int64Array, IntervalSet, hull, merge, union
from perfledger.analysis.steps import launch_starts, step_annotations
from perfledger.model import schema, vendors
from perfledger.model.accounts import (
    GAPS_SCHEMA,
    IDLE_CAUSES,
    IDLE_DATALOADER,
    IDLE_HOST_DISPATCH,
    IDLE_LAUNCH_LATENCY,
    IDLE_OTHER,
    IDLE_SYNC,
    Accounting,
    HostWindowAccount,
    StepWindow,
    WindowAccount,
)
from perfledger.model.schema import SPAN_STEP

_CAUSE_CODE = {cause: code for code, cause in enumerate(IDLE_CAUSES)}


@dataclass(frozen=True)
class _HostActivity:
    """The host-side interval sets that idle attribution consults."""

    sync: IntervalSet
    dataloader: IntervalSet


@dataclass(frozen=True)
class _DeviceTasks:
    """One device's tasks, as parallel arrays (rows index the events table)."""

    rows: Int64Array
    start: Int64Array
    end: Int64Array
    launch: Int64Array
    kind: np.ndarray  # int8: each task's kind, an index into schema.DEVICE_TASK_KINDS
    wait: Int64Array  # how long a communication task waited for peers at its start (else 0)

    def select(self, sel: np.ndarray) -> _DeviceTasks:
        return _DeviceTasks(
            self.rows[sel],
            self.start[sel],
            self.end[sel],
            self.launch[sel],
            self.kind[sel],
            self.wait[sel],
        )


def _host_activity(events: pa.Table) -> _HostActivity:
    device = columns.int64(events, "device")
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    host = device < 0
    is_sync = host & (
        columns.isin(events, "kind", [schema.SYNC])
        | (
            columns.isin(events, "kind", [schema.CPU_OP])
            & columns.isin(events, "name", vendors.HOST_SYNC_OPS)
        )
    )
    is_loader = host & columns.isin(events, "kind", [schema.DATALOADER])
    return _HostActivity(
        sync=union(start[is_sync], end[is_sync]),
        dataloader=union(start[is_loader], end[is_loader]),
    )


def _device_tasks(
    events: pa.Table, launches: Int64Array, comm_wait: Int64Array | None
) -> dict[int, _DeviceTasks]:
    is_task = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS)
    rows = np.flatnonzero(is_task)
    if rows.size == 0:
        return {}
    device = columns.int64_at(events, "device", rows)
    start = columns.int64_at(events, "start_ns", rows)
    end = start + columns.int64_at(events, "dur_ns", rows)
    # each task's kind as its index in DEVICE_TASK_KINDS: masks of codes, not of strings
    kind = np.zeros(rows.size, dtype=np.int8)
    for code, name in enumerate(schema.DEVICE_TASK_KINDS[1:], start=1):
        kind[columns.isin(events, "kind", [name])[rows]] = code
    launch = launches[rows]
    wait = comm_wait[rows] if comm_wait is not None else np.zeros(rows.size, dtype=np.int64)
    tasks = _DeviceTasks(rows, start, end, launch, kind, np.clip(wait, 0, end - start))
    return {int(d): tasks.select(device == d) for d in np.unique(device)}


def _window_rows(
    rank: int,
    device: int,
    steps: Sequence[int],
    window_starts: Int64Array,
    window_ends: Int64Array,
    tasks: _DeviceTasks,
    host: _HostActivity,
) -> tuple[list[WindowAccount], dict[str, np.ndarray]]:
    """Account one device over several non-overlapping windows; return rows and gap columns."""
    # each kind's tasks found once (a comparison over an object array per kind)
    of_kind = {kind: tasks.kind == code for code, kind in enumerate(schema.DEVICE_TASK_KINDS)}
    by_kind = {kind: union(tasks.start[rows], tasks.end[rows]) for kind, rows in of_kind.items()}
    compute = by_kind[schema.KERNEL]
    comm = by_kind[schema.COMM]
    up_to_comm = merge(compute, comm)
    up_to_memcpy = merge(up_to_comm, by_kind[schema.MEMCPY])
    # the union of all tasks keeps `first` pointing at the task that opens each busy run
    busy = union(tasks.start, tasks.end)

    c1 = compute.covered(window_starts, window_ends)
    c2 = up_to_comm.covered(window_starts, window_ends)
    c3 = up_to_memcpy.covered(window_starts, window_ends)
    c4 = busy.covered(window_starts, window_ends)
    comm_alone = comm.covered(window_starts, window_ends)
    # exposed communication in its transfer part (after the wait for peers) is transfer
    is_comm = of_kind[schema.COMM]
    transfer = union(tasks.start[is_comm] + tasks.wait[is_comm], tasks.end[is_comm])
    c_transfer = merge(compute, transfer).covered(window_starts, window_ends)

    gaps = _idle_gaps(window_starts, window_ends, busy, tasks, host)
    idle_by_cause = np.zeros((window_starts.size, len(IDLE_CAUSES)), dtype=np.int64)
    np.add.at(idle_by_cause, (gaps["window"], gaps["cause"]), gaps["end"] - gaps["start"])

    rows = []
    for i, step in enumerate(steps):
        wall = int(window_ends[i] - window_starts[i])
        account = WindowAccount(
            rank=rank,
            device=device,
            step=int(step),
            start_ns=int(window_starts[i]),
            end_ns=int(window_ends[i]),
            compute_ns=int(c1[i]),
            communication_ns=int(c2[i] - c1[i]),
            overlapped_communication_ns=int(c1[i] + comm_alone[i] - c2[i]),
            memcpy_ns=int(c3[i] - c2[i]),
            memset_ns=int(c4[i] - c3[i]),
            idle_ns=wall - int(c4[i]),
            idle_host_dispatch_ns=int(idle_by_cause[i, _CAUSE_CODE[IDLE_HOST_DISPATCH]]),
            idle_sync_ns=int(idle_by_cause[i, _CAUSE_CODE[IDLE_SYNC]]),
            idle_dataloader_ns=int(idle_by_cause[i, _CAUSE_CODE[IDLE_DATALOADER]]),
            idle_launch_latency_ns=int(idle_by_cause[i, _CAUSE_CODE[IDLE_LAUNCH_LATENCY]]),
            idle_other_ns=int(idle_by_cause[i, _CAUSE_CODE[IDLE_OTHER]]),
            communication_wait_ns=int(c2[i] - c1[i]) - int(c_transfer[i] - c1[i]),
            communication_transfer_ns=int(c_transfer[i] - c1[i]),
        )
        account.self_check()
        rows.append(account)
    return rows, gaps


def _idle_gaps(
    window_starts: Int64Array,
    window_ends: Int64Array,
    busy: IntervalSet,
    tasks: _DeviceTasks,
    host: _HostActivity,
) -> dict[str, np.ndarray]:
    """Every idle interval of the device inside the windows, with its cause.

    The complement of the busy runs is cut by the windows; a gap piece is ended by a task only
    when the busy run that follows it starts inside the same window.
    """
    # gaps of the busy set over the whole line: before the first run, between runs, after the last
    inf = np.iinfo(np.int64).max
    gap_starts = np.concatenate([[-inf], busy.ends])
    gap_ends = np.concatenate([busy.starts, [inf]])
    # the task opening the run that ends each gap (-1 for the final, unbounded gap)
    gap_task = np.concatenate([busy.first, [-1]])

    window_index: list[np.ndarray] = []
    piece_start: list[np.ndarray] = []
    piece_end: list[np.ndarray] = []
    piece_task: list[np.ndarray] = []
    for w, (a, b) in enumerate(zip(window_starts.tolist(), window_ends.tolist(), strict=True)):
        if b <= a:
            continue
        lo = np.searchsorted(gap_ends, a, side="right")
        hi = np.searchsorted(gap_starts, b, side="left")
        g0 = np.maximum(gap_starts[lo:hi], a)
        g1 = np.minimum(gap_ends[lo:hi], b)
        keep = g1 > g0
        ended_inside = gap_ends[lo:hi] < b
        task = np.where(ended_inside, gap_task[lo:hi], -1)
        window_index.append(np.full(int(keep.sum()), w, dtype=np.int64))
        piece_start.append(g0[keep])
        piece_end.append(g1[keep])
        piece_task.append(task[keep])

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    window = cat(window_index)
    g0, g1, task = cat(piece_start), cat(piece_end), cat(piece_task)
    has_task = task >= 0
    task_c = np.clip(task, 0, None)
    launch = np.where(has_task, tasks.launch[task_c] if tasks.launch.size else -1, -1)
    known = has_task & (launch >= 0)

    cause = np.full(g0.size, _CAUSE_CODE[IDLE_OTHER], dtype=np.int64)
    latency = known & (launch < g0)
    waiting = known & ~latency
    in_sync = host.sync.contains(g0, closed_end=True)
    loader_time = host.dataloader.covered(g0, np.maximum(launch, g0))
    in_loader = (launch > g0) & (2 * loader_time >= launch - g0)
    cause[latency] = _CAUSE_CODE[IDLE_LAUNCH_LATENCY]
    cause[waiting & in_sync] = _CAUSE_CODE[IDLE_SYNC]
    cause[waiting & ~in_sync & in_loader] = _CAUSE_CODE[IDLE_DATALOADER]
    cause[waiting & ~in_sync & ~in_loader] = _CAUSE_CODE[IDLE_HOST_DISPATCH]
    next_row = np.where(has_task, tasks.rows[task_c] if tasks.rows.size else -1, -1)
    return {
        "window": window,
        "start": g0,
        "end": g1,
        "cause": cause,
        "next_task": next_row,
        "launch": np.where(known, launch, -1),
    }


def _span(tasks: _DeviceTasks, cut_ns: int | None) -> tuple[_DeviceTasks, tuple[int, int] | None]:
    """The device's tasks counted in the whole-span row, and that span.

    With two or more step annotations only tasks issued before the last step began count: the
    profiler usually stops inside the last step, so its work is cut short.
    """
    if cut_ns is not None:
        issued = np.where(tasks.launch >= 0, tasks.launch, tasks.start)
        tasks = tasks.select(issued < cut_ns)
    return tasks, hull(tasks.start, tasks.end)


def device_accounting(
    events: pa.Table,
    windows: Sequence[StepWindow],
    launches: Int64Array | None = None,
    comm_wait: Int64Array | None = None,
) -> Accounting:
    """The device accounting of one rank: a row per (device, step) and per device span.

    Args:
        events: one rank's canonical events (``step`` column not needed).
        windows: the rank's step windows (:func:`perfledger.analysis.steps.step_windows`).
        launches: :func:`perfledger.analysis.steps.launch_starts` of ``events`` if computed.
        comm_wait: per row, how long a communication task waited for its peers at its start
            (:func:`perfledger.analysis.comm_split.comm_split`); None: no wait known, the
            exposed communication is all transfer.
    """
    if events.num_rows == 0:
        return Accounting(windows=(), gaps=GAPS_SCHEMA.empty_table())
    rank = int(events.column("rank")[0].as_py())
    if launches is None:
        launches = launch_starts(events)
    devices = _device_tasks(events, launches, comm_wait)
    host = _host_activity(events)
    annotations = step_annotations(events)
    cut_ns = annotations[-1][1] if len(annotations) >= 2 else None

    ordered = sorted(windows, key=lambda w: w.start_ns)
    steps = [w.step for w in ordered]
    w_starts = np.array([w.start_ns for w in ordered], dtype=np.int64)
    w_ends = np.array([w.end_ns for w in ordered], dtype=np.int64)

    accounts: list[WindowAccount] = []
    gap_tables: list[pa.Table] = []
    for device, tasks in sorted(devices.items()):
        rows, gaps = _window_rows(rank, device, steps, w_starts, w_ends, tasks, host)
        accounts.extend(rows)
        gap_tables.append(_gaps_table(rank, device, np.asarray(steps), gaps))
        span_tasks, span = _span(tasks, cut_ns)
        if span is not None:
            span_rows, _ = _window_rows(
                rank,
                device,
                [SPAN_STEP],
                np.array([span[0]], dtype=np.int64),
                np.array([span[1]], dtype=np.int64),
                span_tasks,
                host,
            )
            accounts.extend(span_rows)
    gaps_table = pa.concat_tables(gap_tables) if gap_tables else GAPS_SCHEMA.empty_table()
    host_rows: tuple[HostWindowAccount, ...] = ()
    if not devices and windows:
        # host-only: the main thread per step, and over the whole trace (step -1)
        whole = hull(columns.int64(events, "start_ns"), _ends(events))
        span_window = StepWindow(rank, SPAN_STEP, *whole, *whole) if whole else None
        host_rows = host_accounting(events, [*windows, *([span_window] if span_window else [])])
    return Accounting(windows=tuple(accounts), gaps=gaps_table, host=host_rows)


def _ends(events: pa.Table) -> Int64Array:
    return columns.int64(events, "start_ns") + columns.int64(events, "dur_ns")


def _gaps_table(rank: int, device: int, steps: np.ndarray, gaps: dict[str, np.ndarray]) -> pa.Table:
    n = gaps["start"].size
    cause_names = pa.array(IDLE_CAUSES, pa.string())
    return pa.table(
        {
            "rank": pa.array(np.full(n, rank), pa.int32()),
            "device": pa.array(np.full(n, device), pa.int16()),
            "step": pa.array(steps[gaps["window"]] if n else [], pa.int32()),
            "start_ns": pa.array(gaps["start"], pa.int64()),
            "end_ns": pa.array(gaps["end"], pa.int64()),
            "dur_ns": pa.array(gaps["end"] - gaps["start"], pa.int64()),
            "cause": cause_names.take(pa.array(gaps["cause"], pa.int64())),
            "next_task": pa.array(gaps["next_task"], pa.int64()),
            "launch_start_ns": pa.array(gaps["launch"], pa.int64()),
        },
        schema=GAPS_SCHEMA,
    )


def main_thread(events: pa.Table) -> tuple[int, int] | None:
    """(pid, thread) of the thread that drives the run: the one with the step annotations,
    else the one with the most operator time."""
    kinds = columns.strings(events, "kind")
    device = columns.int64(events, "device")
    pid = columns.int64(events, "pid")
    thread = columns.int64(events, "stream")
    for wanted in ([schema.STEP], [schema.CPU_OP, schema.ANNOTATION, schema.PYTHON]):
        sel = np.isin(kinds, wanted) & (device < 0)
        if not sel.any():
            continue
        pairs = np.stack([pid[sel], thread[sel]], axis=1)
        weights = columns.int64(events, "dur_ns")[sel] if wanted[0] != schema.STEP else None
        keys, inverse = np.unique(pairs, axis=0, return_inverse=True)
        totals = np.bincount(inverse.reshape(-1), weights=weights, minlength=len(keys))
        best = int(np.argmax(totals))
        return int(keys[best][0]), int(keys[best][1])
    return None


def host_accounting(
    events: pa.Table, windows: Sequence[StepWindow]
) -> tuple[HostWindowAccount, ...]:
    """The account of the main thread of a host-only run, one row per step window.

    See :class:`perfledger.model.accounts.HostWindowAccount` for the two partitions.
    """
    if events.num_rows == 0 or not windows:
        return ()
    thread = main_thread(events)
    if thread is None:
        return ()
    rank = int(events.column("rank")[0].as_py())
    on_thread = (
        (columns.int64(events, "pid") == thread[0])
        & (columns.int64(events, "stream") == thread[1])
        & (columns.int64(events, "device") < 0)
    )
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    kind = columns.strings(events, "kind")
    names = columns.strings(events, "name")

    loader_sel = on_thread & (kind == schema.DATALOADER)
    op_sel = on_thread & (kind == schema.CPU_OP)
    optimizer_sel = on_thread & np.fromiter(
        (n.startswith(vendors.OPTIMIZER_PREFIXES) for n in names), bool, names.size
    )
    backward_sel = op_sel & np.fromiter(
        (n.startswith(vendors.BACKWARD_PREFIXES) for n in names), bool, names.size
    )
    loader = union(start[loader_sel], end[loader_sel])
    operators = union(start[op_sel], end[op_sel])
    optimizer = union(start[optimizer_sel], end[optimizer_sel])
    loader_or_ops = merge(loader, operators)
    loader_or_optimizer = merge(loader, optimizer)

    ordered = sorted(windows, key=lambda w: w.start_ns)
    a = np.array([w.start_ns for w in ordered], dtype=np.int64)
    b = np.array([w.end_ns for w in ordered], dtype=np.int64)
    loader_t = loader.covered(a, b)
    ops_t = loader_or_ops.covered(a, b) - loader_t
    optimizer_t = loader_or_optimizer.covered(a, b) - loader_t

    # backward is one phase per step: from the first to the last backward operator of the step
    # window (the whole-trace row, step -1, holds the phases of the steps it covers)
    bw_start, bw_end = start[backward_sel], end[backward_sel]
    phase_starts, phase_ends = [], []
    for window in ordered:
        if window.step == SPAN_STEP:
            continue
        inside = (bw_start < window.end_ns) & (bw_end > window.start_ns)
        phase = hull(bw_start[inside], bw_end[inside])
        if phase is not None:
            phase_starts.append(max(phase[0], window.start_ns))
            phase_ends.append(min(phase[1], window.end_ns))
    backward_or_more = merge(union(phase_starts, phase_ends), loader_or_optimizer)
    backward_t_all = backward_or_more.covered(a, b) - loader_t - optimizer_t

    rows = []
    for i, window in enumerate(ordered):
        backward_t = int(backward_t_all[i])
        wall = int(b[i] - a[i])
        account = HostWindowAccount(
            rank=rank,
            step=window.step,
            start_ns=int(a[i]),
            end_ns=int(b[i]),
            dataloader_ns=int(loader_t[i]),
            forward_ns=wall - int(loader_t[i]) - int(optimizer_t[i]) - backward_t,
            backward_ns=backward_t,
            optimizer_ns=int(optimizer_t[i]),
            operator_ns=int(ops_t[i]),
            overhead_ns=wall - int(loader_t[i]) - int(ops_t[i]),
        )
        account.self_check()
        rows.append(account)
    return tuple(rows)


def split_communication(
    events: pa.Table, windows: Sequence[WindowAccount], comm_wait: Int64Array
) -> tuple[WindowAccount, ...]:
    """The accounts with their exposed communication split again by new waits (``comm_wait``:
    per row of ``events``, how long a communication task waited for its peers at its start):
    the waits the cluster pass measures across ranks. Every other figure stays."""
    devices = _device_tasks(events, launch_starts(events), comm_wait)
    annotations = step_annotations(events)
    cut_ns = annotations[-1][1] if len(annotations) >= 2 else None
    result = list(windows)
    for device, tasks in devices.items():
        for span in (False, True):
            mine = [
                i
                for i, w in enumerate(windows)
                if w.device == device and (w.step == SPAN_STEP) == span
            ]
            if mine:
                counted = _span(tasks, cut_ns)[0] if span else tasks
                _resplit(result, mine, counted)
    return tuple(result)


def _resplit(accounts: list[WindowAccount], mine: list[int], tasks: _DeviceTasks) -> None:
    """Split the exposed communication of ``accounts[mine]`` (one device's) by the tasks'
    waits, in place."""
    starts = np.array([accounts[i].start_ns for i in mine], dtype=np.int64)
    ends = np.array([accounts[i].end_ns for i in mine], dtype=np.int64)
    is_kernel = tasks.kind == schema.DEVICE_TASK_KINDS.index(schema.KERNEL)
    is_comm = tasks.kind == schema.DEVICE_TASK_KINDS.index(schema.COMM)
    compute = union(tasks.start[is_kernel], tasks.end[is_kernel])
    transfer = union(tasks.start[is_comm] + tasks.wait[is_comm], tasks.end[is_comm])
    c1 = compute.covered(starts, ends)
    exposed_transfer = merge(compute, transfer).covered(starts, ends) - c1
    for j, i in enumerate(mine):
        account = accounts[i]
        moved = int(exposed_transfer[j])
        accounts[i] = replace(
            account,
            communication_wait_ns=account.communication_ns - moved,
            communication_transfer_ns=moved,
        )
        accounts[i].self_check()
