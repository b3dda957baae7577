"""Communication per operation: time hidden under compute and time exposed, by hand."""

from __future__ import annotations

from perfledger.analysis.communication import communication, nccl_algorithm
from perfledger.model import schema
from tests.scenarios import US, Timeline


def test_exposed_and_overlapped_per_collective() -> None:
    t = Timeline().step(1, 0, 200)
    t.launch(0, 10, 40, stream=7)  # kernel [10, 50)
    t.launch(1, 30, 40, kind=schema.COMM, name="ncclAllReduce", stream=20, nbytes=1000)
    t.launch(2, 100, 20, kind=schema.COMM, name="ncclAllReduce", stream=20, nbytes=600)
    t.launch(3, 40, 5, kind=schema.COMM, name="ncclBroadcast", stream=21)
    rows = communication(t.table()).to_pylist()
    by_name = {r["name"]: r for r in rows}
    all_reduce = by_name["ncclAllReduce"]
    # [30, 70) is under the kernel for [30, 50); [100, 120) is all exposed
    assert all_reduce["count"] == 2
    assert all_reduce["total_ns"] == 60 * US
    assert all_reduce["overlapped_ns"] == 20 * US
    assert all_reduce["exposed_ns"] == 40 * US
    assert all_reduce["max_ns"] == 40 * US
    assert all_reduce["bytes"] == 1600
    assert all_reduce["message_bytes"] == 800  # both in [512, 1024): one row, their median
    broadcast = by_name["ncclBroadcast"]
    assert (broadcast["overlapped_ns"], broadcast["exposed_ns"], broadcast["bytes"]) == (
        5 * US,
        0,
        -1,
    )
    assert [r["name"] for r in rows] == ["ncclAllReduce", "ncclBroadcast"]  # by total time


def test_messages_of_different_sizes_get_their_own_rows() -> None:
    # per collective type and size: 1 KB and 4 MB all-reduces of one kernel are two rows
    name = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    t = Timeline().step(1, 0, 400)
    t.launch(0, 10, 10, kind=schema.COMM, name=name, stream=20, nbytes=1024)
    t.launch(1, 30, 10, kind=schema.COMM, name=name, stream=20, nbytes=1100)
    t.launch(2, 50, 100, kind=schema.COMM, name=name, stream=20, nbytes=4 << 20)
    t.launch(3, 200, 5, kind=schema.COMM, name="hcom_allReduce__1", stream=21)
    rows = communication(t.table()).to_pylist()
    sizes = {(r["name"], r["message_bytes"]): r for r in rows}
    assert sizes[(name, 4 << 20)]["count"] == 1
    assert sizes[(name, 4 << 20)]["total_ns"] == 100 * US
    assert sizes[(name, 1062)]["count"] == 2  # the median of 1024 and 1100
    assert sizes[(name, 1062)]["bytes"] == 2124
    assert {r["algorithm"] for r in rows if r["name"] == name} == {"RING_LL"}
    assert sizes[("hcom_allReduce__1", -1)]["algorithm"] is None
    assert [r["total_ns"] for r in rows] == sorted((r["total_ns"] for r in rows), reverse=True)


def test_the_algorithm_is_read_from_old_and_new_nccl_kernel_names() -> None:
    assert nccl_algorithm("ncclKernel_AllReduce_TREE_LL128_Sum_half(ncclWorkElem)") == "TREE_LL128"
    assert (
        nccl_algorithm("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
        == "RING_LL"
    )
    assert nccl_algorithm("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)") is None


def test_no_communication_gives_an_empty_table() -> None:
    t = Timeline().step(1, 0, 10)
    t.launch(0, 1, 2)
    assert communication(t.table()).num_rows == 0
