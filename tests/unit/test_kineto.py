"""Kineto importer on synthetic documents: every mapping rule, exact times, bad input."""

from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.errors import PerfledgerError, TraceFormatError
from perfledger.model import schema
from perfledger.run.mapped_files import same_buffers
from perfledger.sources import kineto, kineto_layout, kineto_stream
from perfledger.sources.kineto import is_kineto, load_kineto
from perfledger.sources.kineto_text import float_us_ns, text_us_ns
from tests import kineto_gen as gen
from tests.kineto_gen import Num
from tests.synth import assert_same_events

HOST = 100
GPU = 0


def rows(trace_events: pa.Table) -> list[dict[str, Any]]:
    return trace_events.to_pylist()


def by_name(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rows(table)}


def write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json", **top: Any) -> Path:
    return gen.write_kineto(tmp_path / name, events, **top)


# --- timestamps -------------------------------------------------------------------------------


def test_integer_microseconds_become_ns(tmp_path: Path) -> None:
    path = write(tmp_path, [gen.cpu_op("aten::mm", 1669783687464181, 45, external_id=1)])
    (row,) = rows(load_kineto(path).events)
    assert row["start_ns"] == 1669783687464181000
    assert row["dur_ns"] == 45000


def test_epoch_float_microseconds_keep_every_digit(tmp_path: Path) -> None:
    # float64 cannot hold these: 1712195495505543.2 is 1712195495505543.25 as a double
    events = [
        gen.cpu_op("a", Num("1712195495505543.2"), Num("63.813"), external_id=1),
        gen.cpu_op("b", Num("1712195495519689.047"), Num("0.001"), external_id=2),
        gen.cpu_op("c", Num("1712195495519700"), Num("68.0"), external_id=3),
    ]
    found = by_name(load_kineto(write(tmp_path, events)).events)
    assert found["a"]["start_ns"] == 1712195495505543200
    assert found["a"]["dur_ns"] == 63813
    assert found["b"]["start_ns"] == 1712195495519689047
    assert found["b"]["dur_ns"] == 1
    assert found["c"]["start_ns"] == 1712195495519700000
    assert found["c"]["dur_ns"] == 68000


def test_relative_float_timestamps_add_the_base_time(tmp_path: Path) -> None:
    base = 1735632360000000000
    events = [
        gen.cpu_op("a", Num("4203669604595.407"), Num("340.024"), external_id=1),
        gen.cpu_op("b", Num("4203669604613.811"), Num("0.999"), external_id=2),
    ]
    trace = load_kineto(write(tmp_path, events, _after={"baseTimeNanoseconds": base}))
    found = by_name(trace.events)
    assert found["a"]["start_ns"] == base + 4203669604595407
    assert found["a"]["dur_ns"] == 340024
    assert found["b"]["start_ns"] == base + 4203669604613811
    assert found["b"]["dur_ns"] == 999
    assert trace.meta["base_time_ns"] == base


def test_unusual_number_spellings_are_read_exactly(tmp_path: Path) -> None:
    events = [
        gen.cpu_op("exp", Num("1.5e3"), Num("2E1"), external_id=1),
        gen.cpu_op("many", Num("10.1234567"), Num("1.0005"), external_id=2),
        gen.cpu_op("quoted", "1736408883704643.212", "1.5", external_id=3),
    ]
    found = by_name(load_kineto(write(tmp_path, events)).events)
    assert (found["exp"]["start_ns"], found["exp"]["dur_ns"]) == (1_500_000, 20_000)
    # digits past the ns are rounded half up
    assert (found["many"]["start_ns"], found["many"]["dur_ns"]) == (10_123, 1_001)
    assert found["quoted"]["start_ns"] == 1736408883704643212
    assert found["quoted"]["dur_ns"] == 1500


# --- kinds --------------------------------------------------------------------------------------


def _gpu_trace() -> list[dict[str, Any]]:
    return [
        gen.complete("user_annotation", "ProfilerStep#7", 1000, 500, **{"External id": 1}),
        gen.complete("user_annotation", "my_region", 1001, 10, **{"External id": 2}),
        gen.complete(
            "user_annotation",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            1002,
            50,
            **{"External id": 3},
        ),
        gen.cpu_op(
            "aten::mm",
            1100,
            30,
            external_id=4,
            **{"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "flops": 48},
        ),
        gen.complete("python_function", "nn.Module: Linear", 1090, 60, **{"Python id": 9}),
        gen.runtime("cudaLaunchKernel", 1105, 5, correlation=11, external_id=4),
        gen.runtime("cudaMemcpyAsync", 1111, 4, correlation=12, external_id=4),
        gen.runtime("cudaStreamSynchronize", 1116, 40, correlation=13, external_id=4),
        gen.runtime("cudaMemsetAsync", 1157, 2, correlation=14, external_id=4),
        gen.runtime("cudaLaunchKernel", 1160, 3, correlation=15, external_id=4),
        gen.device_task("kernel", "volta_sgemm_128x64_nn", 1120, 20, correlation=11, stream=7),
        gen.device_task(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            1141,
            9,
            correlation=12,
            stream=7,
            bytes=4096,
        ),
        gen.device_task(
            "cuda_sync",
            "Stream Sync",
            1155,
            1,
            correlation=13,
            stream=7,
            cuda_sync_kind="Stream Sync",
        ),
        gen.device_task(
            "gpu_memset", "Memset (Device)", 1158, 1, correlation=14, stream=7, bytes=512
        ),
        gen.device_task(
            "kernel",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
            1165,
            50,
            correlation=15,
            stream=20,
        ),
        gen.device_task(
            "gpu_user_annotation", "nccl:all_reduce", 1165, 50, correlation=None, stream=20
        ),
        gen.instant(
            "[memory]",
            1101,
            **{
                "Device Type": 1,
                "Device Id": 0,
                "Bytes": 4096,
                "Total Allocated": 8192,
                "Total Reserved": 1 << 20,
            },
        ),
        gen.metadata("process_name", HOST, name="python"),
        gen.metadata("process_labels", GPU, labels="GPU 0"),
        gen.metadata("thread_name", HOST, HOST, name="thread 100 (python)"),
        *gen.profiler_span(900, 2000),
    ]


@pytest.fixture
def gpu_trace(tmp_path: Path) -> Any:
    return load_kineto(
        write(
            tmp_path,
            _gpu_trace(),
            schemaVersion=1,
            deviceProperties=[{"id": 0, "name": "NVIDIA A100"}],
            distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8},
        )
    )


