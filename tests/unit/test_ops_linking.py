"""Linking device tasks to launches and host ops (numpy) agrees with the same joins in SQL."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import nesting, ops
from perfledger.model import schema

_SQL = """
    WITH launch AS (
        SELECT * FROM launches
        QUALIFY row_number() OVER (PARTITION BY rank, correlation ORDER BY start_ns, row) = 1
    ),
    op_by_id AS (
        SELECT * FROM ops WHERE external_id <> -1
        QUALIFY row_number() OVER (
            PARTITION BY rank, external_id ORDER BY dur_ns, start_ns DESC, row DESC) = 1
    ),
    linked AS (
        SELECT t.row, t.rank, t.device, t.stream, t.start_ns, t.dur_ns,
               coalesce(l.start_ns, -1) AS launch_ns, l.thread AS launch_thread,
               coalesce(nullif(l.external_id, -1), nullif(t.external_id, -1)) AS op_id,
               l.enclosing_op
        FROM tasks t LEFT JOIN launch l
            ON t.correlation <> -1 AND t.rank = l.rank AND t.correlation = l.correlation
    )
    SELECT k.row,
           -- the id's operator, unless the launch lies inside another operator of its thread
           CASE WHEN o.row IS NOT NULL AND k.launch_thread IS NOT NULL
                     AND k.enclosing_op IS NOT NULL AND k.enclosing_op <> o.row
                     AND NOT (o.thread = k.launch_thread AND o.start_ns <= k.launch_ns
                              AND k.launch_ns < o.start_ns + o.dur_ns)
                THEN k.enclosing_op
                ELSE coalesce(o.row, k.enclosing_op) END AS op_row,
           k.launch_ns,
           greatest(0, k.start_ns - coalesce(max(k.start_ns + k.dur_ns) OVER (
               PARTITION BY k.rank, k.device, k.stream ORDER BY k.start_ns, k.dur_ns, k.row
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), k.start_ns)) AS wait_ns
    FROM linked k LEFT JOIN op_by_id o ON k.rank = o.rank AND k.op_id = o.external_id
    ORDER BY k.rank, k.start_ns, k.device, k.stream, k.row
