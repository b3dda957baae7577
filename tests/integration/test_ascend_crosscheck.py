"""Our accounting of real Ascend runs against torch_npu's own figures.

torch_npu writes, per step, Computing / Communication(Not Overlapped) / Overlapped / Free /
Preparing (step_trace_time.csv, or StepTraceTime in analysis.db for database exports), and per
operator type and core type a count and total (op_statistic.csv), and per CANN API a count and
total (api_statistic.csv). Our figures come from the imported events through the project's own
step windows and device accounting; the reference figures are read here with the stdlib.

Definitions differ in one place (docs/formats.md, "Cross-check with torch_npu"): torch_npu's Free
counts only the gaps between the step's first and last compute/communication task, while our
step window starts at the host step annotation and ends with the last task issued inside it. So
our idle + memcpy + memset over the step equals Free + Preparing (host step start to the first
task) + the tail after the last task; over torch_npu's own window it equals Free.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis.accounting import device_accounting
from perfledger.analysis.steps import step_windows
from perfledger.model.accounts import WindowAccount
from perfledger.model.trace import Trace
from perfledger.sources.ascend import load_ascend
from tests.paths import DATA

ASCEND = DATA / "ascend"
LEVELS = ("level0", "level1", "level2")
FORMATS = ("torch_npu_text", "torch_npu_db")
# Our figures agree with torch_npu's to the rounding of its CSV (3 decimals of a us) and of the
# text timeline's float durations; 1 us is 0.001 % of these 120-150 ms steps (the acceptance
# bound is 1 % of the step).
TOLERANCE_US = 1.0


@pytest.fixture(scope="module")
def ascend_dir() -> Path:
    if not ASCEND.is_dir():
        pytest.fail(f"Ascend test data missing: {ASCEND}")
    return ASCEND


_CACHE: dict[str, list[Trace]] = {}


def traces(path: Path) -> list[Trace]:
    if str(path) not in _CACHE:
        _CACHE[str(path)] = load_ascend(path)
    return _CACHE[str(path)]


def reference_steps(rank_dir: Path) -> dict[int, dict[str, float]]:
    """torch_npu's step split in us, keyed by step, from the text or database export."""
    output = rank_dir / "ASCEND_PROFILER_OUTPUT"
    csv_path = output / "step_trace_time.csv"
    result: dict[int, dict[str, float]] = {}
    if csv_path.exists():
        with csv_path.open(newline="") as stream:
            for row in csv.DictReader(stream):
                result[int(row["Step"])] = {
                    "computing": float(row["Computing"]),
                    "comm_not_overlapped": float(row["Communication(Not Overlapped)"]),
                    "overlapped": float(row["Overlapped"]),
                    "free": float(row["Free"]),
                    "preparing": float(row["Preparing"]),
                }
        return result
    con = sqlite3.connect(f"file:{output / 'analysis.db'}?mode=ro&immutable=1", uri=True)
    try:
        for step, comp, comm, over, free, prep in con.execute(
            "SELECT step, computing, communication_not_overlapped, overlapped, free, preparing "
            "FROM StepTraceTime"
        ):
            result[int(step)] = {
                "computing": comp,
                "comm_not_overlapped": comm,
                "overlapped": over,
                "free": free,
                "preparing": prep,
            }
    finally:
        con.close()
    return result


def check_ranks_differ(level_dir: Path) -> None:
    """Fail clearly when the shared samples were damaged (a rank holding another rank's files)."""
    output = "ASCEND_PROFILER_OUTPUT"
    for name in ("trace_view.json", "kernel_details.csv", "step_trace_time.csv"):
        first = level_dir / "rank0_ascend_pt" / output / name
        second = level_dir / "rank1_ascend_pt" / output / name
        if first.exists() and second.exists() and first.read_bytes() == second.read_bytes():
            pytest.fail(
                f"damaged shared samples: {first} and {second} are identical; "
                "restore tests/data/ascend from git"
            )


def cases(base: Path) -> Iterator[tuple[str, str, Trace, Path]]:
    for fmt in FORMATS:
        for level in LEVELS:
            check_ranks_differ(base / fmt / level)
            for trace in traces(base / fmt / level):
                rank_dir = base / fmt / level / f"rank{trace.meta['rank']}_ascend_pt"
                yield fmt, level, trace, rank_dir