def test_each_category_maps_to_its_kind(gpu_trace: Any) -> None:
    kinds = {r["name"]: r["kind"] for r in rows(gpu_trace.events)}
    assert kinds == {
        "ProfilerStep#7": schema.STEP,
        "my_region": schema.ANNOTATION,
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": schema.DATALOADER,
        "aten::mm": schema.CPU_OP,
        "nn.Module: Linear": schema.PYTHON,
        "cudaLaunchKernel": schema.RUNTIME,
        "cudaMemcpyAsync": schema.RUNTIME,
        "cudaStreamSynchronize": schema.SYNC,
        "cudaMemsetAsync": schema.RUNTIME,
        "volta_sgemm_128x64_nn": schema.KERNEL,
        "Memcpy HtoD (Pageable -> Device)": schema.MEMCPY,
        # a device-side marker of the host's stream sync: not device work
        "Stream Sync": schema.DEVICE_ANNOTATION,
        "Memset (Device)": schema.MEMSET,
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)": schema.COMM,
        "nccl:all_reduce": schema.DEVICE_ANNOTATION,
        "[memory]": schema.INSTANT,
    }


def test_bookkeeping_and_metadata_are_not_events(gpu_trace: Any) -> None:
    names = {r["name"] for r in rows(gpu_trace.events)}
    assert "PyTorch Profiler (0)" not in names
    assert "Record Window End" not in names
    assert "process_name" not in names
    meta = gpu_trace.meta
    assert meta["process_names"] == {"100": "python"}
    assert meta["process_labels"] == {"0": "GPU 0"}
    assert meta["thread_names"] == {"100:100": "thread 100 (python)"}
    assert meta["profiler_span"] == {
        "name": "PyTorch Profiler (0)",
        "start_ns": 900_000,
        "dur_ns": 2_000_000,
    }
    assert meta["rank"] == 3
    assert meta["world_size"] == 8
    assert meta["backend"] == "nccl"
    assert meta["vendor"] == "cuda"
    assert meta["device_properties"] == [{"id": 0, "name": "NVIDIA A100"}]


def test_host_and_device_columns(gpu_trace: Any) -> None:
    found = by_name(gpu_trace.events)
    mm = found["aten::mm"]
    assert (mm["device"], mm["stream"], mm["pid"]) == (-1, HOST, HOST)
    assert mm["shapes"] == "[[2, 3], [3, 4]]"
    assert mm["dtypes"] == '["float", "float"]'
    assert mm["flops"] == 48.0
    assert mm["external_id"] == 4
    assert mm["correlation"] == -1
    kernel = found["volta_sgemm_128x64_nn"]
    assert (kernel["device"], kernel["stream"], kernel["pid"]) == (GPU, 7, GPU)
    assert kernel["correlation"] == 11
    assert math.isnan(kernel["flops"])
    assert kernel["bytes"] == -1
    assert found["Memcpy HtoD (Pageable -> Device)"]["bytes"] == 4096
    assert found["Memset (Device)"]["bytes"] == 512
    assert found["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)"]["stream"] == 20
    launch = found["cudaStreamSynchronize"]
    assert (launch["device"], launch["stream"], launch["correlation"]) == (-1, HOST, 13)
    assert found["[memory]"]["device"] == -1
    assert all(r["rank"] == 3 and r["step"] == -1 for r in rows(gpu_trace.events))


def test_args_are_kept_verbatim(gpu_trace: Any) -> None:
    found = by_name(gpu_trace.events)
    assert json.loads(found["aten::mm"]["args"]) == {
        "External id": 4,
        "Input Dims": [[2, 3], [3, 4]],
        "Input type": ["float", "float"],
        "flops": 48,
    }
    assert json.loads(found["Stream Sync"]["args"])["cuda_sync_kind"] == "Stream Sync"
    assert found["ProfilerStep#7"]["args"] is not None


def test_memory_events_feed_counters(gpu_trace: Any) -> None:
    assert gpu_trace.counters.to_pylist() == [
        {
            "rank": 3,
            "track": "cuda:0",
            "name": "allocated_bytes",
            "ts_ns": 1_101_000,
            "value": 8192.0,
        },
        {
            "rank": 3,
            "track": "cuda:0",
            "name": "reserved_bytes",
            "ts_ns": 1_101_000,
            "value": float(1 << 20),
        },
    ]


def test_events_are_sorted_by_start_then_longest_first(gpu_trace: Any) -> None:
    table = gpu_trace.events
    keys = list(zip(table["start_ns"].to_pylist(), table["dur_ns"].to_pylist(), strict=True))
    assert keys == sorted(keys, key=lambda k: (k[0], -k[1]))
    # the nccl kernel and its annotation start together: the longer one (equal here) keeps
    # file order, so the result is deterministic
    assert table.schema == schema.EVENTS_SCHEMA


@settings(max_examples=40, deadline=None)
@given(times=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), min_size=1, max_size=40))
def test_rows_starting_together_go_longest_first_then_in_file_order(
    tmp_path_factory: pytest.TempPathFactory, times: list[tuple[int, int]]
) -> None:
    events = [gen.cpu_op(f"op{i}", ts, dur, external_id=i) for i, (ts, dur) in enumerate(times)]
    path = write(tmp_path_factory.mktemp("ties"), events)
    expected = sorted(range(len(times)), key=lambda i: (times[i][0], -times[i][1], i))
    assert load_kineto(path).events["name"].to_pylist() == [f"op{i}" for i in expected]


