"""Device busy % per bucket: the union of a device's tasks over its streams, figures by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest

from perfledger.analysis.busy import DEVICE_BUSY_SCHEMA, device_busy
from perfledger.model import schema
from tests.synth import EventsBuilder

US = 1_000
MS = 1_000_000


def _rows(busy: pa.Table) -> list[tuple[int, int, int, int, float]]:
    return [
        (r["rank"], r["device"], r["start_ns"], r["width_ns"], r["busy_pct"])
        for r in busy.to_pylist()
    ]


def test_streams_count_once_and_host_work_not_at_all() -> None:
    b = EventsBuilder()
    b.kernel(0, 600 * US, "a", stream=7)
    b.kernel(400 * US, 400 * US, "b", stream=8)  # overlaps a on [400, 600) µs
    b.memcpy(1_500 * US, 1_000 * US, stream=9)  # [1.5, 2.5) ms
    b.cpu_op(0, 3 * MS, "host op")
    busy = device_busy(b.table())
    assert busy.schema == DEVICE_BUSY_SCHEMA
    # [0, 1) ms: union [0, 800) µs; [1, 2) ms: [1.5, 2); [2, 3) ms: [2, 2.5); then idle
    assert _rows(busy) == [
        (0, 0, 0, MS, 80.0),
        (0, 0, MS, MS, 50.0),
        (0, 0, 2 * MS, MS, 50.0),
        (0, 0, 3 * MS, MS, 0.0),
    ]


def test_each_device_of_each_rank_in_order_from_the_origin() -> None:
    rank1 = EventsBuilder(rank=1).kernel(2 * MS, 250 * US, "k", device=0)
    rank0 = EventsBuilder(rank=0)
    rank0.kernel(1 * MS, 1 * MS, "k", device=3)
    rank0.kernel(1_500 * US, 100 * US, "k", device=1)
    events = pa.concat_tables([rank1.table(), rank0.table()])
    busy = device_busy(events, origin_ns=500 * US)
    # buckets from 0.5 ms: device 3 busy [1, 2) ms is half of [0.5, 1.5) and of [1.5, 2.5);
    # device 1's [1.5, 1.6) ms is a tenth of [1.5, 2.5)
    assert _rows(busy) == [
        (0, 1, 500 * US, MS, 0.0),
        (0, 1, 1_500 * US, MS, 10.0),
        (0, 1, 2_500 * US, MS, 0.0),
        (0, 3, 500 * US, MS, 50.0),
        (0, 3, 1_500 * US, MS, 50.0),
        (0, 3, 2_500 * US, MS, 0.0),
        (1, 0, 500 * US, MS, 0.0),
        (1, 0, 1_500 * US, MS, 25.0),
        (1, 0, 2_500 * US, MS, 0.0),
    ]


def test_long_profiles_get_wider_buckets() -> None:
    busy = device_busy(EventsBuilder().kernel(0, 10 * MS, "a").table(), max_buckets=4)
    # 10 buckets of 1 ms exceed 4: ceil(10 / 4) = 3 ms each; the 4th holds 1 ms of the task
    assert [r[2:] for r in _rows(busy)] == [
        (0, 3 * MS, 100.0),
        (3 * MS, 3 * MS, 100.0),
        (6 * MS, 3 * MS, 100.0),
        (9 * MS, 3 * MS, pytest.approx(100 / 3)),
        (12 * MS, 3 * MS, 0.0),
    ]


def test_no_device_task_no_rows() -> None:
    host_only = EventsBuilder().cpu_op(0, MS, "host op").table()
    assert device_busy(host_only).num_rows == 0
    assert device_busy(schema.empty_events()).schema == DEVICE_BUSY_SCHEMA