def busy_hull(events: pa.Table, start_ns: int, end_ns: int) -> tuple[int, int]:
    """First start and last end of the compute and communication tasks inside a window."""
    con = duckdb.connect()
    try:
        con.register("events", events)
        row = con.execute(
            "SELECT min(start_ns), max(start_ns + dur_ns) FROM events "
            "WHERE kind IN ('kernel', 'comm') AND start_ns >= ? AND start_ns < ?",
            [start_ns, end_ns],
        ).fetchone()
    finally:
        con.close()
    assert row is not None and row[0] is not None
    return int(row[0]), int(row[1])


def step_account(trace: Trace, step: int) -> tuple[WindowAccount, Any]:
    windows = step_windows(trace.events)
    (window,) = [w for w in windows if w.step == step]
    accounts = device_accounting(trace.events, windows).windows
    (account,) = [a for a in accounts if a.step == step]
    account.self_check()
    return account, window


def us(ns: int) -> float:
    return ns / 1000


def test_compute_and_communication_match_step_trace_time(ascend_dir: Path) -> None:
    checked = 0
    for fmt, level, trace, rank_dir in cases(ascend_dir):
        for step, ref in reference_steps(rank_dir).items():
            account, _ = step_account(trace, step)
            where = f"{fmt}/{level}/rank{trace.meta['rank']} step {step}"
            assert abs(us(account.compute_ns) - ref["computing"]) <= TOLERANCE_US, where
            assert abs(us(account.communication_ns) - ref["comm_not_overlapped"]) <= TOLERANCE_US, (
                where
            )
            assert (
                abs(us(account.overlapped_communication_ns) - ref["overlapped"]) <= TOLERANCE_US
            ), where
            checked += 1
    assert checked == 12  # 2 formats x 3 levels x 2 ranks, one step each


def test_free_matches_over_torch_npus_window_and_adds_up_over_ours(ascend_dir: Path) -> None:
    for fmt, level, trace, rank_dir in cases(ascend_dir):
        for step, ref in reference_steps(rank_dir).items():
            account, window = step_account(trace, step)
            first, last = busy_hull(trace.events, window.start_ns, window.end_ns)
            where = f"{fmt}/{level}/rank{trace.meta['rank']} step {step}"
            # torch_npu's window: from the first to the last compute/communication task
            inner = replace(window, start_ns=first, end_ns=last)
            (inner_account,) = [
                a for a in device_accounting(trace.events, [inner]).windows if a.step == step
            ]
            free = inner_account.idle_ns + inner_account.memcpy_ns + inner_account.memset_ns
            assert abs(us(free) - ref["free"]) <= TOLERANCE_US, where
            # our window adds the head before the first task and the tail after the last one
            ours = account.idle_ns + account.memcpy_ns + account.memset_ns
            preparing = first - window.start_ns
            tail = window.end_ns - last
            assert abs(us(preparing) - ref["preparing"]) <= TOLERANCE_US, where
            assert abs(us(ours - preparing - tail) - ref["free"]) <= TOLERANCE_US, where
            # the tail is what keeps "free" from matching over the plain step: ~1 % of it
            assert 0 < tail < account.wall_ns * 0.015, where