def test_rank_argument_overrides_the_trace(tmp_path: Path) -> None:
    path = write(tmp_path, _gpu_trace(), distributedInfo={"rank": 3})
    trace = load_kineto(path, rank=5)
    assert set(trace.events["rank"].to_pylist()) == {5}
    assert trace.meta["rank"] == 5
    unknown = load_kineto(write(tmp_path, _gpu_trace(), name="u.json"))
    assert set(unknown.events["rank"].to_pylist()) == {0}
    assert unknown.meta["rank"] is None


# --- old formats ----------------------------------------------------------------------------


def test_pytorch_18_categories_and_arg_names(tmp_path: Path) -> None:
    events = [
        gen.complete("Operator", "ProfilerStep#3", 100, 900, **{"External id": 1}),
        gen.complete(
            "Operator", "aten::conv2d", 110, 50, **{"External id": 2, "Input Dims": [[1, 3]]}
        ),
        gen.complete(
            "Runtime",
            "cudaLaunchKernel",
            120,
            5,
            cbid=211,
            correlation=7,
            **{"external id": 2, "external ts": 110},
        ),
        gen.complete(
            "Kernel",
            "implicit_convolve_sgemm",
            130,
            30,
            pid=0,
            tid="stream 7",
            queued=0,
            device=0,
            stream=7,
            correlation=7,
            **{"external id": 2},
        ),
        gen.complete(
            "Memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            170,
            3,
            pid=0,
            tid="stream 7",
            device=0,
            stream=7,
            correlation=8,
            bytes=256,
            **{"external id": 3},
        ),
        gen.complete(
            "Memset",
            "Memset (Device)",
            180,
            1,
            pid=0,
            tid="stream 7",
            device=0,
            stream=7,
            correlation=9,
            bytes=64,
            **{"external id": 4},
        ),
        gen.complete(
            "Runtime",
            "cudaMemcpyAsync",
            160,
            5,
            pid=HOST,
            tid=str(HOST),
            correlation=8,
            **{"external id": 3},
        ),
    ]
    found = by_name(load_kineto(write(tmp_path, events)).events)
    assert found["ProfilerStep#3"]["kind"] == schema.STEP
    assert found["aten::conv2d"]["kind"] == schema.CPU_OP
    assert found["aten::conv2d"]["shapes"] == "[[1, 3]]"
    assert found["cudaLaunchKernel"]["kind"] == schema.RUNTIME
    assert found["cudaLaunchKernel"]["external_id"] == 2
    kernel = found["implicit_convolve_sgemm"]
    assert (kernel["kind"], kernel["external_id"], kernel["correlation"]) == ("kernel", 2, 7)
    assert (kernel["device"], kernel["stream"]) == (0, 7)
    assert found["Memcpy HtoD (Pageable -> Device)"]["kind"] == schema.MEMCPY
    assert found["Memcpy HtoD (Pageable -> Device)"]["bytes"] == 256
    assert found["Memset (Device)"]["kind"] == schema.MEMSET
    # a thread id written as a string
    assert found["cudaMemcpyAsync"]["stream"] == HOST


def test_flows_give_correlation_when_args_lack_it(tmp_path: Path) -> None:
    events = [
        gen.complete("Runtime", "cudaLaunchKernel", 100, 5, **{"external id": 1}),
        gen.flow("s", "async_gpu", 538860, 100, pid=HOST, tid=HOST, name="cudaLaunchKernel"),
        gen.complete("Kernel", "k1", 110, 10, pid=0, tid=7, device=0, stream=7),
        gen.flow("f", "async_gpu", 538860, 110, pid=0, tid=7, name="cudaLaunchKernel"),
        # a forward-backward flow is not a launch: it must not give a correlation
        gen.complete("cpu_op", "aten::add", 200, 5, **{"External id": 5}),
        gen.flow("s", "fwdbwd", 99, 200, pid=HOST, tid=HOST),
        gen.complete("kernel", "k2", 300, 10, pid=0, tid=7, device=0, stream=7),
        gen.flow("f", "fwdbwd", 99, 300, pid=0, tid=7),
        # ac2g flows of newer traces work the same way
        gen.complete("cuda_runtime", "cudaLaunchKernel", 400, 5),
        gen.flow("s", "ac2g", 77, 400, pid=HOST, tid=HOST),
        gen.complete("kernel", "k3", 410, 10, pid=0, tid=7, device=0, stream=7),
        gen.flow("f", "ac2g", 77, 410, pid=0, tid=7),
    ]
    table = load_kineto(write(tmp_path, events)).events
    correlation = {(r["name"], r["start_ns"]): r["correlation"] for r in rows(table)}
    assert correlation[("cudaLaunchKernel", 100_000)] == 538860
    assert correlation[("k1", 110_000)] == 538860
    assert correlation[("k2", 300_000)] == -1
    assert correlation[("cudaLaunchKernel", 400_000)] == 77
    assert correlation[("k3", 410_000)] == 77


def test_rocm_names_and_string_args(tmp_path: Path) -> None:
    events = [
        gen.runtime(
            "hipMemcpyWithStream", 100, 60, correlation=117, stream="0x0", size="2560", kind="1"
        ),
        gen.runtime("hipLaunchKernel", 200, 10, correlation=118, kernel="k"),
        gen.runtime("hipDeviceSynchronize", 300, 50, correlation=119),
        gen.device_task(
            "gpu_memcpy",
            "Memcpy HtoD (Host -> Device)",
            110,
            20,
            correlation=117,
            device=2,
            stream=0,
            kind="HtoD",
        ),
        gen.device_task(
            "kernel", "Cijk_Alik_Bljk_SB", 215, 30, correlation=118, device=2, stream=0
        ),
    ]
    trace = load_kineto(write(tmp_path, events, deviceProperties=[{"id": 0, "name": "AMD"}]))
    found = by_name(trace.events)
    assert found["hipMemcpyWithStream"]["kind"] == schema.SYNC  # a blocking copy
    assert found["hipMemcpyWithStream"]["bytes"] == 2560
    assert found["hipMemcpyWithStream"]["stream"] == HOST
    assert found["hipLaunchKernel"]["kind"] == schema.RUNTIME
    assert found["hipDeviceSynchronize"]["kind"] == schema.SYNC
    assert found["Cijk_Alik_Bljk_SB"]["device"] == 2
    assert trace.meta["vendor"] == "rocm"


