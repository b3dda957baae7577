"""Hand-built canonical tables for unit tests: events in EVENTS_SCHEMA, gaps in GAPS_SCHEMA.

Tests state the trace they need event by event, with times in integer ns, and derive the
expected figures by hand. Every builder method appends one event (``launch`` two) and returns
the builder, so calls chain::

    events = (
        EventsBuilder()
        .cpu_op(0, 50_000, "aten::addmm", external_id=7)
        .runtime(1_000, 5_000, correlation=1, external_id=7)
        .kernel(10_000, 20_000, "sgemm", correlation=1)
        .table()
    )

Defaults: rank 0, host process 100 and thread 1 (the ``stream`` column of host events),
device 0 and stream 7 for device tasks, step -1, no correlation / external id / bytes.
``table()`` sorts rows by start_ns, keeping insertion order among equal starts, so the row
index of an event (what GAPS_SCHEMA's ``next_task`` refers to) is its place in that order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from perfledger.model import schema
from perfledger.model.accounts import GAPS_SCHEMA


class EventsBuilder:
    """Collects events row by row and produces a canonical events table."""

    def __init__(
        self,
        *,
        rank: int = 0,
        pid: int = 100,
        thread: int = 1,
        device: int = 0,
        stream: int = 7,
    ) -> None:
        self.rank = rank
        self.pid = pid
        self.thread = thread
        self.device = device
        self.stream = stream
        self._rows: list[dict[str, Any]] = []
        self._next_correlation = 1_000_000

    def __len__(self) -> int:
        return len(self._rows)

    def add(
        self,
        kind: str,
        name: str,
        start_ns: int,
        dur_ns: int,
        *,
        rank: int | None = None,
        device: int = schema.HOST_DEVICE,
        stream: int | None = None,
        pid: int | None = None,
        correlation: int = schema.NO_ID,
        external_id: int = schema.NO_ID,
        step: int = schema.NO_STEP,
        bytes: int = -1,
        flops: float = math.nan,
        shapes: str | None = None,
        dtypes: str | None = None,
        args: Mapping[str, Any] | str | None = None,
    ) -> EventsBuilder:
        """Append one event of any kind; ``args`` may be a mapping (stored as JSON)."""
        if kind not in schema.KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        if dur_ns < 0:
            raise ValueError("dur_ns must be >= 0")
        self._rows.append(
            {
                "rank": self.rank if rank is None else rank,
                "kind": kind,
                "name": name,
                "device": device,
                "stream": (self.thread if device == schema.HOST_DEVICE else self.stream)
                if stream is None
                else stream,
                "pid": self.pid if pid is None else pid,
                "start_ns": start_ns,
                "dur_ns": dur_ns,
                "correlation": correlation,
                "external_id": external_id,
                "step": step,
                "bytes": bytes,
                "flops": flops,
                "shapes": shapes,
                "dtypes": dtypes,
                "args": json.dumps(args, sort_keys=True) if isinstance(args, Mapping) else args,
            }
        )
        return self

    # Host events: ``thread`` is the host thread id (the ``stream`` column).

    def cpu_op(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "aten::op",
        *,
        external_id: int = schema.NO_ID,
        thread: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a framework operator (``cpu_op``) on a host thread."""
        return self.add(
            schema.CPU_OP, name, start_ns, dur_ns, stream=thread, external_id=external_id, **fields
        )

    def annotation(
        self, start_ns: int, dur_ns: int, name: str, *, thread: int | None = None, **fields: Any
    ) -> EventsBuilder:
        """Append a user annotation (record_function / NVTX range) on a host thread."""
        return self.add(schema.ANNOTATION, name, start_ns, dur_ns, stream=thread, **fields)

    def step_mark(
        self, start_ns: int, dur_ns: int, number: int, *, thread: int | None = None, **fields: Any
    ) -> EventsBuilder:
        """Append a host step annotation named ``ProfilerStep#<number>``."""
        return self.add(
            schema.STEP, f"ProfilerStep#{number}", start_ns, dur_ns, stream=thread, **fields
        )

    def dataloader(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        *,
        thread: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a data-loader interval on a host thread."""
        return self.add(schema.DATALOADER, name, start_ns, dur_ns, stream=thread, **fields)

    def python(
        self, start_ns: int, dur_ns: int, name: str, *, thread: int | None = None, **fields: Any
    ) -> EventsBuilder:
        """Append a Python function interval on a host thread."""
        return self.add(schema.PYTHON, name, start_ns, dur_ns, stream=thread, **fields)

    def runtime(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "cudaLaunchKernel",
        *,
        correlation: int = schema.NO_ID,
        external_id: int = schema.NO_ID,
        thread: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a runtime API call (a launch when it carries a correlation id)."""
        return self.add(
            schema.RUNTIME,
            name,
            start_ns,
            dur_ns,
            stream=thread,
            correlation=correlation,
            external_id=external_id,
            **fields,
        )

    def sync(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "cudaDeviceSynchronize",
        *,
        correlation: int = schema.NO_ID,
        external_id: int = schema.NO_ID,
        thread: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a blocking host synchronisation call."""
        return self.add(
            schema.SYNC,
            name,
            start_ns,
            dur_ns,
            stream=thread,
            correlation=correlation,
            external_id=external_id,
            **fields,
        )

    # Device tasks: ``device`` and ``stream`` default to the builder's.

    def _task(
        self,
        kind: str,
        start_ns: int,
        dur_ns: int,
        name: str,
        device: int | None,
        stream: int | None,
        fields: dict[str, Any],
    ) -> EventsBuilder:
        return self.add(
            kind,
            name,
            start_ns,
            dur_ns,
            device=self.device if device is None else device,
            stream=self.stream if stream is None else stream,
            **fields,
        )

    def kernel(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "kernel",
        *,
        device: int | None = None,
        stream: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a compute kernel."""
        return self._task(schema.KERNEL, start_ns, dur_ns, name, device, stream, fields)

    def comm(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "ncclKernel_AllReduce_RING_LL_Sum_float",
        *,
        device: int | None = None,
        stream: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a communication task (collective or point-to-point kernel)."""
        return self._task(schema.COMM, start_ns, dur_ns, name, device, stream, fields)

    def memcpy(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "Memcpy HtoD (Pageable -> Device)",
        *,
        device: int | None = None,
        stream: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a memory copy; pass ``bytes=`` for its size."""
        return self._task(schema.MEMCPY, start_ns, dur_ns, name, device, stream, fields)

    def memset(
        self,
        start_ns: int,
        dur_ns: int,
        name: str = "Memset (Device)",
        *,
        device: int | None = None,
        stream: int | None = None,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a memory set; pass ``bytes=`` for its size."""
        return self._task(schema.MEMSET, start_ns, dur_ns, name, device, stream, fields)

    def new_correlation(self) -> int:
        """A correlation id not used by ``launch`` before (explicit ids stay below 1e6)."""
        self._next_correlation += 1
        return self._next_correlation

    def launch(
        self,
        host_start_ns: int,
        host_dur_ns: int,
        start_ns: int,
        dur_ns: int,
        name: str = "kernel",
        *,
        kind: str = schema.KERNEL,
        api: str = "cudaLaunchKernel",
        external_id: int = schema.NO_ID,
        thread: int | None = None,
        device: int | None = None,
        stream: int | None = None,
        step: int = schema.NO_STEP,
        **fields: Any,
    ) -> EventsBuilder:
        """Append a runtime call and the device task it issued, linked by a fresh correlation.

        ``step`` goes on both rows; ``fields`` (bytes, args, ...) on the device task only.
        """
        correlation = self.new_correlation()
        self.runtime(
            host_start_ns,
            host_dur_ns,
            api,
            correlation=correlation,
            external_id=external_id,
            thread=thread,
            step=step,
        )
        return self._task(
            kind,
            start_ns,
            dur_ns,
            name,
            device,
            stream,
            {"correlation": correlation, "step": step, **fields},
        )

    def table(self, *, sort: bool = True) -> pa.Table:
        """The events in EVENTS_SCHEMA, sorted by start_ns (stable) unless ``sort`` is False."""
        order = range(len(self._rows))
        if sort:
            order = sorted(order, key=lambda i: self._rows[i]["start_ns"])  # type: ignore[assignment]
        rows = [self._rows[i] for i in order]
        columns = {
            field.name: pa.array([row[field.name] for row in rows], type=field.type.value_type)
            if pa.types.is_dictionary(field.type)
            else pa.array([row[field.name] for row in rows], type=field.type)
            for field in schema.EVENTS_SCHEMA
        }
        plain = pa.table(columns)
        return plain.cast(schema.EVENTS_SCHEMA)


def gaps_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """A gaps table in GAPS_SCHEMA from rows naming at least start_ns, end_ns and cause.

    Defaults: rank 0, device 0, step 0, next_task -1, launch_start_ns -1; dur_ns is
    end_ns - start_ns unless given.
    """
    full = [
        {
            "rank": row.get("rank", 0),
            "device": row.get("device", 0),
            "step": row.get("step", 0),
            "start_ns": row["start_ns"],
            "end_ns": row["end_ns"],
            "dur_ns": row.get("dur_ns", row["end_ns"] - row["start_ns"]),
            "cause": row["cause"],
            "next_task": row.get("next_task", -1),
            "launch_start_ns": row.get("launch_start_ns", -1),
        }
        for row in rows
    ]
    return pa.Table.from_pylist(full, schema=GAPS_SCHEMA)


def assert_same_events(table: pa.Table, other: pa.Table) -> None:
    """The same schema and values (flops: NaN where unknown, equal as numbers)."""
    assert table.schema.equals(other.schema)
    for name in table.column_names:
        if name == "flops":
            assert np.array_equal(table[name].to_numpy(), other[name].to_numpy(), equal_nan=True)
        else:
            assert table[name].equals(other[name]), name
