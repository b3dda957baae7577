"""Every real Ascend sample imports, and what it holds matches the source files row for row.

Expected figures are derived here from the raw files with the standard library only (json, csv,
sqlite3), independently of the importer.
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from perfledger.model import schema
from perfledger.model.trace import Trace
from perfledger.sources.ascend import is_ascend, load_ascend
from tests.paths import DATA

ASCEND = DATA / "ascend"
LEVELS = ("level0", "level1", "level2")


@pytest.fixture(scope="module")
def ascend_dir() -> Path:
    if not ASCEND.is_dir():
        pytest.fail(f"Ascend test data missing: {ASCEND}")
    return ASCEND


_LOADED: dict[str, list[Trace]] = {}


def load(path: Path) -> list[Trace]:
    """Import once per test session (the samples are read-only)."""
    key = str(path)
    if key not in _LOADED:
        _LOADED[key] = load_ascend(path)
    return _LOADED[key]


def kind_counts(events: pa.Table) -> dict[str, int]:
    return dict(Counter(events.column("kind").to_pylist()))


def query(sql: str, params: list[Any] | None = None, **tables: pa.Table) -> list[tuple[Any, ...]]:
    """Run SQL over the given Arrow tables (by name)."""
    con = duckdb.connect()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def kind_durations(events: pa.Table) -> dict[str, int]:
    rows = query("SELECT kind::VARCHAR, sum(dur_ns)::BIGINT FROM events GROUP BY 1", events=events)
    return dict(rows)


def us_to_ns(text: str) -> int:
    return int(Decimal(text.strip()) * 1000)


# --- torch_npu text ----------

_SYNC_WORDS = ("Synchronize", "MemCopySync", "StreamSyncTaskFinish")


def text_expectation(output: Path) -> dict[str, Any]:
    """Counts per kind and device-task durations, derived from trace_view and kernel_details."""
    trace = json.loads((output / "trace_view.json").read_text())
    process = {
        e["pid"]: e["args"]["name"]
        for e in trace
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    thread = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace
        if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    complete = [e for e in trace if e.get("ph") == "X"]
    counts: Counter[str] = Counter()
    for e in complete:
        role = process.get(e["pid"])
        if role == "Python":
            if e["name"].startswith("ProfilerStep#"):
                counts["step"] += 1
            elif e["name"].startswith("enumerate(DataLoader)"):
                counts["dataloader"] += 1
            else:
                counts[
                    {"cpu_op": "cpu_op", "python_function": "python"}.get(e["cat"], "annotation")
                ] += 1
        elif role == "CANN":
            api = e["name"].split("@")[-1]
            sync = any(word in api for word in _SYNC_WORDS) or api == "aclrtMemcpy"
            counts["sync" if sync else "runtime"] += 1
        elif role == "HCCL" and "Communication" in thread.get((e["pid"], e["tid"]), ""):
            counts["comm"] += 1
        elif role == "Ascend Hardware":
            if e["name"] == "MEMCPY_ASYNC":
                counts["memcpy"] += 1
            else:
                counts["hardware_other"] += 1
    with (output / "kernel_details.csv").open(newline="") as stream:
        kernels = list(csv.DictReader(stream))
    compute = [k for k in kernels if k["Accelerator Core"] != "HCCL"]
    collectives = [k for k in kernels if k["Accelerator Core"] == "HCCL"]
    counts["kernel"] = len(compute)
    counts["device_annotation"] = counts.pop("hardware_other") - len(compute)
    assert counts["comm"] == len(collectives)
    return {
        "counts": {k: v for k, v in counts.items() if v},
        "kernel_ns": sum(us_to_ns(k["Duration(us)"]) for k in compute),
        "comm_ns": sum(us_to_ns(k["Duration(us)"]) for k in collectives),
    }


@pytest.mark.parametrize("level", LEVELS)
def test_torch_npu_text_imports_every_event(ascend_dir: Path, level: str) -> None:
    traces = load(ascend_dir / "torch_npu_text" / level)
    assert [t.meta["rank"] for t in traces] == [0, 1]
    for trace in traces:
        rank = trace.meta["rank"]
        output = (
            ascend_dir
            / "torch_npu_text"
            / level
            / f"rank{rank}_ascend_pt"
            / "ASCEND_PROFILER_OUTPUT"
        )
        expected = text_expectation(output)
        events = trace.events
        assert trace.source_kind == "torch_npu_text"
        assert trace.meta["profiler_level"] == level.capitalize()
        assert kind_counts(events) == expected["counts"]
        durations = kind_durations(events)
        # kernel_details rounds to 1 ns, the timeline's float durations to 1 ns: 1 ns per task
        assert abs(durations["kernel"] - expected["kernel_ns"]) <= expected["counts"]["kernel"]
        assert abs(durations["comm"] - expected["comm_ns"]) <= expected["counts"]["comm"]
        assert set(events.column("rank").to_pylist()) == {rank}
        assert events.schema.equals(schema.EVENTS_SCHEMA)
        starts = events.column("start_ns").to_pylist()
        assert starts == sorted(starts)
        # one device per rank, named by the memory tables (NPU:0 / NPU:1)
        devices = query("SELECT DISTINCT device FROM events WHERE device >= 0", events=events)
        assert devices == [(rank,)]


def test_level0_has_no_op_types_but_keeps_core_types(ascend_dir: Path) -> None:
    events = load(ascend_dir / "torch_npu_text" / "level0")[0].events
    kernels = query(
        "SELECT json_extract_string(args, '$.op_type') AS op_type, "
        "json_extract_string(args, '$.task_type') AS task_type FROM events WHERE kind = 'kernel'",
        events=events,
    )
    assert kernels and all(op_type is None for op_type, _ in kernels)
    # the timeline's scheduler type stands in for the core type
    assert {task_type for _, task_type in kernels} == {"AI_CORE", "MIX_AIV", "DSA_SQE"}


def test_level0_text_has_no_launches_and_says_so_by_correlation(ascend_dir: Path) -> None:
    # Level0 text exports record no CANN calls: device tasks cannot name their launch.
    events = load(ascend_dir / "torch_npu_text" / "level0")[0].events
    linked = query(
        "SELECT count(*) FROM events "
        "WHERE kind IN ('kernel', 'comm', 'memcpy') AND correlation >= 0",
        events=events,
    )
    assert linked == [(0,)]


def test_text_launch_links_follow_connection_ids(ascend_dir: Path) -> None:
    output = ascend_dir / "torch_npu_text" / "level2" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    trace = json.loads((output / "trace_view.json").read_text())
    process = {
        e["pid"]: e["args"]["name"]
        for e in trace
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    cann = {
        e["args"]["connection_id"]: e["name"]
        for e in trace
        if e.get("ph") == "X" and process.get(e["pid"]) == "CANN"
    }
    expected = Counter(
        cann[e["args"]["connection_id"]]
        for e in trace
        if e.get("ph") == "X"
        and process.get(e["pid"]) == "Ascend Hardware"
        and e["args"].get("Task Type") in ("AI_CORE", "MIX_AIV", "DSA_SQE")
    )
    events = load(ascend_dir / "torch_npu_text" / "level2")[0].events
    got = query(
        "SELECT l.name::VARCHAR, count(*) FROM events k JOIN events l "
        "ON l.correlation = k.correlation AND l.device < 0 "
        "WHERE k.kind = 'kernel' GROUP BY 1",
        events=events,
    )
    assert dict(got) == dict(expected)
    assert dict(got) == {"Node@launch": 187}


def test_hardware_counters_are_queryable(ascend_dir: Path) -> None:
    output = ascend_dir / "torch_npu_text" / "level2" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    with (output / "kernel_details.csv").open(newline="") as stream:
        rows = [r for r in csv.DictReader(stream) if r["Name"] == "Conv2D1"]
    (row,) = rows
    events = load(ascend_dir / "torch_npu_text" / "level2")[0].events
    got = query(
        "SELECT json_extract(args, '$.aic_mac_ratio')::DOUBLE, "
        "json_extract(args, '$.cube_utilization_pct')::DOUBLE, "
        "json_extract(args, '$.aic_mte2_ratio')::DOUBLE, "
        "json_extract(args, '$.block_dim')::INTEGER, "
        "json_extract_string(args, '$.task_type'), json_extract_string(args, '$.op_type'), "
        "shapes, dtypes FROM events WHERE name = 'Conv2D1'",
        events=events,
    )
    assert got == [
        (
            float(row["aic_mac_ratio"]),
            float(row["cube_utilization(%)"]),
            float(row["aic_mte2_ratio"]),
            int(row["Block Dim"]),
            "AI_CORE",
            "Conv2D",
            row["Input Shapes"].strip('"'),
            row["Input Data Types"],
        )
    ]


def test_memcpy_bytes_and_memory_counters(ascend_dir: Path) -> None:
    output = ascend_dir / "torch_npu_text" / "level2" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    trace = json.loads((output / "trace_view.json").read_text())
    expected_bytes = sum(
        e["args"]["data size(Byte)"] for e in trace if "data size(Byte)" in e.get("args", {})
    )
    loaded = load(ascend_dir / "torch_npu_text" / "level2")[0]
    events = loaded.events
    ((got,),) = query("SELECT sum(bytes) FROM events WHERE kind = 'memcpy'", events=events)
    assert got == expected_bytes
    with (output / "memory_record.csv").open(newline="") as stream:
        first = next(csv.DictReader(stream))
    value = query(
        "SELECT value FROM counters WHERE track = 'npu_memory' AND name = ? AND ts_ns = ?",
        params=[
            first["Component"].lower() + "/reserved_bytes",
            us_to_ns(first["Timestamp(us)"]),
        ],
        counters=loaded.counters,
    )
    # the file says MB (MiB): 2109.6015625 MB
    assert value == [(float(first["Total Reserved(MB)"]) * 1024 * 1024,)]


# --- torch_npu database ----------


def db_expectation(db: Path) -> dict[str, Any]:
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        text = dict(con.execute("SELECT id, value FROM STRING_IDS"))
        api_type = dict(con.execute("SELECT id, name FROM ENUM_API_TYPE"))
        counts: Counter[str] = Counter()
        for name, type_id in con.execute("SELECT name, type FROM PYTORCH_API"):
            label = text[name]
            kind = {"op": "cpu_op", "trace": "python", "queue": "annotation"}[api_type[type_id]]
            if label.startswith("ProfilerStep#"):
                kind = "step"
            elif label.startswith("enumerate(DataLoader)"):
                kind = "dataloader"
            counts[kind] += 1
        for (name,) in con.execute("SELECT name FROM CANN_API"):
            api = text[name]
            sync = any(word in api for word in _SYNC_WORDS) or api == "aclrtMemcpy"
            counts["sync" if sync else "runtime"] += 1
        counts["kernel"] = con.execute("SELECT count(*) FROM COMPUTE_TASK_INFO").fetchone()[0]
        counts["comm"] = con.execute("SELECT count(*) FROM COMMUNICATION_OP").fetchone()[0]
        task_types = Counter(text[t] for (t,) in con.execute("SELECT taskType FROM TASK"))
        counts["memcpy"] = task_types["MEMCPY_ASYNC"]
        total_tasks = sum(task_types.values())
        counts["device_annotation"] = total_tasks - counts["kernel"] - counts["memcpy"]
        kernel_ns = con.execute(
            "SELECT sum(t.endNs - t.startNs) FROM TASK t "
            "JOIN COMPUTE_TASK_INFO c USING (globalTaskId)"
        ).fetchone()[0]
        comm_ns = con.execute("SELECT sum(endNs - startNs) FROM COMMUNICATION_OP").fetchone()[0]
        rank = con.execute("SELECT rankId FROM RANK_DEVICE_MAP").fetchone()[0]
    finally:
        con.close()
    return {"counts": dict(counts), "kernel_ns": kernel_ns, "comm_ns": comm_ns, "rank": rank}


@pytest.mark.parametrize("level", LEVELS)
def test_torch_npu_db_imports_every_event(ascend_dir: Path, level: str) -> None:
    traces = load(ascend_dir / "torch_npu_db" / level)
    assert [t.meta["rank"] for t in traces] == [0, 1]
    for trace in traces:
        rank = trace.meta["rank"]
        db = (
            ascend_dir
            / "torch_npu_db"
            / level
            / f"rank{rank}_ascend_pt"
            / "ASCEND_PROFILER_OUTPUT"
            / f"ascend_pytorch_profiler_{rank}.db"
        )
        expected = db_expectation(db)
        assert expected["rank"] == rank
        events = trace.events
        assert trace.source_kind == "torch_npu_db"
        assert kind_counts(events) == expected["counts"]
        durations = kind_durations(events)
        assert durations["kernel"] == expected["kernel_ns"]
        assert durations["comm"] == expected["comm_ns"]
        assert trace.meta["device_properties"]["name"] == "Ascend910B"


def test_db_pmu_counters_are_named_and_scaled_like_the_csv(ascend_dir: Path) -> None:
    db = (
        ascend_dir
        / "torch_npu_db"
        / "level2"
        / "rank0_ascend_pt"
        / "ASCEND_PROFILER_OUTPUT"
        / "ascend_pytorch_profiler_0.db"
    )
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    text = dict(con.execute("SELECT id, value FROM STRING_IDS"))
    task_id = con.execute(
        "SELECT c.globalTaskId FROM COMPUTE_TASK_INFO c WHERE c.name = "
        "(SELECT id FROM STRING_IDS WHERE value = 'Conv2D1')"
    ).fetchone()[0]
    pmu = {
        text[n]: v
        for n, v in con.execute(
            "SELECT name, value FROM TASK_PMU_INFO WHERE globalTaskId = ?", (task_id,)
        )
    }
    con.close()
    events = load(ascend_dir / "torch_npu_db" / "level2")[0].events
    got = query(
        "SELECT json_extract(args, '$.aic_mac_ratio')::DOUBLE, "
        "json_extract(args, '$.aicore_time_us')::DOUBLE, "
        "json_extract(args, '$.aic_mte2_time_us')::DOUBLE FROM events WHERE name = 'Conv2D1'",
        events=events,
    )
    assert got == [
        (pmu["aic_mac_ratio"], pmu["aic_total_time"] / 1000, pmu["aic_mte2_time"] / 1000)
    ]


def _pmu_rows_rewritten(tmp_path: Path, name: str, order: str) -> dict[int, list[str]]:
    """Each task's args keys (by global task id) of a copy of the level 2 database whose
    TASK_PMU_INFO rows are stored again in ``order`` (an ORDER BY: "rowid DESC" reverses
    them; "rowid LIMIT 0" leaves none)."""
    source = DATA / "ascend" / "torch_npu_db" / "level2" / "rank0_ascend_pt"
    copy = tmp_path / name / "rank0_ascend_pt"
    shutil.copytree(source, copy)
    con = sqlite3.connect(copy / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")
    rows = con.execute(f"SELECT * FROM TASK_PMU_INFO ORDER BY {order}").fetchall()
    con.execute("DELETE FROM TASK_PMU_INFO")
    if rows:
        marks = ",".join("?" * len(rows[0]))
        con.executemany(f"INSERT INTO TASK_PMU_INFO VALUES ({marks})", rows)
    con.commit()
    con.close()
    keys: dict[int, list[str]] = {}
    for text in load(tmp_path / name)[0].events.column("args").to_pylist():
        args = json.loads(text) if text else {}
        if "global_task_id" in args:
            keys[args["global_task_id"]] = list(args)
    return keys


def test_db_pmu_counters_keep_the_databases_order_in_the_args(tmp_path: Path) -> None:
    # the args name a task's metrics in the order the database holds their rows, whatever
    # order the join hands them over in: stored reversed, they come reversed
    kept = _pmu_rows_rewritten(tmp_path, "kept", "rowid")
    reversed_ = _pmu_rows_rewritten(tmp_path, "reversed", "rowid DESC")
    bare = _pmu_rows_rewritten(tmp_path, "bare", "rowid LIMIT 0")
    assert kept.keys() == reversed_.keys() == bare.keys()
    with_metrics = 0
    for task, keys in kept.items():
        metrics = [k for k in keys if k not in bare[task]]
        assert [k for k in reversed_[task] if k not in bare[task]] == metrics[::-1]
        with_metrics += len(metrics) > 1
    assert with_metrics > 1


# --- msprof command line ----------


def test_msprof_op_summary_imports_and_reports_the_damaged_row(ascend_dir: Path) -> None:
    path = ascend_dir / "msprof_cli" / "op_summary_1.csv"
    with path.open(newline="") as stream:
        rows = list(csv.reader(stream))
    header, body = rows[0], rows[1:]
    whole = [dict(zip(header, r, strict=True)) for r in body if len(r) == len(header)]
    (trace,) = load(path)
    assert trace.source_kind == "msprof_cli"
    assert (
        trace.loss is not None and "op_summary_1.csv" in trace.loss and "1 malformed" in trace.loss
    )
    counts = kind_counts(trace.events)
    assert counts == {
        "comm": sum(r["Task Type"] == "HCCL" for r in whole),
        "kernel": sum(r["Task Type"] != "HCCL" for r in whole),
    }
    got = Counter(
        r[0]
        for r in query(
            "SELECT json_extract_string(args, '$.task_type') FROM events WHERE kind = 'kernel'",
            events=trace.events,
        )
    )
    assert got == Counter(r["Task Type"] for r in whole if r["Task Type"] != "HCCL")
    assert {"AI_CPU", "MIX_AIC", "DSA_SQE"} <= set(got)


def test_msprof_db_imports(ascend_dir: Path) -> None:
    path = ascend_dir / "msprof_cli" / "msprof_0.db"
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    compute = con.execute(
        "SELECT count(*) FROM COMPUTE_TASK_INFO c JOIN TASK USING (globalTaskId)"
    ).fetchone()[0]
    subtasks = con.execute(
        "SELECT count(*) FROM COMMUNICATION_TASK_INFO c JOIN TASK USING (globalTaskId)"
    ).fetchone()[0]
    cann = con.execute("SELECT count(*) FROM CANN_API").fetchone()[0]
    mstx = con.execute("SELECT count(*) FROM MSTX_EVENTS").fetchone()[0]
    con.close()
    (trace,) = load(path)
    counts = kind_counts(trace.events)
    assert counts["kernel"] == compute
    # no collective recorded (COMMUNICATION_OP is empty): its HCCL tasks stand for it
    assert counts["comm"] == subtasks
    assert counts.get("runtime", 0) + counts.get("sync", 0) == cann
    assert counts["annotation"] == mstx
    assert set(trace.events.column("device").to_pylist()) - {-1} == {2}


def test_msprof_folder_prefers_the_database(ascend_dir: Path) -> None:
    (trace,) = load(ascend_dir / "msprof_cli")
    assert trace.source_files[0].name == "msprof_0.db"


def test_every_sample_is_recognised(ascend_dir: Path) -> None:
    for path in [
        ascend_dir / "torch_npu_text",  # a folder of levels: not itself a run
    ]:
        assert not is_ascend(path)
    for level in LEVELS:
        for kind in ("torch_npu_text", "torch_npu_db"):
            base = ascend_dir / kind / level
            assert is_ascend(base)
            assert is_ascend(base / "rank1_ascend_pt")
            assert is_ascend(base / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    assert is_ascend(ascend_dir / "msprof_cli" / "msprof_0.db")
    assert is_ascend(ascend_dir / "msprof_cli" / "op_summary_1.csv")
    single = load(ascend_dir / "torch_npu_text" / "level1" / "rank1_ascend_pt")
    assert [t.meta["rank"] for t in single] == [1]