def test_mtia_device_events(tmp_path: Path) -> None:
    events = [
        gen.complete(
            "mtia_runtime",
            "enqueueCommand memcpyHtoDAsync",
            100,
            1,
            pid=HOST,
            tid=5,
            correlation=1,
            device=17,
            stream_id=101,
        ),
        gen.complete(
            "mtia_runtime",
            "runFunction - job_prep_and_submit_for_execution",
            102,
            8,
            pid=HOST,
            tid=5,
            correlation=2,
            device=17,
            stream_id=101,
        ),
        gen.complete(
            "mtia_runtime",
            "synchronizeStream",
            150,
            3,
            pid=HOST,
            tid=5,
            correlation=3,
            device=17,
            stream_id=101,
        ),
        gen.complete(
            "mtia_runtime",
            "synchronize",
            151,
            1,
            pid=17,
            tid=3568,
            correlation=3,
            device=17,
            stream_id=101,
        ),
        gen.complete(
            "mtia_ccp_events",
            "dma_request",
            105,
            20,
            pid=17,
            tid=3536,
            correlation=1,
            stream=101,
            direction="HOST_TO_DEVICE",
            size=1024,
        ),
        gen.complete(
            "mtia_ccp_events", "remote", 126, 20, pid=17, tid=3536, correlation=2, stream=101
        ),
        gen.complete("mtia_ccp_events", "event_wait", 90, 60, pid=17, tid=3537, stream=102),
    ]
    trace = load_kineto(write(tmp_path, events))
    found = by_name(trace.events)
    assert found["dma_request"]["kind"] == schema.MEMCPY
    assert found["dma_request"]["bytes"] == 1024
    assert (found["dma_request"]["device"], found["dma_request"]["stream"]) == (17, 101)
    assert found["remote"]["kind"] == schema.KERNEL
    assert found["event_wait"]["kind"] == schema.DEVICE_ANNOTATION
    assert found["enqueueCommand memcpyHtoDAsync"]["kind"] == schema.RUNTIME
    assert found["synchronizeStream"]["kind"] == schema.SYNC
    # the runtime's record on the device's own process is a device-side mark
    assert found["synchronize"]["kind"] == schema.DEVICE_ANNOTATION
    assert found["synchronize"]["device"] == 17
    assert trace.meta["vendor"] == "mtia"


def test_cpu_only_trace(tmp_path: Path) -> None:
    events = [
        gen.complete("user_annotation", "ProfilerStep#551", 100, 900, **{"External id": 1}),
        gen.cpu_op("aten::add", 200, 10, external_id=2),
    ]
    trace = load_kineto(write(tmp_path, events))
    assert set(trace.events["device"].to_pylist()) == {-1}
    assert trace.meta["vendor"] == "cpu"


def test_unknown_categories_are_kept_as_annotations(tmp_path: Path) -> None:
    events = [
        gen.cpu_op("aten::add", 100, 10, external_id=1),
        gen.complete("kernel", "k", 120, 10, pid=0, tid=7, device=0, stream=7, correlation=1),
        gen.complete("some_future_cat", "host thing", 130, 5),
        gen.complete("other_future_cat", "device thing", 140, 5, pid=0, tid=7),
    ]
    trace = load_kineto(write(tmp_path, events))
    found = by_name(trace.events)
    assert found["host thing"]["kind"] == schema.ANNOTATION
    assert found["device thing"]["kind"] == schema.DEVICE_ANNOTATION
    assert found["device thing"]["device"] == 0
    assert trace.meta["unmapped_categories"] == ["other_future_cat", "some_future_cat"]


def test_phases_not_imported_are_counted_by_phase(tmp_path: Path) -> None:
    begin = gen.complete("cpu_op", "begin_end", 200, 0)
    begin["ph"] = "B"
    end = {**begin, "ph": "E", "ts": 210}
    two_letters = {**gen.complete("cpu_op", "two_letters", 220, 5), "ph": "XX"}
    no_phase = gen.complete("cpu_op", "no_phase", 230, 5)
    del no_phase["ph"]
    shout = {**gen.instant("shout", 240), "ph": "I"}
    counter = {"ph": "C", "name": "queue", "pid": 100, "tid": 100, "ts": 250, "args": {"n": 3}}
    events = [
        gen.cpu_op("aten::add", 100, 10, external_id=1),
        gen.instant("mark", 150),
        begin,
        end,
        two_letters,
        no_phase,
        shout,
        counter,
    ]
    trace = load_kineto(write(tmp_path, events))
    assert sorted(trace.events["name"].to_pylist()) == ["aten::add", "mark", "shout"]
    assert trace.meta["skipped_phases"] == {"": 1, "B": 1, "E": 1, "XX": 1}
    assert trace.counters.select(["track", "name", "value"]).to_pylist() == [
        {"track": "queue", "name": "n", "value": 3.0}
    ]


def test_ids_beyond_64_bits_read_as_no_id(tmp_path: Path) -> None:
    huge = "99999999999999999999"  # 2**66 or so: no int64 holds it
    events = [
        gen.cpu_op("aten::mm", 50, 100, external_id=1, tid="1" + huge),
        gen.runtime("cudaLaunchKernel", 100, 10, correlation=0, external_id=1),
        gen.device_task("kernel", "k", 115, 30, correlation=5, stream=3),
    ]
    events[1]["args"]["correlation"] = huge
    events[2]["args"]["stream"] = f"stream {huge}"
    found = by_name(load_kineto(write(tmp_path, events)).events)
    assert found["aten::mm"]["stream"] == -1  # a host row's stream is its thread
    assert found["cudaLaunchKernel"]["correlation"] == -1
    assert found["cudaLaunchKernel"]["stream"] == 100
    assert found["k"]["stream"] == 3  # no stream in the args: the device thread's


