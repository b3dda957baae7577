"""Write one small synthetic Ascend run in each export format, from a single description.

The run (times in us from an epoch base, one step, rank 0, device 0):

    host thread 100 (pid 4000)   ProfilerStep#7 [0, 1000)
                                   enumerate(DataLoader)#... [10, 110)
                                   aten::copy_ [90, 130)      issues the memcpy
                                   aten::conv2d [200, 262) > Conv2D [210, 250) issues kernel A
                                   aten::add [260, 300) > Add [262, 290)      issues kernel B
                                   HcclAllreduce [470, 495)                  issues the collective
    CANN thread 101              aclrtMemcpyAsync [100, 120)  conn 13
                                   Node@launch [220, 230) conn 11, [270, 275) conn 12,
                                   [480, 490) conn 15
                                   aclrtSynchronizeStream [500, 900) conn 14 (no task)
    device stream 2              memcpy [150, 170) 4096 B, kernel A Conv2D1 [300, 400) AI_CORE,
                                   kernel B Add1 [420, 450) AI_VECTOR_CORE
    device stream 4              hcom_allReduce__1_0_1 [600, 800) (8 x 1024 FP32) with its HCCL
                                   tasks Notify Wait [600, 700) and SDMA [700, 780)

So, by hand: compute 130 us, communication 200 us (none under compute), memcpy 20 us.

``make_run(steps=n)`` repeats that step n times, 1000 us apart (ProfilerStep#7, #8, ...), with
fresh connection and task ids: the same figures per step, and a run as large as a benchmark
needs.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

EPOCH_US = 1_736_400_000_000_000
PID = 4000
MAIN_TID = 100
CANN_TID = 101

COMPUTE_US = 130
COMMUNICATION_US = 200
MEMCPY_US = 20
STEP = 7


@dataclass(frozen=True)
class Op:
    name: str
    category: str  # cpu_op, python_function, enqueue
    start: float
    end: float
    issues: tuple[int, ...] = ()  # connection ids of the device work it issued


@dataclass(frozen=True)
class Api:
    level: str  # acl, runtime, node
    name: str
    start: float
    end: float
    connection: int


@dataclass(frozen=True)
class Task:
    name: str
    hw_type: str
    stream: int
    task_id: int
    start: float
    end: float
    connection: int
    core_type: str | None = None  # set for compute tasks (kernel_details rows)
    op_type: str | None = None
    shapes: str | None = None
    dtypes: str | None = None
    block_dim: int | None = None
    mac_ratio: float | None = None
    bytes: int | None = None
    subtask_of: str | None = None  # collective name for HCCL tasks


@dataclass(frozen=True)
class Collective:
    name: str
    start: float
    end: float
    connection: int
    count: int  # FP32 elements


@dataclass(frozen=True)
class Run:
    ops: list[Op]
    apis: list[Api]
    tasks: list[Task]
    collectives: list[Collective]


STEP_OPS = [
    Op("ProfilerStep#7", "cpu_op", 0, 1000),
    Op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "cpu_op", 10, 110),
    Op("aten::copy_", "cpu_op", 90, 130, (13,)),
    Op("aten::conv2d", "cpu_op", 200, 262),
    Op("Conv2D", "cpu_op", 210, 250, (11,)),
    Op("aten::add", "cpu_op", 260, 300),
    Op("Add", "cpu_op", 262, 290, (12,)),
    Op("HcclAllreduce", "cpu_op", 470, 495, (15,)),
    Op("train.py(12): step", "python_function", 5, 995),
]
STEP_APIS = [
    Api("acl", "aclrtMemcpyAsync", 100, 120, 13),
    Api("node", "launch", 220, 230, 11),
    Api("node", "launch", 270, 275, 12),
    Api("node", "launch", 480, 490, 15),
    Api("acl", "aclrtSynchronizeStream", 500, 900, 14),
]
STEP_TASKS = [
    Task("MEMCPY_ASYNC", "MEMCPY_ASYNC", 2, 1, 150, 170, 13, bytes=4096),
    Task(
        "Conv2D1",
        "AI_CORE",
        2,
        2,
        300,
        400,
        11,
        core_type="AI_CORE",
        op_type="Conv2D",
        shapes="32,3,224,224;64,3,11,11",
        dtypes="FLOAT;FLOAT",
        block_dim=16,
        mac_ratio=0.525,
    ),
    Task(
        "Add1",
        "AI_CORE",
        2,
        3,
        420,
        450,
        12,
        core_type="AI_VECTOR_CORE",
        op_type="Add",
        shapes="8,8;8,8",
        dtypes="FLOAT;FLOAT",
        block_dim=8,
    ),
    Task("Notify Wait", "Notify Wait", 4, 4, 600, 700, 15, subtask_of="hcom_allReduce__1_0_1"),
    Task("SDMA", "SDMA", 4, 4, 700, 780, 15, subtask_of="hcom_allReduce__1_0_1"),
]
STEP_COLLECTIVE = Collective("hcom_allReduce__1_0_1", 600, 800, 15, 8 * 1024)
COLLECTIVE_COUNT = STEP_COLLECTIVE.count
STEP_US = 1000


def make_run(steps: int = 1) -> Run:
    """The run, its step repeated ``steps`` times (times, ids and names shifted per step)."""
    run = Run([], [], [], [])
    for i in range(steps):
        shift, ids = i * STEP_US, i * 100
        collective = f"hcom_allReduce__1_{i}_1"
        for op in STEP_OPS:
            name = f"ProfilerStep#{STEP + i}" if op.name.startswith("ProfilerStep#") else op.name
            issues = tuple(c + ids for c in op.issues)
            run.ops.append(
                replace(op, name=name, start=op.start + shift, end=op.end + shift, issues=issues)
            )
        run.apis.extend(
            replace(a, start=a.start + shift, end=a.end + shift, connection=a.connection + ids)
            for a in STEP_APIS
        )
        run.tasks.extend(
            replace(
                t,
                start=t.start + shift,
                end=t.end + shift,
                connection=t.connection + ids,
                task_id=t.task_id + 10 * i,
                subtask_of=collective if t.subtask_of else None,
            )
            for t in STEP_TASKS
        )
        run.collectives.append(
            replace(
                STEP_COLLECTIVE,
                name=collective,
                start=STEP_COLLECTIVE.start + shift,
                end=STEP_COLLECTIVE.end + shift,
                connection=STEP_COLLECTIVE.connection + ids,
            )
        )
    return run


def _ts(us: float) -> str:
    """Epoch us as torch_npu writes it: a string with 3 decimals."""
    return f"{EPOCH_US + us:.3f}"


def _ns(us: float) -> int:
    return (EPOCH_US + int(us)) * 1000 + round((us - int(us)) * 1000)


def _profiler_info(rank_dir: Path, export_type: str) -> None:
    info = {
        "config": {
            "common_config": {"record_shapes": True},
            "experimental_config": {"_profiler_level": "Level1", "_export_type": export_type},
        },
        "rank_id": 0,
    }
    (rank_dir / "profiler_info_0.json").write_text(json.dumps(info))


def write_text(root: Path, run: Run | None = None) -> Path:
    """The torch_npu text export of the run; returns the ``*_ascend_pt`` directory."""
    run = run or make_run()
    rank_dir = root / "node_0_ascend_pt"
    output = rank_dir / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    _profiler_info(rank_dir, "text")
    hw_pid, cann_pid, hccl_pid = 90002, 90001, 90003
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": cann_pid, "tid": 0, "args": {"name": "CANN"}},
        {
            "ph": "M",
            "name": "process_name",
            "pid": hw_pid,
            "tid": 0,
            "args": {"name": "Ascend Hardware"},
        },
        {"ph": "M", "name": "process_name", "pid": hccl_pid, "tid": 0, "args": {"name": "HCCL"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": hccl_pid,
            "tid": 0,
            "args": {"name": "Group 0 Communication"},
        },
        {"ph": "M", "name": "thread_name", "pid": hccl_pid, "tid": 1, "args": {"name": "Plane 0"}},
    ]
    events.extend(
        {
            "ph": "X",
            "name": op.name,
            "pid": PID,
            "tid": MAIN_TID,
            "ts": _ts(op.start),
            "dur": op.end - op.start,
            "cat": op.category,
            "args": {
                "Sequence number": -1,
                "Input Dims": "0;\r\n;",
                "Input type": "float;\r\nScalar",
                "Call stack": "train.py(12): step;\r\nrun",
            },
        }
        for op in run.ops
    )
    prefix = {"acl": "AscendCL", "runtime": "Runtime", "node": "Node"}
    events.extend(
        {
            "name": f"{prefix[api.level]}@{api.name}",
            "pid": cann_pid,
            "tid": CANN_TID,
            "ts": _ts(api.start),
            "dur": api.end - api.start,
            "args": {"Thread Id": CANN_TID, "connection_id": api.connection},
            "ph": "X",
        }
        for api in run.apis
    )
    targets: dict[int, tuple[int, int, float]] = {}
    for task in run.tasks:
        args: dict[str, Any] = {
            "Task Type": task.hw_type,
            "Physic Stream Id": task.stream,
            "Task Id": task.task_id,
            "connection_id": task.connection,
        }
        if task.bytes is not None:
            args["data size(Byte)"] = task.bytes
            args["memcpy direction"] = "host to device"
        events.append(
            {
                "name": task.name,
                "pid": hw_pid,
                "tid": task.stream,
                "ts": _ts(task.start),
                "dur": task.end - task.start,
                "args": args,
                "ph": "X",
            }
        )
        if task.subtask_of:  # the same task again, as HCCL's per-plane detail
            events.append(
                {
                    "name": task.name.replace(" ", "_"),
                    "pid": hccl_pid,
                    "tid": 1,
                    "ts": _ts(task.start),
                    "dur": task.end - task.start,
                    "args": {"task type": task.name, "stream id": task.stream},
                    "ph": "X",
                }
            )
        else:
            targets[task.connection] = (hw_pid, task.stream, task.start)
    for collective in run.collectives:
        events.append(
            {
                "name": collective.name,
                "pid": hccl_pid,
                "tid": 0,
                "ts": _ts(collective.start),
                "dur": collective.end - collective.start,
                "args": {
                    "connection_id": collective.connection,
                    "data_type": "FP32",
                    "alg_type": "MESH",
                    "count": collective.count,
                },
                "ph": "X",
            }
        )
        targets[collective.connection] = (hccl_pid, 0, collective.start)
    # torch_to_npu flows: from the issuing operator's start to the work it issued
    flow = 0
    for op in run.ops:
        for connection in op.issues:
            target = targets[connection]
            flow += 1
            events.append(
                {
                    "ph": "s",
                    "id": flow,
                    "pid": PID,
                    "tid": MAIN_TID,
                    "ts": _ts(op.start),
                    "cat": "async_npu",
                    "name": "torch_to_npu",
                }
            )
            events.append(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": flow,
                    "pid": target[0],
                    "tid": target[1],
                    "ts": _ts(target[2]),
                    "cat": "async_npu",
                    "name": "torch_to_npu",
                }
            )
    (output / "trace_view.json").write_text(json.dumps(events))
    _write_kernel_details(output, run)
    return rank_dir


def _write_kernel_details(output: Path, run: Run) -> None:
    header = [
        "Step Id",
        "Model ID",
        "Task ID",
        "Stream ID",
        "Name",
        "Type",
        "Accelerator Core",
        "Start Time(us)",
        "Duration(us)",
        "Wait Time(us)",
        "Block Dim",
        "Input Shapes",
        "Input Data Types",
        "aic_mac_ratio",
    ]
    lines = [",".join(header)]
    for task in run.tasks:
        if task.core_type is None:
            continue
        cells = [
            str(STEP),
            "4294967295",
            str(task.task_id),
            str(task.stream),
            task.name,
            task.op_type or "N/A",
            task.core_type,
            _ts(task.start) + "\t",  # torch_npu ends every timestamp with a TAB
            f"{task.end - task.start:.3f}",
            "0",
            str(task.block_dim),
            f'"""{task.shapes}"""',  # shapes are written with literal quotes
            f'"{task.dtypes}"',
            "N/A" if task.mac_ratio is None else str(task.mac_ratio),
        ]
        lines.append(",".join(cells))
    for collective in run.collectives:
        cells = [
            str(STEP),
            "4294967295",
            "N/A",
            "N/A",
            collective.name,
            "hcom_allReduce_",
            "HCCL",
            _ts(collective.start) + "\t",
            f"{collective.end - collective.start:.3f}",
            "0",
            "0",
            "N/A",
            "N/A",
            "N/A",
        ]
        lines.append(",".join(cells))
    (output / "kernel_details.csv").write_text("\n".join(lines) + "\n")


class _Strings:
    """STRING_IDS as the database writer builds it."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str | None) -> int | None:
        if value is None:
            return None
        return self.ids.setdefault(value, len(self.ids))


