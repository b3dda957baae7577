"""The same synthetic run written as torch_npu text, torch_npu database and msprof output.

The run is described once in tests/ascend_gen.py with its figures derived by hand; each export
must import to the same canonical events and the same accounting.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis.accounting import device_accounting
from perfledger.analysis.steps import step_windows
from perfledger.errors import PerfledgerError
from perfledger.model.trace import Trace
from perfledger.sources.ascend import is_ascend, load_ascend
from tests import ascend_gen as gen
from tests.cli import perfledger

US = 1000


def query(sql: str, **tables: pa.Table) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return con.execute(sql).fetchall()
    finally:
        con.close()


def only(traces: list[Trace]) -> Trace:
    (trace,) = traces
    return trace


def comparable(events: pa.Table) -> list[tuple[Any, ...]]:
    """What both exports must agree on, row by row (pids and source-specific args aside)."""
    return query(
        """
        SELECT e.kind::VARCHAR, e.name::VARCHAR, e.device, e.stream, e.start_ns, e.dur_ns,
            CASE WHEN e.kind = 'memcpy' THEN NULL ELSE e.bytes END, e.shapes, e.dtypes,
            json_extract_string(e.args, '$.task_type'), json_extract_string(e.args, '$.op_type'),
            json_extract(e.args, '$.block_dim')::INTEGER,
            json_extract(e.args, '$.aic_mac_ratio')::DOUBLE,
            launch.name::VARCHAR, host_op.name::VARCHAR
        FROM events e
        LEFT JOIN events launch ON e.correlation >= 0 AND launch.correlation = e.correlation
            AND launch.device < 0 AND e.device >= 0
        LEFT JOIN events host_op ON e.external_id >= 0 AND host_op.external_id = e.external_id
            AND host_op.kind = 'cpu_op' AND e.kind <> 'cpu_op'
        WHERE e.kind NOT IN ('python', 'annotation')
        ORDER BY e.start_ns, e.kind, e.name
        """,
        events=events,
    )


def test_text_and_database_give_the_same_events_and_accounting(tmp_path: Path) -> None:
    text = only(load_ascend(gen.write_text(tmp_path / "text")))
    db = only(load_ascend(gen.write_db(tmp_path / "db")))
    assert text.source_kind == "torch_npu_text"
    assert db.source_kind == "torch_npu_db"
    assert comparable(text.events) == comparable(db.events)
    accounts = []
    for trace in (text, db):
        windows = step_windows(trace.events)
        (account,) = [a for a in device_accounting(trace.events, windows).windows if a.step == 7]
        accounts.append(account)
    assert accounts[0] == accounts[1]
    account = accounts[0]
    assert account.wall_ns == 1000 * US
    assert account.compute_ns == gen.COMPUTE_US * US
    assert account.communication_ns == gen.COMMUNICATION_US * US
    assert account.overlapped_communication_ns == 0
    assert account.memcpy_ns == gen.MEMCPY_US * US


def test_every_step_of_a_longer_run_in_both_formats(tmp_path: Path) -> None:
    run = gen.make_run(steps=3)
    text = only(load_ascend(gen.write_text(tmp_path / "text", run)))
    db = only(load_ascend(gen.write_db(tmp_path / "db", run)))
    assert comparable(text.events) == comparable(db.events)
    per_format = []
    for trace in (text, db):
        windows = step_windows(trace.events)
        assert [w.step for w in windows] == [7, 8, 9]
        accounts = [a for a in device_accounting(trace.events, windows).windows if a.step >= 0]
        for account in accounts:
            account.self_check()
            assert account.wall_ns == gen.STEP_US * US
            assert account.compute_ns == gen.COMPUTE_US * US
            assert account.communication_ns == gen.COMMUNICATION_US * US
            assert account.memcpy_ns == gen.MEMCPY_US * US
        per_format.append(accounts)
    assert per_format[0] == per_format[1]


def test_kinds_links_and_args_of_the_run(tmp_path: Path) -> None:
    events = only(load_ascend(gen.write_text(tmp_path))).events
    rows = comparable(events)
    by_name = {(r[0], r[1]): r for r in rows}
    kinds = sorted({(r[0], r[1]) for r in rows if r[0] not in ("cpu_op", "runtime")})
    assert kinds == [
        ("comm", "hcom_allReduce__1_0_1"),
        ("dataloader", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
        ("device_annotation", "Notify Wait"),  # HCCL's own tasks, inside their collective
        ("device_annotation", "SDMA"),
        ("kernel", "Add1"),
        ("kernel", "Conv2D1"),
        ("memcpy", "MEMCPY_ASYNC"),
        ("step", "ProfilerStep#7"),
        ("sync", "AscendCL@aclrtSynchronizeStream"),
    ]
    conv = by_name[("kernel", "Conv2D1")]
    assert conv[2:6] == (0, 2, gen._ns(300), 100 * US)
    assert conv[7:] == (
        "32,3,224,224;64,3,11,11",
        "FLOAT;FLOAT",
        "AI_CORE",
        "Conv2D",
        16,
        0.525,
        "Node@launch",
        "Conv2D",
    )
    add = by_name[("kernel", "Add1")]
    assert add[9:11] == ("AI_VECTOR_CORE", "Add") and add[12] is None  # N/A counter: absent
    comm = by_name[("comm", "hcom_allReduce__1_0_1")]
    assert comm[3] == 4  # the stream of its tasks
    assert comm[6] == gen.COLLECTIVE_COUNT * 4  # FP32 elements
    assert comm[9] == "HCCL" and comm[13:] == ("Node@launch", "HcclAllreduce")
    memcpy = [r for r in rows if r[0] == "memcpy"][0]
    assert memcpy[13:] == ("AscendCL@aclrtMemcpyAsync", "aten::copy_")
    (size,) = query("SELECT bytes FROM events WHERE kind = 'memcpy'", events=events)
    assert size == (4096,)


def test_host_to_device_flow_links_a_task_without_connection_id(tmp_path: Path) -> None:
    rank_dir = gen.write_text(tmp_path)
    timeline = rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(timeline.read_text())
    task = next(e for e in events if e.get("name") == "Conv2D1")
    launch = next(
        e for e in events if e.get("name") == "Node@launch" and e["args"]["connection_id"] == 11
    )
    del task["args"]["connection_id"]
    for e in events:  # no other path to the launch either
        if e.get("cat") == "async_npu":
            e["cat"] = "unrelated"
    flow = {"name": "HostToDevice11", "cat": "HostToDevice", "id": "11"}
    events.append(
        {**flow, "ph": "s", "pid": launch["pid"], "tid": launch["tid"], "ts": launch["ts"]}
    )
    events.append(
        {**flow, "ph": "f", "bp": "e", "pid": task["pid"], "tid": task["tid"], "ts": task["ts"]}
    )
    timeline.write_text(json.dumps(events))
    loaded = only(load_ascend(rank_dir)).events
    linked = query(
        "SELECT l.name::VARCHAR, l.start_ns FROM events k JOIN events l "
        "ON l.correlation = k.correlation AND l.device < 0 WHERE k.name = 'Conv2D1'",
        events=loaded,
    )
    assert linked == [("Node@launch", gen._ns(220))]


@settings(max_examples=30, deadline=None)
@given(
    texts=st.lists(
        st.sampled_from(["plain", "a}, {b", "}, {", "},{", "x},\n{y", "\u00e9"]), max_size=60
    ),
    chunk_bytes=st.integers(1, 4000),
)
def test_timeline_pieces_decode_like_the_whole_file(texts: list[str], chunk_bytes: int) -> None:
    from perfledger.sources import ascend_timeline

    events = [
        {
            "ph": "X",
            "name": f"op{i}",
            "pid": 1,
            "tid": 2,
            "ts": f"{1000 + i}.5",
            "dur": 1.5,
            "args": {"text": text},
        }
        for i, text in enumerate(texts)
    ]
    base = Path(tempfile.mkdtemp(prefix="ascend-pieces-"))
    try:
        path = base / "trace_view.json"
        path.write_text(json.dumps(events))
        if not events:
            with pytest.raises(PerfledgerError):
                ascend_timeline.decode_timeline(path, chunk_bytes)
            return
        whole = ascend_timeline.decode_timeline(path, 10**9)
        assert ascend_timeline.decode_timeline(path, chunk_bytes).equals(whole)
        assert whole.column("name").to_pylist() == [e["name"] for e in events]
    finally:
        shutil.rmtree(base)


def test_database_with_shapes_and_types_swapped(tmp_path: Path) -> None:
    events = only(load_ascend(gen.write_db(tmp_path, swap_shapes_and_types=True))).events
    assert query(
        "SELECT DISTINCT shapes, dtypes FROM events WHERE name = 'aten::conv2d'", events=events
    ) == [("0;;", "float;Scalar")]


def _write_msprof(root: Path, kernel_lines: list[list[str]], header: list[str]) -> Path:
    prof = root / "PROF_000001_20250101000000_ABCDEFGH"
    output = prof / "mindstudio_profiler_output"
    output.mkdir(parents=True)
    half = len(kernel_lines) // 2
    for index, part in enumerate((kernel_lines[:half], kernel_lines[half:])):
        lines = [",".join(header)] + [",".join(cells) for cells in part]
        (output / f"op_summary_slice_{index}_20250101000000.csv").write_text("\n".join(lines))
    return prof


def test_msprof_op_summary_slices_with_renamed_columns(tmp_path: Path) -> None:
    rows = gen.MSPROF_SLICE_ROWS
    prof = _write_msprof(tmp_path, rows, gen.MSPROF_SLICE_HEADER)
    assert is_ascend(prof)
    trace = only(load_ascend(prof))
    assert trace.source_kind == "msprof_cli"
    got = query(
        "SELECT kind::VARCHAR, name::VARCHAR, device, start_ns, dur_ns, "
        "json_extract_string(args, '$.task_type'), json_extract(args, '$.block_dim')::INTEGER, "
        "json_extract(args, '$.aiv_vec_ratio')::DOUBLE FROM events ORDER BY start_ns",
        events=trace.events,
    )
    assert got == [
        ("kernel", "Cast", 3, 1_000_500, 2_250, "AI_VECTOR_CORE", 8, 0.5),
        ("kernel", "MatMul", 3, 1_010_000, 40_000, "AI_CORE", 24, None),
        ("comm", "hcom_allGather__1", 3, 1_100_000, 50_000, "HCCL", 0, None),
        ("kernel", "Transdata_AICPU", 3, 1_200_125, 7_500, "AI_CPU", 1, None),
    ]


def test_msprof_timeline_json_is_read_like_trace_view(tmp_path: Path) -> None:
    text_run = gen.write_text(tmp_path / "text")
    prof = tmp_path / "PROF_000002_x"
    output = prof / "mindstudio_profiler_output"
    output.mkdir(parents=True)
    shutil.copy(
        text_run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", output / "msprof_20250101.json"
    )
    trace = only(load_ascend(prof))
    reference = only(load_ascend(text_run))
    kinds = dict(
        query("SELECT kind::VARCHAR, count(*) FROM events GROUP BY 1", events=trace.events)
    )
    expected = dict(
        query("SELECT kind::VARCHAR, count(*) FROM events GROUP BY 1", events=reference.events)
    )
    assert kinds == expected


def test_memory_units_by_header(tmp_path: Path) -> None:
    rank_dir = gen.write_text(tmp_path)
    (rank_dir / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv").write_text(
        "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Total Active(MB),"
        "Stream Ptr,Device Type\n"
        "PTA,1736400000000010.000\t,1.5,2,N/A,,NPU:0\n"
    )
    prof = _write_msprof(
        tmp_path / "m",
        [["0", "Cast", "Cast", "AI_CORE", "1", "1", "1", "0"]] * 2,
        gen.MSPROF_SLICE_HEADER,
    )
    (prof / "mindstudio_profiler_output" / "npu_mem_20250101.csv").write_text(
        "Device_id,Component,Timestamp(us),Total Reserved(KB)\n0,APP,1000,4\n"
    )
    text_counters = only(load_ascend(rank_dir)).counters
    assert query(
        "SELECT name, ts_ns, value FROM counters WHERE track = 'npu_memory' ORDER BY name",
        counters=text_counters,
    ) == [
        ("pta/allocated_bytes", gen._ns(10), 1.5 * 1024 * 1024),
        ("pta/reserved_bytes", gen._ns(10), 2 * 1024 * 1024),
    ]
    msprof_counters = only(load_ascend(prof)).counters
    assert query(
        "SELECT name, value FROM counters WHERE track = 'npu_memory'", counters=msprof_counters
    ) == [("app/reserved_bytes", 4096.0)]


# --- bad input ---------------------------------------------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return perfledger(*args, cwd=cwd, inherit_env=True)


def test_empty_mindstudio_output_is_a_clear_error(tmp_path: Path) -> None:
    output = tmp_path / "PROF_000003_x" / "mindstudio_profiler_output"
    output.mkdir(parents=True)
    for name in ("op_summary_20250101.csv", "msprof_20250101.json", "op_statistic_20250101.csv"):
        (output / name).write_bytes(b"")
    with pytest.raises(PerfledgerError) as error:
        load_ascend(output.parent)
    assert error.value.exit_code == 2
    assert str(output) in str(error.value) and "empty" in str(error.value)
    result = run_cli("analyze", str(output.parent), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2
    assert str(output) in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_directory_without_profiler_output_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing to see")
    with pytest.raises(PerfledgerError) as error:
        load_ascend(tmp_path)
    assert str(tmp_path) in str(error.value) and error.value.exit_code == 2
    result = run_cli("analyze", str(tmp_path), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2
    assert str(tmp_path) in result.stderr and "Traceback" not in result.stderr


def test_csv_missing_required_columns_is_a_clear_error(tmp_path: Path) -> None:
    rank_dir = gen.write_text(tmp_path)
    output = rank_dir / "ASCEND_PROFILER_OUTPUT"
    (output / "trace_view.json").unlink()
    (output / "kernel_details.csv").write_text("Name,Type,Duration(us)\nConv2D1,Conv2D,10\n")
    with pytest.raises(PerfledgerError) as error:
        load_ascend(rank_dir)
    message = str(error.value)
    assert str(output / "kernel_details.csv") in message
    assert "Start Time(us)" in message and error.value.exit_code == 2
    result = run_cli("analyze", str(rank_dir), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2 and "kernel_details.csv" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"traceEvents": []}', b"[1, 2, 3]", b"\x00\x01garbage"]
)
def test_unreadable_timeline_names_the_file(tmp_path: Path, content: bytes) -> None:
    rank_dir = gen.write_text(tmp_path)
    timeline = rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    timeline.write_bytes(content)
    # without a kernel table to read instead (test_ascend_damaged: the table is read then)
    (timeline.parent / "kernel_details.csv").unlink()
    with pytest.raises(PerfledgerError) as error:
        load_ascend(rank_dir)
    assert str(timeline) in str(error.value)


def test_unreadable_database_names_the_file(tmp_path: Path) -> None:
    rank_dir = gen.write_db(tmp_path)
    db = rank_dir / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(PerfledgerError) as error:
        load_ascend(rank_dir)
    assert str(db) in str(error.value)


def test_two_ranks_with_the_same_output_are_reported(tmp_path: Path) -> None:
    first = gen.write_text(tmp_path / "a")
    shutil.copytree(first, tmp_path / "runs" / "rank0_ascend_pt")
    shutil.copytree(first, tmp_path / "runs" / "rank1_ascend_pt")
    info = tmp_path / "runs" / "rank1_ascend_pt" / "profiler_info_0.json"
    document = json.loads(info.read_text())
    document["rank_id"] = 1
    info.write_text(json.dumps(document))
    traces = load_ascend(tmp_path / "runs")
    assert [t.meta["rank"] for t in traces] == [0, 1]
    assert [t.meta["world_size"] for t in traces] == [2, 2]
    assert traces[0].loss is None
    timeline = tmp_path / "runs" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    # one note, led by the file it is about
    assert traces[1].loss == (
        f"{timeline}: same content as rank 0's {str(timeline).replace('rank1', 'rank0')}, "
        "one rank's output probably copied over another's"
    )


@settings(max_examples=40, deadline=None)
@given(
    file_name=st.sampled_from(
        [
            "ASCEND_PROFILER_OUTPUT/trace_view.json",
            "ASCEND_PROFILER_OUTPUT/kernel_details.csv",
            "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db",
            "profiler_info_0.json",
        ]
    ),
    action=st.sampled_from(["truncate", "flip", "insert"]),
    where=st.floats(0, 1, exclude_max=True),
    junk=st.binary(min_size=1, max_size=8),
)
def test_damaged_files_raise_our_error_or_load(
    file_name: str, action: str, where: float, junk: bytes
) -> None:
    base = Path(tempfile.mkdtemp(prefix="ascend-damage-"))
    try:
        write = gen.write_db if file_name.endswith(".db") else gen.write_text
        rank_dir = write(base)
        target = rank_dir / file_name
        content = bytearray(target.read_bytes())
        position = int(where * len(content))
        if action == "truncate":
            del content[position:]
        elif action == "flip":
            content[position] = junk[0]
        else:
            content[position:position] = junk
        target.write_bytes(bytes(content))
        try:
            traces = load_ascend(rank_dir)
        except PerfledgerError as error:
            assert error.exit_code == 2
            assert str(rank_dir) in str(error)
        else:
            assert len(traces) == 1
    finally:
        shutil.rmtree(base)
