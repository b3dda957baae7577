"""Copies by direction on hand-built traces: expected figures derived by hand."""

from __future__ import annotations

import math

import pytest

from perfledger.analysis.transfers import copy_direction, is_pageable, transfers
from perfledger.model.tables import TRANSFERS_SCHEMA
from tests.synth import EventsBuilder

MIB = 1 << 20


def by_direction(events: EventsBuilder) -> dict[str, dict[str, object]]:
    table = transfers(events.table())
    assert table.schema.equals(TRANSFERS_SCHEMA)
    return {row["direction"]: row for row in table.to_pylist()}


def test_one_pageable_copy_of_one_mib_in_100_us() -> None:
    rows = by_direction(EventsBuilder().memcpy(0, 100_000, bytes=MIB))
    assert rows == {
        "HtoD": {
            "direction": "HtoD",
            "count": 1,
            "bytes": MIB,
            "time_ns": 100_000,
            "gbps": pytest.approx(10.48576),  # 1 048 576 B / 100 000 ns
            "pageable_count": 1,
            "small_count": 0,
            "unknown_bytes_count": 0,
        }
    }


def test_directions_are_grouped_and_ordered() -> None:
    events = (
        EventsBuilder()
        .memcpy(0, 1_000, "Memcpy DtoD (Device -> Device)", bytes=4_000_000)
        .memcpy(2_000, 3_000, "Memcpy DtoD (Device -> Device)", bytes=2_000_000)
        .memcpy(6_000, 10_000, "Memcpy DtoH (Device -> Pageable)", bytes=8)
        .memcpy(20_000, 500, "Memcpy HtoD (Pinned -> Device)", bytes=65_535)
        .memcpy(21_000, 500, "Memcpy HtoD (Pinned -> Device)", bytes=65_536)
        .memcpy(22_000, 700, "Memcpy PtoP (Device -> Device)", bytes=700)
        .memset(30_000, 9_000, bytes=1)  # not a copy
        .kernel(40_000, 9_000)
    )
    rows = by_direction(events)
    assert list(rows) == ["HtoD", "DtoH", "DtoD", "PtoP"]
    dtod = rows["DtoD"]
    assert (dtod["count"], dtod["bytes"], dtod["time_ns"]) == (2, 6_000_000, 4_000)
    assert dtod["gbps"] == pytest.approx(6_000_000 / 4_000)
    assert (dtod["pageable_count"], dtod["small_count"]) == (0, 0)
    dtoh = rows["DtoH"]
    assert (dtoh["pageable_count"], dtoh["small_count"], dtoh["gbps"]) == (1, 1, 8 / 10_000)
    htod = rows["HtoD"]
    # 65 535 B is under 64 KiB, 65 536 B is not
    assert (htod["count"], htod["small_count"], htod["pageable_count"]) == (2, 1, 0)
    assert htod["gbps"] == pytest.approx((65_535 + 65_536) / 1_000)
    assert rows["PtoP"]["gbps"] == pytest.approx(1.0)


def test_unknown_sizes_are_left_out_of_the_bandwidth() -> None:
    events = (
        EventsBuilder()
        .memcpy(0, 1_000, "Memcpy HtoD (Host -> Device)", bytes=3_000)
        .memcpy(5_000, 9_000, "Memcpy HtoD (Host -> Device)")  # size not in the trace
    )
    htod = by_direction(events)["HtoD"]
    assert (htod["count"], htod["bytes"], htod["time_ns"]) == (2, 3_000, 10_000)
    assert htod["gbps"] == pytest.approx(3.0)  # 3000 B over the 1000 ns of the sized copy
    assert (htod["unknown_bytes_count"], htod["small_count"]) == (1, 1)


def test_bandwidth_is_nan_when_no_size_is_known() -> None:
    events = EventsBuilder().memcpy(0, 1_000, "Memcpy HtoD (Host -> Device)")
    assert math.isnan(by_direction(events)["HtoD"]["gbps"])  # type: ignore[arg-type]


def test_direction_from_args_kind_when_the_name_is_silent() -> None:
    events = (
        EventsBuilder()
        .memcpy(0, 1_000, "MEMCPY_ASYNC", bytes=10, args={"kind": "1"})
        .memcpy(2_000, 1_000, "MEMCPY_ASYNC", bytes=10, args={"kind": "DtoH"})
        .memcpy(4_000, 1_000, "MEMCPY_ASYNC", bytes=10, args={"kind": "4"})
        .memcpy(6_000, 1_000, "MEMCPY_ASYNC", bytes=10, args="not json")
    )
    rows = by_direction(events)
    assert {d: r["count"] for d, r in rows.items()} == {"HtoD": 1, "DtoH": 1, "unknown": 2}


@pytest.mark.parametrize(
    ("name", "kind", "direction"),
    [
        ("Memcpy HtoD (Pageable -> Device)", None, "HtoD"),
        ("Memcpy DtoH (Device -> Pinned)", None, "DtoH"),
        ("Memcpy HtoH (Pinned -> Pinned)", None, "HtoH"),
        ("Memcpy PtoP (Device -> Device)", None, "PtoP"),
        ("CopyHostToDevice", None, "HtoD"),
        ("CopyDeviceToHost", None, "DtoH"),
        ("CopyDeviceToDevice", None, "DtoD"),
        ("acl_memcpy_host_to_device", None, "HtoD"),
        ("MEMCPY_ASYNC", None, "unknown"),
        ("Memcpy HtoD (Host -> Device)", "DtoH", "HtoD"),  # the name wins
        ("memcpy", "0", "HtoH"),
        ("memcpy", "3", "DtoD"),
        ("memcpy", None, "unknown"),
    ],
)
def test_copy_direction(name: str, kind: str | None, direction: str) -> None:
    assert copy_direction(name, kind) == direction


def test_pageable_is_read_from_the_name() -> None:
    assert is_pageable("Memcpy DtoH (Device -> Pageable)")
    assert not is_pageable("Memcpy DtoH (Device -> Pinned)")


def test_no_copies_no_rows() -> None:
    assert transfers(EventsBuilder().kernel(0, 10).table()).num_rows == 0
    assert transfers(EventsBuilder().table()).num_rows == 0
