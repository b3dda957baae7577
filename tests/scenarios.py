"""Hand-built canonical event tables for accounting tests.

Each helper appends one event; times are given in microseconds for readability and stored in
integer ns. The expected figures of a scenario are derived by hand in the test that uses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from perfledger.model import schema

US = 1000
HOST_PID = 100
MAIN_THREAD = 100


@dataclass
class Timeline:
    """A growing list of canonical events of one rank."""

    rank: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    _next_correlation: int = 1

    def event(
        self,
        kind: str,
        name: str,
        start_us: float,
        dur_us: float,
        *,
        device: int = -1,
        stream: int = MAIN_THREAD,
        correlation: int = -1,
        external_id: int = -1,
        nbytes: int = -1,
        args: dict[str, Any] | None = None,
    ) -> Timeline:
        self.rows.append(
            {
                "rank": self.rank,
                "kind": kind,
                "name": name,
                "device": device,
                "stream": stream,
                "pid": HOST_PID if device < 0 else device,
                "start_ns": round(start_us * US),
                "dur_ns": round(dur_us * US),
                "correlation": correlation,
                "external_id": external_id,
                "step": -1,
                "bytes": nbytes,
                "flops": float("nan"),
                "shapes": None,
                "dtypes": None,
                "args": json.dumps(args or {}),
            }
        )
        return self

    def step(self, number: int, start_us: float, dur_us: float) -> Timeline:
        return self.event(schema.STEP, f"ProfilerStep#{number}", start_us, dur_us)

    def launch(
        self,
        at_us: float,
        task_start_us: float,
        task_dur_us: float,
        *,
        kind: str = schema.KERNEL,
        name: str = "kernel",
        launch_dur_us: float = 2.0,
        stream: int = 7,
        device: int = 0,
        nbytes: int = -1,
    ) -> Timeline:
        """A host runtime call at ``at_us`` that issues a device task."""
        corr = self._next_correlation
        self._next_correlation += 1
        api = "cudaMemcpyAsync" if kind == schema.MEMCPY else "cudaLaunchKernel"
        self.event(schema.RUNTIME, api, at_us, launch_dur_us, correlation=corr)
        return self.event(
            kind,
            name,
            task_start_us,
            task_dur_us,
            device=device,
            stream=stream,
            correlation=corr,
            nbytes=nbytes,
        )

    def table(self) -> pa.Table:
        rows = sorted(self.rows, key=lambda r: (r["start_ns"], -r["dur_ns"]))
        return pa.Table.from_pylist(rows, schema=schema.EVENTS_SCHEMA)
