"""Every real Kineto trace imports; figures checked against the files read with stdlib json."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfledger.model import schema
from perfledger.sources.kineto import load_kineto
from tests.paths import DATA

TRACES = [
    "a100_alexnet.json.gz",
    "a100_rank3_control.json.gz",
    "a100_triton.json.gz",
    "cpu_only_rank34.json.gz",
    "mi250_rocm_minitoy.json.gz",
    "mtia_inference.json.gz",
    "old_pt18_inference_rank1.json.gz",
    "resnet50_gpu_2021.json.gz",
    "v100_ns_timestamps.json.gz",
    "v100_rank1_ddp.json.gz",
    "v100_rank1_test.json.gz",
    "sampled_2ranks/rank-0.json.gz",
    "sampled_2ranks/rank-1.json.gz",
    "h200/train_cnn.json.gz",
    "h200/train_cnn_full.json.gz",
    "h200/infer_cnn.json.gz",
    "h200/ddp/rank0.json.gz",
    "h200/ddp/rank1.json.gz",
    "h200/llm_eager.json.gz",
    "h200/llm_graphs.json.gz",
    "h200/llm_compile.json.gz",
]


@pytest.fixture(scope="module")
def kineto_dir() -> Path:
    path = DATA / "kineto"
    missing = [name for name in TRACES if not (path / name).is_file()]
    if missing:
        pytest.fail(f"real traces missing under {path}: {', '.join(missing)}")
    return path


@cache
def _document(path: Path) -> dict[str, Any]:
    # Decimal keeps every digit of float timestamps, like the importer must.
    with gzip.open(path, "rt") as f:
        return json.load(f, parse_float=Decimal)  # type: ignore[no-any-return]


@cache
def _trace(path: Path) -> Any:
    return load_kineto(path)


def _x_events(doc: dict[str, Any], *cats: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats]


def _of_kind(table: pa.Table, *kinds: str) -> pa.Table:
    return table.filter(pc.is_in(table["kind"].cast(pa.string()), pa.array(list(kinds))))


def _ns(value: Any) -> int:
    return int(Decimal(value) * 1000)


@pytest.mark.parametrize("name", TRACES)
def test_every_trace_imports_whole(kineto_dir: Path, name: str) -> None:
    path = kineto_dir / name
    trace = _trace(path)
    doc = _document(path)
    events = trace.events
    assert trace.loss is None
    assert trace.source_kind == "kineto"
    assert trace.source_files == (path,)
    assert events.schema == schema.EVENTS_SCHEMA
    # every complete and instant event on a real process becomes one row
    expected = [
        e for e in doc["traceEvents"] if e.get("ph") in ("X", "i") and isinstance(e.get("pid"), int)
    ]
    assert events.num_rows == len(expected)
    assert Counter(events["name"].to_pylist()) == Counter(e["name"] for e in expected)
    starts = events["start_ns"].to_pylist()
    durs = events["dur_ns"].to_pylist()
    keys = list(zip(starts, durs, strict=True))
    assert keys == sorted(keys, key=lambda k: (k[0], -k[1]))
    base = int(doc.get("baseTimeNanoseconds", 0))
    assert sorted(starts) == sorted(base + _ns(e["ts"]) for e in expected)
    assert sum(durs) == sum(_ns(e.get("dur", 0)) for e in expected)


@pytest.mark.parametrize("name", TRACES)
def test_device_task_counts_match_the_file(kineto_dir: Path, name: str) -> None:
    path = kineto_dir / name
    events = _trace(path).events
    doc = _document(path)
    if not _x_events(doc, "mtia_ccp_events"):  # MTIA: see test_mtia_device_tasks
        kernels = _x_events(doc, "kernel", "Kernel")
        assert _of_kind(events, schema.KERNEL, schema.COMM).num_rows == len(kernels)
        copies = _x_events(doc, "gpu_memcpy", "Memcpy")
        table = _of_kind(events, schema.MEMCPY)
        assert table.num_rows == len(copies)
        # ROCm copies carry no bytes: the HIP call that issued them has the size
        sizes = {
            e["args"]["correlation"]: int(e["args"]["size"])
            for e in _x_events(doc, "cuda_runtime")
            if "size" in e["args"] and "correlation" in e["args"]
        }
        expected = sum(
            e["args"]["bytes"] if "bytes" in e["args"] else sizes[e["args"]["correlation"]]
            for e in copies
        )
        assert (pc.sum(table["bytes"]).as_py() or 0) == expected
    fills = _x_events(doc, "gpu_memset", "Memset")
    table = _of_kind(events, schema.MEMSET)
    assert table.num_rows == len(fills)
    assert (pc.sum(table["bytes"]).as_py() or 0) == sum(e["args"]["bytes"] for e in fills)


def test_v100_ddp(kineto_dir: Path) -> None:
    path = kineto_dir / "v100_rank1_ddp.json.gz"
    trace = _trace(path)
    doc = _document(path)
    events = trace.events
    nccl = [e for e in _x_events(doc, "kernel") if "nccl" in e["name"].lower()]
    comm = _of_kind(events, schema.COMM)
    assert comm.num_rows == len(nccl) > 0
    assert set(comm["name"].to_pylist()) == {e["name"] for e in nccl}
    copies = _x_events(doc, "gpu_memcpy")
    memcpy = _of_kind(events, schema.MEMCPY)
    assert pc.sum(memcpy["bytes"]).as_py() == sum(e["args"]["bytes"] for e in copies)
    # the file holds five step annotations; HTA lists four because it drops the last,
    # unfinished one: the importer keeps them all, by name
    steps = _of_kind(events, schema.STEP)
    assert steps["name"].to_pylist() == [f"ProfilerStep#{n}" for n in range(2, 7)]
    assert set(steps["device"].to_pylist()) == {-1}
    assert trace.meta["rank"] == 1
    assert trace.meta["world_size"] == 2
    assert trace.meta["vendor"] == "cuda"
    # every kernel is linked to the launch call that issued it
    launches = set(_of_kind(events, schema.RUNTIME, schema.SYNC)["correlation"].to_pylist())
    kernels = _of_kind(events, schema.KERNEL, schema.COMM)
    assert set(kernels["correlation"].to_pylist()) <= launches
    # [memory] instants give the allocator counters, one pair per event
    memory = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    counters = trace.counters
    assert counters.num_rows == 2 * len(memory)
    allocated = counters.filter(pc.equal(counters["name"], "allocated_bytes"))
    assert sorted(
        zip(allocated["ts_ns"].to_pylist(), allocated["value"].to_pylist(), strict=True)
    ) == sorted((_ns(e["ts"]), float(e["args"]["Total Allocated"])) for e in memory)
    # c10 device types: 0 is the CPU (device id -1), 1 is CUDA
    assert set(counters["track"].to_pylist()) == {
        "cpu" if e["args"]["Device Type"] == 0 else f"cuda:{e['args']['Device Id']}" for e in memory
    }


def test_ns_timestamps_are_exact(kineto_dir: Path) -> None:
    path = kineto_dir / "v100_ns_timestamps.json.gz"
    events = _trace(path).events
    doc = _document(path)
    kernel = _x_events(doc, "kernel")[0]
    assert "." in str(kernel["ts"])
    row = events.filter(
        pc.and_(
            pc.equal(events["correlation"], kernel["args"]["correlation"]),
            pc.equal(events["kind"].cast(pa.string()), schema.KERNEL),
        )
    ).to_pylist()[0]
    assert row["start_ns"] == _ns(kernel["ts"])
    assert row["dur_ns"] == _ns(kernel["dur"])


def test_mi250_hip_launches_link_to_kernels(kineto_dir: Path) -> None:
    trace = _trace(kineto_dir / "mi250_rocm_minitoy.json.gz")
    events = trace.events
    assert trace.meta["vendor"] == "rocm"
    launches = _of_kind(events, schema.RUNTIME)
    hip = launches.filter(pc.starts_with(launches["name"].cast(pa.string()), "hip"))
    assert hip.num_rows > 0
    linked = dict(zip(hip["correlation"].to_pylist(), hip["name"].to_pylist(), strict=True))
    kernels = _of_kind(events, schema.KERNEL)
    assert kernels.num_rows == 14
    assert {linked[c] for c in kernels["correlation"].to_pylist()} == {
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
    }
    base = trace.meta["base_time_ns"]
    assert base == 1735632360000000000
    assert min(events["start_ns"].to_pylist()) > base


def test_cpu_only_has_no_device_rows(kineto_dir: Path) -> None:
    trace = _trace(kineto_dir / "cpu_only_rank34.json.gz")
    assert set(trace.events["device"].to_pylist()) == {-1}
    assert trace.meta["vendor"] == "cpu"
    assert trace.meta["rank"] == 34


def test_mtia_device_tasks(kineto_dir: Path) -> None:
    path = kineto_dir / "mtia_inference.json.gz"
    trace = _trace(path)
    doc = _document(path)
    ccp = Counter(e["name"] for e in _x_events(doc, "mtia_ccp_events"))
    events = trace.events
    assert trace.meta["vendor"] == "mtia"
    memcpy = _of_kind(events, schema.MEMCPY)
    assert memcpy.num_rows == ccp["dma_request"]
    assert pc.sum(memcpy["bytes"]).as_py() == sum(
        e["args"]["size"] for e in _x_events(doc, "mtia_ccp_events") if e["name"] == "dma_request"
    )
    assert _of_kind(events, schema.KERNEL).num_rows == ccp["pe_exe"] + ccp["remote"] + ccp["merge"]
    assert set(_of_kind(events, schema.MEMCPY, schema.KERNEL)["device"].to_pylist()) == {17}


def test_old_pt18_trace(kineto_dir: Path) -> None:
    trace = _trace(kineto_dir / "old_pt18_inference_rank1.json.gz")
    events = trace.events
    kinds = Counter(events["kind"].cast(pa.string()).to_pylist())
    assert kinds == {"runtime": 8, "kernel": 4}
    assert trace.meta["rank"] == 1
    kernels = _of_kind(events, schema.KERNEL)
    assert min(kernels["external_id"].to_pylist()) >= 0


def test_sampled_ranks_keep_their_rank(kineto_dir: Path) -> None:
    assert _trace(kineto_dir / "sampled_2ranks/rank-0.json.gz").meta["rank"] == 0
    one = _trace(kineto_dir / "sampled_2ranks/rank-1.json.gz")
    assert one.meta["rank"] == 1
    assert set(one.events["rank"].to_pylist()) == {1}


def test_a_scaled_copy_imports_with_every_copy(kineto_dir: Path, tmp_path: Path) -> None:
    # the generator used for the throughput and memory measurements
    from tests.kineto_gen import scale_trace

    source = kineto_dir / "old_pt18_inference_rank1.json.gz"
    one = _trace(source).events
    scaled = load_kineto(scale_trace(source, tmp_path / "scaled.json", 3)).events
    assert scaled.num_rows == 3 * one.num_rows
    span = max(one["start_ns"].to_pylist()) - min(one["start_ns"].to_pylist())
    assert min(scaled["start_ns"].to_pylist()) == min(one["start_ns"].to_pylist())
    assert max(scaled["start_ns"].to_pylist()) > 2 * span + min(one["start_ns"].to_pylist())