def test_op_statistic_by_core_type_matches(ascend_dir: Path) -> None:
    compared = 0
    for level in ("level1", "level2"):
        check_ranks_differ(ascend_dir / "torch_npu_text" / level)
        for trace in traces(ascend_dir / "torch_npu_text" / level):
            rank_dir = ascend_dir / "torch_npu_text" / level / f"rank{trace.meta['rank']}_ascend_pt"
            with (rank_dir / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv").open() as stream:
                reference = {(r["OP Type"], r["Core Type"]): r for r in csv.DictReader(stream)}
            con = duckdb.connect()
            con.register("events", trace.events)
            ours = {
                (op, core): (count, total, low, high)
                for op, core, count, total, low, high in con.execute(
                    "SELECT json_extract_string(args, '$.op_type'), "
                    "json_extract_string(args, '$.task_type'), count(*), sum(dur_ns), "
                    "min(dur_ns), max(dur_ns) FROM events WHERE kind = 'kernel' GROUP BY 1, 2"
                ).fetchall()
            }
            con.close()
            assert set(ours) == set(reference)
            for key, row in reference.items():
                count, total, low, high = ours[key]
                assert count == int(row["Count"]), key
                assert abs(us(total) - float(row["Total Time(us)"])) <= 0.001 * count + 0.001
                # the CSV rounds to 0.001 us, the timeline's float durations to 1 ns
                assert abs(us(low) - float(row["Min Time(us)"])) <= 0.002, key
                assert abs(us(high) - float(row["Max Time(us)"])) <= 0.002, key
                compared += 1
    assert compared > 100


def test_api_statistic_matches(ascend_dir: Path) -> None:
    prefix = {"acl": "AscendCL", "runtime": "Runtime", "hccl": "Hccl", "node": "Node"}
    for level in ("level1", "level2"):
        check_ranks_differ(ascend_dir / "torch_npu_text" / level)
        for trace in traces(ascend_dir / "torch_npu_text" / level):
            rank_dir = ascend_dir / "torch_npu_text" / level / f"rank{trace.meta['rank']}_ascend_pt"
            with (rank_dir / "ASCEND_PROFILER_OUTPUT" / "api_statistic.csv").open() as stream:
                reference = list(csv.DictReader(stream))
            con = duckdb.connect()
            con.register("events", trace.events)
            ours = {
                name: (count, total)
                for name, count, total in con.execute(
                    "SELECT name::VARCHAR, count(*), sum(dur_ns) FROM events "
                    "WHERE kind IN ('runtime', 'sync') GROUP BY 1"
                ).fetchall()
            }
            con.close()
            for row in reference:
                name = f"{prefix[row['Level']]}@{row['API Name']}"
                count, total = ours[name]
                assert count == int(row["Count"]), name
                assert abs(us(total) - float(row["Time(us)"])) <= 0.01 * count + 0.01, name


def test_communication_time_per_op_matches_communication_json(ascend_dir: Path) -> None:
    rank_dir = ascend_dir / "torch_npu_text" / "level2" / "rank0_ascend_pt"
    document = json.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    expected = {
        name.split("@")[0]: op["Communication Time Info"]
        for step in document.values()
        for name, op in step["collective"].items()
        if "@" in name  # "Total Op Info" sums the step's collectives
    }
    trace = traces(ascend_dir / "torch_npu_text" / "level2")[0]
    con = duckdb.connect()
    con.register("events", trace.events)
    rows = con.execute(
        "SELECT name::VARCHAR, dur_ns, json_extract(args, '$.hccl.elapse_ns')::BIGINT, "
        "json_extract(args, '$.hccl.wait_ns')::BIGINT, "
        "json_extract(args, '$.hccl.transit_ns')::BIGINT FROM events WHERE kind = 'comm'"
    ).fetchall()
    con.close()
    assert {r[0] for r in rows} == set(expected)
    for name, dur_ns, elapse, wait, transit in rows:
        info = expected[name]
        assert elapse == round(info["Elapse Time(ms)"] * 1e6)
        assert wait == round(info["Wait Time(ms)"] * 1e6)
        assert transit == round(info["Transit Time(ms)"] * 1e6)
        assert abs(dur_ns - elapse) <= 1  # the collective on the timeline is HCCL's elapse


def test_task_type_shares_are_queryable(ascend_dir: Path) -> None:
    trace = traces(ascend_dir / "torch_npu_text" / "level2")[0]
    rank_dir = ascend_dir / "torch_npu_text" / "level2" / "rank0_ascend_pt"
    with (rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    expected: dict[str, float] = {}
    for row in rows:
        core = row["Accelerator Core"]
        expected[core] = expected.get(core, 0.0) + float(row["Duration(us)"])
    con = duckdb.connect()
    con.register("events", trace.events)
    ours = dict(
        con.execute(
            "SELECT json_extract_string(args, '$.task_type'), sum(dur_ns) / 1000 FROM events "
            "WHERE kind IN ('kernel', 'comm') GROUP BY 1"
        ).fetchall()
    )
    con.close()
    assert set(ours) == set(expected) == {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIV", "DSA_SQE", "HCCL"}
    for core, total in expected.items():
        assert np.isclose(ours[core], total, atol=0.01 * len(rows))
