"""Communication per operation: time hidden under compute and time exposed, by hand."""

from __future__ import annotations

from perfledger.analysis.communication import communication
from perfledger.model import schema
from tests.scenarios import US, Timeline


def test_exposed_and_overlapped_per_collective() -> None:
    t = Timeline().step(1, 0, 200)
    t.launch(0, 10, 40, stream=7)  # kernel [10, 50)
    t.launch(1, 30, 40, kind=schema.COMM, name="ncclAllReduce", stream=20, nbytes=1000)
    t.launch(2, 100, 20, kind=schema.COMM, name="ncclAllReduce", stream=20, nbytes=500)
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
    assert all_reduce["bytes"] == 1500
    broadcast = by_name["ncclBroadcast"]
    assert (broadcast["overlapped_ns"], broadcast["exposed_ns"], broadcast["bytes"]) == (
        5 * US,
        0,
        -1,
    )
    assert [r["name"] for r in rows] == ["ncclAllReduce", "ncclBroadcast"]  # by total time


def test_no_communication_gives_an_empty_table() -> None:
    t = Timeline().step(1, 0, 10)
    t.launch(0, 1, 2)
    assert communication(t.table()).num_rows == 0