def test_ids_of_thousands_of_digits_read_as_no_id(tmp_path: Path) -> None:
    # past 4300 digits Python refuses to read a decimal string at all
    digits = "9" * 5000
    events = [
        gen.cpu_op("aten::mm", 50, 100, external_id=1, tid=digits),
        gen.runtime("cudaLaunchKernel", 100, 10, correlation=0, external_id=1),
        gen.device_task("kernel", "k", 115, 30, correlation=5, stream=3),
    ]
    events[1]["args"]["correlation"] = digits
    events[2]["args"]["stream"] = f"stream {digits}"
    found = by_name(load_kineto(write(tmp_path, events)).events)
    assert found["cudaLaunchKernel"]["correlation"] == -1
    assert found["k"]["stream"] == 3
    assert found["aten::mm"]["stream"] == -1  # its thread is no number either


# --- document shapes ----------------------------------------------------------------------


def _plain(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with NaN spelled out, so that equal tables compare equal."""
    return [
        {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for row in table.to_pylist()
    ]


def _same_table(a: pa.Table, b: pa.Table) -> None:
    assert _plain(a) == _plain(b)


def test_compact_bare_gzip_and_pretty_documents_agree(tmp_path: Path) -> None:
    events = _gpu_trace()
    pretty = load_kineto(write(tmp_path, events, name="a.json"))
    compact = load_kineto(write(tmp_path, events, name="b.json", style="compact"))
    zipped = load_kineto(write(tmp_path, events, name="c.json.gz"))
    bare = load_kineto(write(tmp_path, events, name="d.json", bare=True))
    _same_table(pretty.events, zipped.events)
    _same_table(pretty.events, bare.events)
    # the compact writer has no whitespace inside args: compare everything else
    _same_table(pretty.events.drop(["args"]), compact.events.drop(["args"]))


def test_args_lose_the_pretty_printing_breaks_and_indentation_only(tmp_path: Path) -> None:
    # Kineto's own layout (6 spaces, closing brace at 4) and layouts of other writers: a break
    # followed by 8 spaces keeps the 2 spaces beyond Kineto's indentation, one followed by 2
    # keeps them, blank lines go, and a break straight before a token goes alone.
    layouts = {
        "kineto": '{\n      "External id": 1,\n      "grid": [24, 1, 1]\n    }',
        "deeper": '{\n        "External id": 2\n    }',
        "shallow": '{\n  "External id": 3\n}',
        "blank": '{\n\n      "External id": 4,\n      "s": "a b"\n    }',
        "tight": '{"External id":\n5}',
        "empty": "{\n    }",
    }
    expected = {
        "kineto": '{"External id": 1,"grid": [24, 1, 1]}',
        "deeper": '{  "External id": 2}',
        "shallow": '{  "External id": 3}',
        "blank": '{"External id": 4,"s": "a b"}',
        "tight": '{"External id":5}',
        "empty": None,  # no args
    }
    lines = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {i}, '
        f'"dur": 1, "args": {args}}}'
        for i, (name, args) in enumerate(layouts.items())
    ]
    path = tmp_path / "layouts.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    found = by_name(load_kineto(path).events)
    assert {name: found[name]["args"] for name in layouts} == expected
    assert found["tight"]["external_id"] == 5


@pytest.mark.parametrize(
    ("written", "start_ns"),
    [
        # integers read without a float: beyond 2**53 µs a float64 would lose the last digit
        (str(2**53 + 1), (2**53 + 1) * 1000),
        ("-5", -5000),
        (str((2**63 - 1) // 1000), (2**63 - 1) // 1000 * 1000),
        # beside a float: all read as floats, as before
        ("1.5", 1500),
    ],
)
def test_integer_microseconds_keep_every_digit(tmp_path: Path, written: str, start_ns: int) -> None:
    events = [
        gen.cpu_op("a", Num(written), 2, external_id=1),
        gen.cpu_op("b", 3, Num("0.25"), external_id=2),
    ]
    found = by_name(load_kineto(write(tmp_path, events)).events)
    assert found["a"]["start_ns"] == start_ns
    assert found["b"]["start_ns"] == 3000
    assert found["b"]["dur_ns"] == 250


@pytest.mark.parametrize("written", [str(2**63 // 1000 + 1), str(-(2**63)), str(2**64)])
def test_integer_microseconds_beyond_int64_ns_are_malformed(tmp_path: Path, written: str) -> None:
    events = [gen.cpu_op("a", Num(written), 2, external_id=1), gen.cpu_op("b", 3, 4, external_id=2)]
    trace = load_kineto(write(tmp_path, events))
    assert trace.events["name"].to_pylist() == ["b"]
    assert trace.loss == "t.json: 1 malformed events were skipped"


def test_chunk_boundaries_do_not_change_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tricky = [
        # separators and quotes inside strings: a naive cut would split here
        gen.cpu_op('weird }, { "name', 10, 1, external_id=1),
        gen.cpu_op('esc \\" }, {', 11, 1, external_id=2, note='\\\\"}, {"'),
        gen.cpu_op("nested", 12, 1, external_id=3, obj=[{"a": 1}, {"b": [2, {"c": "}, {"}]}]),
    ]
    events = tricky + [gen.cpu_op(f"op{i}", 100 + i, 1, external_id=10 + i) for i in range(300)]
    for style in ("pretty", "compact"):
        path = write(tmp_path, events, name=f"{style}.json", style=style, _after={"x": 1})
        whole = load_kineto(path)
        monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 97)
        pieces = load_kineto(path)
        monkeypatch.undo()
        _same_table(whole.events, pieces.events)
        assert whole.events.num_rows == len(events)
        assert pieces.meta["trace_keys"] == {"x": 1}
        assert whole.loss is None and pieces.loss is None


def test_rows_far_apart_in_the_file_are_laid_out_in_time_order_with_their_texts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two threads written one after the other, their times interleaved: in start order the
    # table alternates between chunks at both ends of the file (about ten events a chunk).
    first = [gen.cpu_op(f"a{i}", 1000 + 2 * i, 1, external_id=i, tid=1) for i in range(300)]
    second = [
        gen.cpu_op(
            f"b{i}", 1001 + 2 * i, 1, external_id=1000 + i, tid=2, **{"Input Dims": [[i, 2]]}
        )
        for i in range(300)
    ]
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(kineto_layout, "LAYOUT_PIECE_ROWS", 50)  # and texts laid out in 12 pieces
    events = load_kineto(write(tmp_path, first + second, name="t.json")).events
    # by hand: a0 (ts 1000), b0 (1001), a1 (1002), b1 (1003) ...
    ids = [x for i in range(300) for x in (i, 1000 + i)]
    assert events["external_id"].to_pylist() == ids
    assert events["name"].to_pylist() == [f"a{x}" if x < 1000 else f"b{x - 1000}" for x in ids]
    assert [json.loads(text)["External id"] for text in events["args"].to_pylist()] == ids
    shapes = events["shapes"].to_pylist()
    assert [None if s is None else json.loads(s) for s in shapes] == [
        None if x < 1000 else [[x - 1000, 2]] for x in ids
    ]


def test_the_text_reaches_place_columns_a_piece_at_a_time_as_it_is_laid_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 600 rows of two threads interleaved in time, laid out in pieces of 50 rows: the text
    # comes as 12 batches of 50 rows (the three text columns each), each piece made only
    # when its batch is read (the whole text is never held at once)
    events = [
        gen.cpu_op(
            f"{t}{i}",
            1000 + 2 * i + t,
            1,
            external_id=1000 * t + i,
            tid=t + 1,
            **{"Input Dims": [[t, i]]},
        )
        for t in range(2)
        for i in range(300)
    ]
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(kineto_layout, "LAYOUT_PIECE_ROWS", 50)
    made = [0]
    piece = kineto_layout.piece

    def counted(*args: Any) -> pa.Array:
        made[0] += 1
        return piece(*args)

    monkeypatch.setattr(kineto_layout, "piece", counted)
    trace = write(tmp_path, events, name="t.json")
    batches: list[tuple[int, int]] = []  # (rows, pieces made when it was read)

    def place(group: str, columns: pa.RecordBatchReader) -> pa.Table:
        read = []
        for batch in columns:
            if group == kineto.TEXT:
                batches.append((batch.num_rows, made[0]))
            read.append(batch)
        return pa.Table.from_batches(read, columns.schema)

    placed = load_kineto(trace, place_columns=place)
    # pieces of the args and the shapes (the dtypes, all null, made as null arrays)
    assert batches == [(50, 2 * (k + 1)) for k in range(12)]
    assert_same_events(placed.events, load_kineto(trace).events)


def test_threads_written_side_by_side_are_laid_out_by_thread_in_time_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Six threads written round-robin, each a second apart: in start order a piece of the
    # table reads every sixth row of each chunk it reads from.
    events = [
        gen.cpu_op(f"t{t}op{i}", t * 1_000_000 + i, 1, external_id=t * 1000 + i, tid=t)
        for i in range(200)
        for t in range(6)
    ]
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 16384)
    monkeypatch.setattr(kineto_layout, "LAYOUT_PIECE_ROWS", 50)
    table = load_kineto(write(tmp_path, events, name="t.json")).events
    ids = [t * 1000 + i for t in range(6) for i in range(200)]  # by hand: thread by thread
    assert table["external_id"].to_pylist() == ids
    assert [json.loads(text)["External id"] for text in table["args"].to_pylist()] == ids
    assert table["name"].to_pylist() == [f"t{x // 1000}op{x % 1000}" for x in ids]


def test_progress_reports_the_whole_file(tmp_path: Path) -> None:
    path = write(tmp_path, _gpu_trace(), name="p.json.gz")
    calls: list[tuple[int, int]] = []
    load_kineto(path, progress=lambda done, total: calls.append((done, total)))
    size = path.stat().st_size
    assert calls[-1] == (size, size)
    assert all(done <= total == size for done, total in calls)


def test_is_kineto(tmp_path: Path) -> None:
    assert is_kineto(write(tmp_path, _gpu_trace(), name="a.json"))
    assert is_kineto(write(tmp_path, _gpu_trace(), name="b.json.gz"))
    assert is_kineto(write(tmp_path, _gpu_trace(), name="c.json", bare=True))
    (tmp_path / "d.json").write_text('{"a": 1}')
    assert not is_kineto(tmp_path / "d.json")
    (tmp_path / "e.csv").write_text('{"traceEvents": []}')
    assert not is_kineto(tmp_path / "e.csv")
    assert not is_kineto(tmp_path / "missing.json")
    assert not is_kineto(tmp_path)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b"   \n ", "the file is empty"),
        (b"hello", "not a trace"),
        (b"{not json", "not valid JSON"),
        (b"{}", "without traceEvents"),
        (b'{"a": 1}', "without traceEvents"),
        (b'{"traceEvents": []}', "traceEvents is empty"),
        (b"[]", "traceEvents is empty"),
        (
            b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, '
            b'"args": {"name": "x"}}]}',
            "only metadata",
        ),
    ],
)
def test_bad_documents_raise_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as raised:
        load_kineto(path)
    text = str(raised.value)
    assert message in text
    assert str(path) in text
    assert "\n" not in text
    assert raised.value.exit_code == 2


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        load_kineto(tmp_path / "nope.json")


def test_not_gzip_data_behind_a_gzip_name(tmp_path: Path) -> None:
    path = tmp_path / "x.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(TraceFormatError) as raised:
        load_kineto(path)
    assert str(path) in str(raised.value)


def _many_ops(count: int) -> list[dict[str, Any]]:
    return [gen.cpu_op(f"op{i}", 1000 + 10 * i, 5, external_id=i) for i in range(count)]


def test_truncated_json_keeps_the_complete_events(tmp_path: Path) -> None:
    events = _many_ops(50)
    text = gen.document_text(events, schemaVersion=1, _after={"traceName": "x"}).encode()
    # cut inside the 31st event: 30 complete events remain
    cut = text.index(b'"op30"') + 3
    path = tmp_path / "cut.json"
    path.write_bytes(text[:cut])
    trace = load_kineto(path)
    assert trace.events["name"].to_pylist() == [f"op{i}" for i in range(30)]
    assert trace.loss is not None
    assert "ends early after 30 events" in trace.loss
    assert "the rest of the trace is lost" in trace.loss
    # the reported byte offset is where the complete data ends
    offset = int(trace.loss.split("at byte ")[1].split(":")[0].replace(",", ""))
    assert text[:offset].rstrip().endswith(b"}")
    assert text[offset:].lstrip().startswith(b",")


def test_truncated_gzip_stream_keeps_the_complete_events(tmp_path: Path) -> None:
    events = _many_ops(2000)
    text = gen.document_text(events, schemaVersion=1).encode()
    packed = gzip.compress(text, mtime=0)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(packed[: len(packed) // 2])
    trace = load_kineto(path)
    names = trace.events["name"].to_pylist()
    assert 0 < len(names) < 2000
    assert names == [f"op{i}" for i in range(len(names))]
    assert trace.loss is not None and "compressed stream ends early" in trace.loss


@pytest.mark.parametrize("base", [10**30, -(10**30), "1736412474704643000", 1.5])
def test_a_base_time_that_is_not_a_time_is_ignored_and_said(tmp_path: Path, base: Any) -> None:
    path = write(tmp_path, _many_ops(3), baseTimeNanoseconds=base)
    trace = load_kineto(path)
    assert trace.events["start_ns"].to_pylist() == [1_000_000, 1_010_000, 1_020_000]
    assert trace.loss == f"{path.name}: baseTimeNanoseconds is not a time in ns: ignored"
    assert trace.meta["time_base"] == "epoch ns: ts"


@pytest.mark.parametrize("rank", [10**30, 2**31, -5, "1", True])
def test_a_distributed_rank_that_is_not_a_rank_reads_as_unknown(tmp_path: Path, rank: Any) -> None:
    path = write(tmp_path, _many_ops(3), distributedInfo={"rank": rank, "world_size": 2})
    trace = load_kineto(path)
    assert trace.meta["rank"] is None
    assert trace.events["rank"].to_pylist() == [0, 0, 0]


def test_a_damaged_event_is_skipped_and_reported(tmp_path: Path) -> None:
    events = _many_ops(20)
    events[5]["ts"] = "not a number"
    events[6]["pid"] = 1.5
    path = write(tmp_path, events)
    trace = load_kineto(path)
    names = trace.events["name"].to_pylist()
    assert "op5" not in names
    assert len(names) == 19
    assert trace.loss == f"{path.name}: 1 malformed events were skipped"
    (check,) = trace.quality
    assert (check.id, check.count, check.repaired) == ("unreadable_events", 1, True)


def test_an_event_nested_deeper_than_the_stack_is_skipped_and_reported(tmp_path: Path) -> None:
    text = gen.document_text(_many_ops(20), schemaVersion=1)
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    path = tmp_path / "deep.json"
    path.write_text(text.replace('"op7"', '"op7", "deep": ' + deep, 1))
    trace = load_kineto(path)
    assert "op7" not in trace.events["name"].to_pylist()
    assert trace.events.num_rows == 19
    assert trace.loss == "deep.json: 1 malformed events were skipped"


def test_perfledger_error_is_the_base(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(PerfledgerError):
        load_kineto(tmp_path / "bad.json")


# --- number conversion ----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    micros=st.lists(st.integers(0, 2**43 - 1), min_size=1, max_size=50),
    nanos=st.lists(st.integers(0, 999), min_size=50, max_size=50),
)
def test_float_microseconds_below_2_43_give_the_written_ns(
    micros: list[int], nanos: list[int]
) -> None:
    # Kineto writes "<µs>.<3 digits>": the float64 of that text must give back the digits
    texts = [f"{us}.{ns:03d}" for us, ns in zip(micros, nanos, strict=False)]
    floats = np.array([float(t) for t in texts])
    converted = float_us_ns(floats)
    assert converted is not None
    values, valid = converted
    assert valid.all()
    assert values.tolist() == [int(Decimal(t) * 1000) for t in texts]
    raw = [msgspec.Raw(t.encode()) for t in texts]
    text_values, text_valid = text_us_ns(raw, required=True)
    assert text_valid.all()
    assert text_values.tolist() == values.tolist()


def test_floats_that_cannot_hold_the_ns_ask_for_the_text() -> None:
    assert float_us_ns(np.array([1712195495505543.2])) is None
    assert float_us_ns(np.array([2.0**53 + 2])) is None
    values, valid = float_us_ns(np.array([1712195495505543.0, math.nan]))  # type: ignore[misc]
    assert values[0] == 1712195495505543000
    assert valid.tolist() == [True, False]


def test_a_time_with_an_exponent_beyond_decimal_is_invalid_not_an_error() -> None:
    # damaged digits can read as a number with a huge exponent: Decimal overflows on it
    texts = [b"166978368e7466628", b"1e-7466628", b"12.5"]
    values, valid = text_us_ns([msgspec.Raw(t) for t in texts], required=True)
    assert valid.tolist() == [False, True, True]
    assert values.tolist()[1:] == [0, 12500]


@pytest.mark.parametrize(
    "kinds",
    [(schema.INSTANT,), (schema.RUNTIME, schema.SYNC), schema.DEVICE_TASK_KINDS, schema.KINDS],
)
def test_a_row_of_no_kind_is_of_none_of_the_kinds(kinds: tuple[str, ...]) -> None:
    # -1 is the code of a category the vendor table does not know, before it is settled: read
    # as an index from the end, it would be the last kind (instant)
    codes = np.array([-1, *range(len(schema.KINDS)), -1], dtype=np.int8)
    expected = [code >= 0 and schema.KINDS[code] in kinds for code in codes.tolist()]
    assert kineto._of_kinds(codes, kinds).tolist() == expected


def test_the_columns_go_through_place_columns_as_the_layout_makes_them(tmp_path: Path) -> None:
    trace = gen.write_kineto(
        tmp_path / "t.json",
        [
            gen.cpu_op("b", 20, 5, external_id=2, **{"Input Dims": [[2, 3]]}),
            gen.cpu_op("a", 10, 5, external_id=1, note="x"),
        ],
    )
    plain = load_kineto(trace)
    seen: dict[str, pa.Table] = {}
    given: dict[str, pa.Table] = {}

    def place(group: str, batches: pa.RecordBatchReader) -> pa.Table:
        seen[group] = columns = batches.read_all()
        # the same values in other memory, as a file's map would hold them
        given[group] = pa.Table.from_pylist(columns.to_pylist(), schema=columns.schema)
        return given[group]

    placed = load_kineto(trace, place_columns=place)
    assert seen[kineto.TEXT].column_names == list(kineto.TEXT_COLUMNS)
    assert seen[kineto.NUMBERS].column_names == list(kineto.NUMBER_COLUMNS)
    # every column but the dictionary ones (kind, name), in its canonical type
    assert set(kineto.TEXT_COLUMNS) | set(kineto.NUMBER_COLUMNS) == {
        f.name for f in schema.EVENTS_SCHEMA if not pa.types.is_dictionary(f.type)
    }
    for columns in seen.values():
        assert columns.num_rows == plain.events.num_rows
        for field in columns.schema:
            assert field.type == schema.EVENTS_SCHEMA.field(field.name).type, field.name
    assert_same_events(placed.events, plain.events)
    for group, columns in given.items():  # the events hold the columns place_columns gave
        for name in columns.column_names:
            assert same_buffers(placed.events[name], columns[name]), (group, name)
    # in row order (by start): the operator at 10 µs first
    assert json.loads(plain.events["args"].to_pylist()[0]) == {"External id": 1, "note": "x"}
    kept = load_kineto(trace, place_columns=lambda group, batches: batches.read_all())
    assert_same_events(kept.events, plain.events)


class _Filler:
    """A place for the numbers in the heap, as load_kineto's ``fill_columns`` gives one: what
    was written into its targets, and whether it was given up."""

    def __init__(self, schema_: pa.Schema, length: int) -> None:
        self.schema = schema_
        self.targets = {f.name: np.full(length, 7, f.type.to_pandas_dtype()) for f in schema_}
        self.abandoned = False
        self.written_names: list[str] = []  # the columns marked made, in order

    def written(self, name: str, batch: int = 0) -> None:
        assert batch == 0 and name in self.targets
        self.written_names.append(name)

    def target(self, name: str, batch: int = 0) -> Any:
        assert batch == 0
        return self.targets[name]

    def finish(self) -> pa.Table:
        return pa.table({n: pa.array(a) for n, a in self.targets.items()}, schema=self.schema)

    def abandon(self) -> None:
        self.abandoned = True


def test_the_numbers_are_made_where_fill_columns_places_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = gen.write_kineto(
        tmp_path / "t.json",
        [
            gen.cpu_op("b", 20, 5, external_id=2, **{"Input Dims": [[2, 3]]}),
            gen.cpu_op("a", 10, 5, external_id=1, note="x"),
            gen.runtime("cudaLaunchKernel", 11, 1, correlation=4, external_id=1),
            gen.device_task("kernel", "k", 12, 3, correlation=4, device=1, stream=7),
        ],
    )
    plain = load_kineto(trace)
    made: list[_Filler] = []

    def fill(group: str, schema_: pa.Schema, layout: Any) -> _Filler | None:
        if group == kineto.TEXT:
            return None  # the text placed as usual
        assert group == kineto.NUMBERS and schema_.names == list(kineto.NUMBER_COLUMNS)
        made.append(_Filler(schema_, layout))
        return made[0]

    def place(group: str, batches: pa.RecordBatchReader) -> pa.Table:
        assert group == kineto.TEXT  # the numbers went to the filler
        return batches.read_all()

    filled = load_kineto(trace, place_columns=place, fill_columns=fill)
    assert len(made) == 1 and not made[0].abandoned
    # each column marked made once, before the layout's end read them back
    assert sorted(made[0].written_names) == sorted(kineto.NUMBER_COLUMNS)
    assert_same_events(filled.events, plain.events)
    # every number column written through its target (none left at the filler's 7s)
    for name, target in made[0].targets.items():
        assert np.array_equal(target, plain.events[name].to_numpy(), equal_nan=True), name
    # a layout that fails gives its place up, and fails as it would have
    made.clear()

    def broken(*args: Any) -> Any:
        raise RuntimeError("broken")

    monkeypatch.setattr(kineto, "_flow_correlation", broken)
    with pytest.raises(RuntimeError, match="broken"):
        load_kineto(trace, place_columns=place, fill_columns=fill)
    assert made[0].abandoned


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(-2, 3)),  # few distinct starts: many ties
        max_size=60,
    )
)
def test_start_order_is_the_stable_sort_by_start_then_longest(rows: list[tuple[int, int]]) -> None:
    """The rows by start, the longest first on a shared start, in file order where both tie
    (a stable lexsort), and the starts written in that order where asked."""
    start = np.array([r[0] for r in rows], np.int64)
    dur = np.array([r[1] for r in rows], np.int64)
    out = np.full(start.size, -1, np.int64)
    order = kineto._start_order(start, dur, out=out)
    expected = np.lexsort((-dur, start))
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(out, start[expected])
    np.testing.assert_array_equal(kineto._start_order(start, dur), expected)