"""


def _reference(events: pa.Table) -> dict[str, list[Any]]:
    """The joins written in SQL, on the same enclosing operators."""
    col = {
        name: np.asarray(events[name], dtype=np.int64)
        for name in events.column_names
        if name not in ("kind", "name", "shapes", "dtypes", "args", "flops")
    }
    kind = np.asarray(events["kind"].cast(pa.string()).to_pylist(), dtype=object)
    start, end = col["start_ns"], col["start_ns"] + col["dur_ns"]
    op_rows = np.flatnonzero(kind == schema.CPU_OP)
    launch_rows = np.flatnonzero(
        np.isin(kind, list(schema.LAUNCH_KINDS)) & (col["correlation"] != -1)
    )
    task_rows = np.flatnonzero(np.isin(kind, list(schema.DEVICE_TASK_KINDS)))
    host = np.concatenate([op_rows, launch_rows])
    # one id per host thread, (rank, pid, thread)
    thread_keys = np.stack([col["rank"][host], col["pid"][host], col["stream"][host]], axis=1)
    thread = np.unique(thread_keys, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)
    op_thread, launch_thread = thread[: op_rows.size], thread[op_rows.size :]
    parent = nesting.operator_nesting(op_thread, start[op_rows], end[op_rows])
    enclosing = nesting.innermost_enclosing(
        op_thread, start[op_rows], end[op_rows], parent, launch_thread, start[launch_rows]
    )
    enclosing_row = (
        np.where(enclosing >= 0, op_rows[np.maximum(enclosing, 0)], -1)
        if op_rows.size
        else enclosing
    )

    def subset(rows: np.ndarray, names: list[str]) -> pa.Table:
        data = {n: pa.array(col[n][rows], pa.int64()) for n in names}
        data["row"] = pa.array(rows, pa.int64())
        return pa.table(data)

    tasks = subset(
        task_rows, ["rank", "device", "stream", "start_ns", "dur_ns", "correlation", "external_id"]
    )
    launches = subset(launch_rows, ["rank", "correlation", "external_id", "start_ns"])
    launches = launches.append_column(
        "enclosing_op", pa.array(enclosing_row, pa.int64(), mask=enclosing_row < 0)
    ).append_column("thread", pa.array(launch_thread, pa.int64()))
    op_table = subset(op_rows, ["rank", "external_id", "start_ns", "dur_ns"]).append_column(
        "thread", pa.array(op_thread, pa.int64())
    )
    with duckdb.connect() as con:
        con.register("tasks", tasks)
        con.register("launches", launches)
        con.register("ops", op_table)
        linked = con.sql(_SQL).to_arrow_table()
    return {name: linked[name].to_pylist() for name in ("row", "op_row", "launch_ns", "wait_ns")}


@st.composite
def _events(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 40))
    kinds = [
        schema.CPU_OP,
        schema.RUNTIME,
        schema.SYNC,
        schema.KERNEL,
        schema.MEMCPY,
        schema.ANNOTATION,
    ]
    rows: dict[str, list[Any]] = {f.name: [] for f in schema.EVENTS_SCHEMA}
    for _ in range(n):
        kind = draw(st.sampled_from(kinds))
        device_task = kind in schema.DEVICE_TASK_KINDS
        rows["rank"].append(draw(st.sampled_from([0, 0, 1])))
        rows["kind"].append(kind)
        rows["name"].append(draw(st.sampled_from(["a", "b", "c"])))
        rows["device"].append(0 if device_task else -1)
        rows["stream"].append(
            draw(st.sampled_from([7, 8])) if device_task else draw(st.sampled_from([1, 2]))
        )
        rows["pid"].append(100)
        rows["start_ns"].append(draw(st.integers(0, 60)))
        rows["dur_ns"].append(draw(st.integers(0, 30)))
        rows["correlation"].append(draw(st.sampled_from([-1, 1, 2, 3])))
        rows["external_id"].append(draw(st.sampled_from([-1, -1, 5, 6, 7])))
        rows["step"].append(-1)
        rows["bytes"].append(-1)
        rows["flops"].append(float("nan"))
        rows["shapes"].append(draw(st.sampled_from([None, "[[1]]"])))
        rows["dtypes"].append(None)
        rows["args"].append(None)
    plain = {
        f.name: pa.array(
            rows[f.name], f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        )
        for f in schema.EVENTS_SCHEMA
    }
    return pa.table(plain).cast(schema.EVENTS_SCHEMA)


@settings(max_examples=150, deadline=None)
@given(_events())
def test_linking_matches_the_sql_joins(events: pa.Table) -> None:
    frame = ops.link_device_tasks(events)
    want = _reference(events)
    assert frame["row"].to_pylist() == want["row"]
    assert frame["launch_ns"].to_pylist() == want["launch_ns"]
    assert frame["wait_ns"].to_pylist() == want["wait_ns"]
    names = events["name"].cast(pa.string()).to_pylist()
    assert frame["host_op"].to_pylist() == [None if r is None else names[r] for r in want["op_row"]]


@pytest.mark.parametrize(
    "name", ["kineto/v100_rank1_ddp.json.gz", "kineto/a100_rank3_control.json.gz"]
)
def test_links_made_before_the_steps_are_assigned_take_the_steps_after(name: str) -> None:
    # analyze_rank links the launches beside the step assignment: linked on the events
    # without steps, the tasks' steps taken from the assigned events after, the links are
    # those of the assigned events (real traces with annotated steps)
    from perfledger.analysis.repair import repair_trace
    from perfledger.analysis.steps import assign_steps, launch_starts, step_plan
    from perfledger.sources.kineto import load_kineto
    from tests.paths import data_file

    trace, _ = repair_trace(load_kineto(data_file(name)))
    launches = launch_starts(trace.events)
    windows = step_plan(trace.events, launches).windows
    assigned = assign_steps(trace.events, windows, launches)
    expected = ops.link_device_tasks(assigned)
    early = ops.with_task_steps(ops.link_device_tasks(trace.events), assigned)
    assert early.equals(expected)
    steps = expected["step"].to_numpy()
    assert len(set(steps.tolist()) - {schema.NO_STEP}) > 1  # the steps matter here
    assert not ops.link_device_tasks(trace.events)["step"].equals(expected["step"])