def write_db(root: Path, run: Run | None = None, *, swap_shapes_and_types: bool = False) -> Path:
    """The torch_npu database export of the run; returns the ``*_ascend_pt`` directory."""
    run = run or make_run()
    rank_dir = root / "node_0_ascend_pt"
    output = rank_dir / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    _profiler_info(rank_dir, "db")
    con = sqlite3.connect(output / "ascend_pytorch_profiler_0.db")
    s = _Strings()
    con.executescript(
        """
        CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE ENUM_API_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE ENUM_HCCL_DATA_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE RANK_DEVICE_MAP (rankId INTEGER, deviceId INTEGER);
        CREATE TABLE NPU_INFO (id INTEGER, name TEXT);
        CREATE TABLE PYTORCH_API (startNs TEXT, endNs TEXT, globalTid INTEGER,
            connectionId INTEGER, name INTEGER, sequenceNumber INTEGER, fwdThreadId INTEGER,
            inputDtypes INTEGER, inputShapes INTEGER, callchainId INTEGER, type INTEGER);
        CREATE TABLE CONNECTION_IDS (id INTEGER, connectionId INTEGER);
        CREATE TABLE CANN_API (startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER,
            connectionId INTEGER PRIMARY KEY, name INTEGER);
        CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER,
            connectionId INTEGER, globalTaskId INTEGER, globalPid INTEGER, taskType INTEGER,
            contextId INTEGER, streamId INTEGER, taskId INTEGER, modelId INTEGER);
        CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER PRIMARY KEY,
            blockDim INTEGER, mixBlockDim INTEGER, taskType INTEGER, opType INTEGER,
            inputFormats INTEGER, inputDataTypes INTEGER, inputShapes INTEGER,
            outputFormats INTEGER, outputDataTypes INTEGER, outputShapes INTEGER);
        CREATE TABLE TASK_PMU_INFO (globalTaskId INTEGER, name INTEGER, value NUMERIC);
        CREATE TABLE COMMUNICATION_OP (opName INTEGER, startNs INTEGER, endNs INTEGER,
            connectionId INTEGER, groupName INTEGER, opId INTEGER PRIMARY KEY, relay INTEGER,
            retry INTEGER, dataType INTEGER, algType INTEGER, count NUMERIC, opType INTEGER);
        CREATE TABLE COMMUNICATION_TASK_INFO (name INTEGER, globalTaskId INTEGER,
            taskType INTEGER, planeId INTEGER, groupName INTEGER, notifyId INTEGER,
            rdmaType INTEGER, srcRank INTEGER, dstRank INTEGER, transportType INTEGER,
            size INTEGER, dataType INTEGER, linkType INTEGER, opId INTEGER);
        """
    )
    con.executemany(
        "INSERT INTO ENUM_API_TYPE VALUES (?, ?)",
        [
            (5000, "runtime"),
            (10000, "node"),
            (20000, "acl"),
            (50001, "op"),
            (50002, "queue"),
            (50003, "trace"),
        ],
    )
    con.execute("INSERT INTO ENUM_HCCL_DATA_TYPE VALUES (4, 'FP32')")
    con.execute("INSERT INTO RANK_DEVICE_MAP VALUES (0, 0)")
    con.execute("INSERT INTO NPU_INFO VALUES (0, 'Ascend910B')")
    level_type = {"runtime": 5000, "node": 10000, "acl": 20000}
    category_type = {"cpu_op": 50001, "python_function": 50003, "enqueue": 50002}
    main_tid = (PID << 32) | MAIN_TID
    cann_tid = (PID << 32) | CANN_TID
    links: list[tuple[int, int]] = []
    for op in run.ops:
        link_id = None
        if op.issues:
            link_id = links[-1][0] + 1 if links else 0
            links += [(link_id, c) for c in op.issues]
        shapes, types = s("0;\r\n;"), s("float;\r\nScalar")
        if swap_shapes_and_types:  # as some torch_npu versions write them
            shapes, types = types, shapes
        con.execute(
            "INSERT INTO PYTORCH_API VALUES (?, ?, ?, ?, ?, -1, 0, ?, ?, NULL, ?)",
            (
                str(_ns(op.start)),
                str(_ns(op.end)),
                main_tid,
                link_id,
                s(op.name),
                types,
                shapes,
                category_type[op.category],
            ),
        )
    con.executemany("INSERT INTO CONNECTION_IDS VALUES (?, ?)", links)
    for api in run.apis:
        con.execute(
            "INSERT INTO CANN_API VALUES (?, ?, ?, ?, ?, ?)",
            (
                _ns(api.start),
                _ns(api.end),
                level_type[api.level],
                cann_tid,
                api.connection,
                s(api.name),
            ),
        )
    for op_id, collective in enumerate(run.collectives):
        con.execute(
            "INSERT INTO COMMUNICATION_OP VALUES (?, ?, ?, ?, ?, ?, 0, 0, 4, ?, ?, ?)",
            (
                s(collective.name),
                _ns(collective.start),
                _ns(collective.end),
                collective.connection,
                s("group0"),
                op_id,
                s("MESH"),
                collective.count,
                s("hcom_allReduce_"),
            ),
        )
    for global_id, task in enumerate(run.tasks):
        con.execute(
            "INSERT INTO TASK VALUES (?, ?, 0, ?, ?, ?, ?, 4294967295, ?, ?, 4294967295)",
            (
                _ns(task.start),
                _ns(task.end),
                task.connection,
                global_id,
                PID,
                s("KERNEL_AICORE" if task.core_type else task.hw_type),
                task.stream,
                task.task_id,
            ),
        )
        if task.core_type is not None:
            con.execute(
                "INSERT INTO COMPUTE_TASK_INFO VALUES (?, ?, ?, 0, ?, ?, NULL, ?, ?, NULL, NULL, "
                "NULL)",
                (
                    s(task.name),
                    global_id,
                    task.block_dim,
                    s(task.core_type),
                    s(task.op_type),
                    s(task.dtypes),
                    s(f'"{task.shapes}"'),
                ),
            )
            if task.mac_ratio is not None:
                con.execute(
                    "INSERT INTO TASK_PMU_INFO VALUES (?, ?, ?)",
                    (global_id, s("aic_mac_ratio"), task.mac_ratio),
                )
        if task.subtask_of is not None:
            con.execute(
                "INSERT INTO COMMUNICATION_TASK_INFO VALUES (?, ?, ?, 0, ?, 0, 0, 0, 1, 0, 0, 4, "
                "0, 1)",
                (s(task.subtask_of), global_id, s(task.name.replace(" ", "_")), s("group0")),
            )
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(i, v) for v, i in s.ids.items()])
    con.commit()
    con.close()
    return rank_dir


# msprof op_summary slices (renamed columns, N/A cells): the sample both the format tests and
# the fuzzer's msprof CSV seeds read.
MSPROF_SLICE_HEADER = [
    "Device_id",
    "Op Name",
    "OP Type",
    "Task Type",
    "Start Time(us)",
    "Task Duration(us)",
    "Block Num",
    "aiv_vec_ratio",
]
MSPROF_SLICE_ROWS = [
    ["3", "Cast", "Cast", "AI_VECTOR_CORE", "1000.5", "2.25", "8", "0.5"],
    ["3", "MatMul", "MatMul", "AI_CORE", "1010", "40", "24", "N/A"],
    ["3", "hcom_allGather__1", "hcom_allGather_", "HCCL", "1100", "50", "0", "N/A"],
    ["3", "Transdata_AICPU", "TransData", "AI_CPU", "1200.125", "7.5", "1", "N/A"],
]
