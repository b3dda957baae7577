"""Classification and linking of Ascend staging tables into canonical events (no files)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from perfledger.sources import ascend_build as build
from perfledger.sources.ascend_csv import counter_key

US = 1000


def host(rows: list[dict[str, Any]]) -> pa.Table:
    defaults = {"category": "cpu_op", "pid": 10, "tid": 1, "shapes": None, "dtypes": None}
    full = [{**defaults, "args": "{}", **r} for r in rows]
    for key, row in enumerate(full):
        row.setdefault("op_key", key)
    return pa.Table.from_pylist(full, schema=build.HOST_SCHEMA)


def cann(rows: list[dict[str, Any]]) -> pa.Table:
    full = [{"pid": 10, "tid": 2, "args": "{}", **r} for r in rows]
    return pa.Table.from_pylist(full, schema=build.CANN_SCHEMA)


def tasks(rows: list[dict[str, Any]]) -> pa.Table:
    defaults: dict[str, Any] = {
        "core_type": None,
        "op_type": None,
        "is_compute": False,
        "is_comm_subtask": False,
        "device": 0,
        "stream": 2,
        "pid": 99,
        "connection_id": None,
        "bytes": None,
        "shapes": None,
        "dtypes": None,
        "args": "{}",
    }
    return pa.Table.from_pylist([{**defaults, **r} for r in rows], schema=build.TASK_SCHEMA)


def comm(rows: list[dict[str, Any]]) -> pa.Table:
    defaults = {"device": None, "stream": -1, "pid": None, "bytes": None, "args": "{}"}
    return pa.Table.from_pylist([{**defaults, **r} for r in rows], schema=build.COMM_SCHEMA)


def rows_of(events: pa.Table) -> dict[str, dict[str, Any]]:
    result = {}
    for row in events.to_pylist():
        row["args"] = json.loads(row["args"]) if row["args"] else {}
        result[row["name"]] = row
    return result


def test_kinds_of_host_and_cann_calls() -> None:
    staged = build.Staged(
        host=host(
            [
                {"name": "ProfilerStep#3", "start_ns": 0, "dur_ns": 100 * US},
                {"name": "enumerate(DataLoader)#x", "start_ns": 1 * US, "dur_ns": 5 * US},
                {"name": "aten::mm", "start_ns": 10 * US, "dur_ns": 5 * US},
                {"name": "f.py(1): g", "category": "python_function", "start_ns": 0, "dur_ns": 9},
                {"name": "Enqueue", "category": "enqueue", "start_ns": 11 * US, "dur_ns": 1},
            ]
        ),
        cann=cann(
            [
                {"name": "AscendCL@aclrtSynchronizeDevice", "start_ns": 50 * US, "dur_ns": 9},
                {"name": "Runtime@StreamSynchronize", "start_ns": 51 * US, "dur_ns": 5},
                {"name": "AscendCL@aclrtMemcpy", "start_ns": 52 * US, "dur_ns": 5},
                {"name": "AscendCL@aclrtMemcpyAsync", "start_ns": 53 * US, "dur_ns": 5},
                {"name": "Node@launch", "start_ns": 54 * US, "dur_ns": 5},
            ]
        ),
    )
    kinds = {r["name"]: r["kind"] for r in build.build_events(staged, 0).to_pylist()}
    assert kinds == {
        "ProfilerStep#3": "step",
        "enumerate(DataLoader)#x": "dataloader",
        "aten::mm": "cpu_op",
        "f.py(1): g": "python",
        "Enqueue": "annotation",
        "AscendCL@aclrtSynchronizeDevice": "sync",
        "Runtime@StreamSynchronize": "sync",
        "AscendCL@aclrtMemcpy": "sync",  # a blocking copy
        "AscendCL@aclrtMemcpyAsync": "runtime",
        "Node@launch": "runtime",
    }


def test_device_tasks_links_and_collectives() -> None:
    staged = build.Staged(
        host=host(
            [
                {"name": "aten::conv2d", "start_ns": 0, "dur_ns": 50 * US},
                {"name": "Conv2D", "start_ns": 0, "dur_ns": 40 * US, "op_key": 7},
                {"name": "HcclAllreduce", "start_ns": 60 * US, "dur_ns": 5 * US, "op_key": 8},
            ]
        ),
        cann=cann(
            [
                {"name": "Node@launch", "start_ns": 10 * US, "dur_ns": 2, "connection_id": 1},
                {"name": "Node@launch", "start_ns": 61 * US, "dur_ns": 2, "connection_id": 3},
                {
                    "name": "Runtime@ContextGetCurrent",
                    "start_ns": 62 * US,
                    "dur_ns": 2,
                    "connection_id": 4,
                },
            ]
        ),
        tasks=tasks(
            [
                {
                    "name": "Conv2D1",
                    "hw_type": "AI_CORE",
                    "core_type": "AI_CORE",
                    "op_type": "Conv2D",
                    "is_compute": True,
                    "start_ns": 100 * US,
                    "dur_ns": 20 * US,
                    "connection_id": 1,
                },
                # the FFTS+ parent of Conv2D1: not a listed compute task
                {
                    "name": "KERNEL_AICORE",
                    "hw_type": "KERNEL_AICORE",
                    "start_ns": 99 * US,
                    "dur_ns": 22 * US,
                    "connection_id": 1,
                },
                {
                    "name": "Notify Wait",
                    "hw_type": "Notify Wait",
                    "stream": 4,
                    "start_ns": 200 * US,
                    "dur_ns": 10 * US,
                    "connection_id": 3,
                },
                {
                    "name": "EVENT_WAIT",
                    "hw_type": "EVENT_WAIT_SQE",
                    "start_ns": 150 * US,
                    "dur_ns": 10 * US,
                    "connection_id": 9,
                },
                {
                    "name": "MEMCPY_ASYNC",
                    "hw_type": "PCIE_DMA_SQE",
                    "start_ns": 90 * US,
                    "dur_ns": 2 * US,
                    "bytes": 64,
                },
            ]
        ),
        comm=comm(
            [
                {
                    "name": "hcom_allReduce__1",
                    "start_ns": 200 * US,
                    "dur_ns": 30 * US,
                    "connection_id": 3,
                    "bytes": 4096,
                }
            ]
        ),
        links=pa.Table.from_pylist(
            [
                {"op_key": 0, "connection_id": 1},
                {"op_key": 7, "connection_id": 1},
                {"op_key": 8, "connection_id": 3},
            ],
            schema=build.LINK_SCHEMA,
        ),
    )
    events = build.build_events(staged, 5)
    assert set(events.column("rank").to_pylist()) == {5}
    rows = rows_of(events)
    assert rows["Conv2D1"]["kind"] == "kernel"
    assert rows["KERNEL_AICORE"]["kind"] == "device_annotation"
    assert rows["Notify Wait"]["kind"] == "device_annotation"  # inside its collective
    assert rows["EVENT_WAIT"]["kind"] == "device_annotation"
    assert rows["MEMCPY_ASYNC"]["kind"] == "memcpy" and rows["MEMCPY_ASYNC"]["bytes"] == 64
    collective = rows["hcom_allReduce__1"]
    assert collective["kind"] == "comm"
    assert (collective["stream"], collective["device"], collective["bytes"]) == (4, 0, 4096)
    assert collective["args"]["task_type"] == "HCCL"
    # correlation on both sides only where a launch and a task share the connection id
    assert rows["Conv2D1"]["correlation"] == 1
    assert collective["correlation"] == 3
    assert rows["Runtime@ContextGetCurrent"]["correlation"] == -1
    assert rows["EVENT_WAIT"]["correlation"] == -1  # its launch is not in the trace
    # the innermost operator (latest start, then shortest) issued the work: Conv2D, not conv2d
    assert rows["Conv2D"]["external_id"] == 7
    assert rows["aten::conv2d"]["external_id"] == -1
    assert rows["Conv2D1"]["external_id"] == 7
    assert collective["external_id"] == 8
    launches = [r for r in events.to_pylist() if r["name"] == "Node@launch"]
    assert sorted(r["external_id"] for r in launches) == [7, 8]
    assert rows["Conv2D1"]["args"]["op_type"] == "Conv2D"
    starts = events.column("start_ns").to_pylist()
    assert starts == sorted(starts)


def test_hccl_tasks_stand_for_a_missing_collective_and_level0_core_types() -> None:
    staged = build.Staged(
        tasks=tasks(
            [
                {
                    "name": "Notify Wait",
                    "hw_type": "Notify Wait",
                    "is_comm_subtask": True,
                    "start_ns": 0,
                    "dur_ns": 10,
                    "connection_id": 3,
                },
                {"name": "k", "hw_type": "KERNEL_AIVEC", "start_ns": 20, "dur_ns": 10},
                {"name": "m", "hw_type": "MEMSET", "start_ns": 40, "dur_ns": 10},
            ]
        )
    )
    rows = rows_of(build.build_events(staged, 0))
    assert rows["Notify Wait"]["kind"] == "comm"
    assert rows["k"]["kind"] == "kernel"
    assert rows["k"]["args"]["task_type"] == "AI_VECTOR_CORE"
    assert rows["k"]["args"]["hw_task_type"] == "KERNEL_AIVEC"
    assert rows["m"]["kind"] == "memset"


def test_counter_keys_carry_their_unit() -> None:
    assert counter_key("cube_utilization(%)") == "cube_utilization_pct"
    assert counter_key("aicore_time(us)") == "aicore_time_us"
    assert counter_key("aic_l0a_read_bw(GB/s)") == "aic_l0a_read_bw_gb_s"
    assert counter_key("aic_mac_ratio") == "aic_mac_ratio"
    assert counter_key(" Mix Block Dim ") == "mix_block_dim"
