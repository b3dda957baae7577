"""Typed, frozen results of the analyses: what every renderer reads.

Renderers never compute: a figure shown in the terminal, a CSV, summary.json and the HTML
report is one field of one of these objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Final

import pyarrow as pa

# Idle causes, in the order of DESIGN.md's attribution rules.
IDLE_HOST_DISPATCH: Final = "host_dispatch"
IDLE_SYNC: Final = "sync"
IDLE_DATALOADER: Final = "dataloader"
IDLE_LAUNCH_LATENCY: Final = "launch_latency"
IDLE_OTHER: Final = "other"
IDLE_CAUSES: Final = (
    IDLE_HOST_DISPATCH,
    IDLE_SYNC,
    IDLE_DATALOADER,
    IDLE_LAUNCH_LATENCY,
    IDLE_OTHER,
)


@dataclass(frozen=True)
class StepWindow:
    """One step of one rank: the host annotation and the device-side window it owns.

    ``host_start_ns``/``host_end_ns`` are the step annotation; ``start_ns``/``end_ns`` the
    window used for accounting (DESIGN.md: end = max(host end, end of the last device task
    issued inside the step); windows tile without overlap).
    """

    rank: int
    step: int
    host_start_ns: int
    host_end_ns: int
    start_ns: int
    end_ns: int

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class WindowAccount:
    """The time account of one device over one window (a step, or the whole span: step -1).

    Invariant: compute + communication + memcpy + memset + idle == wall, the idle causes sum
    to idle, and the exposed communication splits into waiting for peers and transfer, all in
    integer ns. A split not given counts the whole exposed communication as transfer.
    """

    rank: int
    device: int
    step: int
    start_ns: int
    end_ns: int
    compute_ns: int
    communication_ns: int  # exposed: communication with no kernel running
    overlapped_communication_ns: int  # communication under compute (extra figure)
    memcpy_ns: int
    memset_ns: int
    idle_ns: int
    idle_host_dispatch_ns: int
    idle_sync_ns: int
    idle_dataloader_ns: int
    idle_launch_latency_ns: int
    idle_other_ns: int
    # the exposed communication: waiting for the last participant, and the transfer after it
    communication_wait_ns: int = 0
    communication_transfer_ns: int = -1  # -1: the whole exposed communication

    def __post_init__(self) -> None:
        if self.communication_transfer_ns == -1:
            transfer = self.communication_ns - self.communication_wait_ns
            object.__setattr__(self, "communication_transfer_ns", transfer)

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def busy_ns(self) -> int:
        return self.compute_ns + self.communication_ns + self.memcpy_ns + self.memset_ns

    def self_check(self) -> None:
        """Raise AssertionError when the accounting invariants do not hold."""
        parts = self.busy_ns + self.idle_ns
        assert parts == self.wall_ns, f"categories {parts} != window {self.wall_ns}"
        causes = (
            self.idle_host_dispatch_ns
            + self.idle_sync_ns
            + self.idle_dataloader_ns
            + self.idle_launch_latency_ns
            + self.idle_other_ns
        )
        assert causes == self.idle_ns, f"idle causes {causes} != idle {self.idle_ns}"
        split = self.communication_wait_ns + self.communication_transfer_ns
        assert split == self.communication_ns, (
            f"wait + transfer {split} != communication {self.communication_ns}"
        )
        # durations are never negative; instants may be (traces on a relative clock)
        assert all(
            getattr(self, f.name) >= 0
            for f in fields(self)
            if f.name.endswith("_ns") and f.name not in _INSTANTS
        )


_INSTANTS: Final = frozenset({"start_ns", "end_ns"})


@dataclass(frozen=True)
class HostWindowAccount:
    """The account of a host-only (CPU) run's main thread over one window.

    Two partitions of the same window, each summing to its length exactly:
    - by phase: dataloader (inside the data loader), optimizer (inside an optimizer step or
      zero_grad), backward (from the first to the last autograd backward operator), and
      forward (the rest of the step);
    - by coverage: dataloader, operator (some operator runs, outside the data loader) and
      overhead (framework and Python time covered by no operator).
    """

    rank: int
    step: int
    start_ns: int
    end_ns: int
    dataloader_ns: int
    forward_ns: int
    backward_ns: int
    optimizer_ns: int
    operator_ns: int
    overhead_ns: int

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    def self_check(self) -> None:
        """Raise AssertionError when the accounting invariants do not hold."""
        phases = self.dataloader_ns + self.forward_ns + self.backward_ns + self.optimizer_ns
        assert phases == self.wall_ns, f"phases {phases} != window {self.wall_ns}"
        coverage = self.dataloader_ns + self.operator_ns + self.overhead_ns
        assert coverage == self.wall_ns, f"coverage {coverage} != window {self.wall_ns}"
        # durations are never negative; instants may be (traces on a relative clock)
        assert all(
            getattr(self, f.name) >= 0
            for f in fields(self)
            if f.name.endswith("_ns") and f.name not in _INSTANTS
        )


# Schema of Accounting.gaps: one row per idle interval of a device inside a window.
GAPS_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("step", pa.int32()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("cause", pa.string()),
        # the device task that ends the gap (-1 when none) as a row index into the events table
        pa.field("next_task", pa.int64()),
        # start of the host call that launched that task (-1 when unknown)
        pa.field("launch_start_ns", pa.int64()),
    ]
)


@dataclass(frozen=True)
class Accounting:
    """Device accounting of one rank: a row per (device, step) and per device span (step -1).

    ``gaps`` follows :data:`GAPS_SCHEMA` and covers the step windows (not the span rows).
    """

    windows: tuple[WindowAccount, ...]
    gaps: pa.Table
    host: tuple[HostWindowAccount, ...] = ()


STEP_TRACE_COLUMNS: Final = (
    "rank",
    "device",
    "step",
    "start_ns",
    "end_ns",
    "wall_ns",
    "compute_ns",
    "communication_ns",
    "overlapped_communication_ns",
    "memcpy_ns",
    "memset_ns",
    "idle_ns",
    "idle_host_dispatch_ns",
    "idle_sync_ns",
    "idle_dataloader_ns",
    "idle_launch_latency_ns",
    "idle_other_ns",
    # added in 0.2: the exposed communication split (they sum to communication_ns)
    "communication_wait_ns",
    "communication_transfer_ns",
)


HOST_STEP_TRACE_COLUMNS: Final = (
    "rank",
    "device",
    "step",
    "start_ns",
    "end_ns",
    "wall_ns",
    "dataloader_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "operator_ns",
    "overhead_ns",
)


_SMALL_INT_COLUMNS: Final = {"rank": pa.int32(), "device": pa.int16(), "step": pa.int32()}


def step_trace_table(accounts: Sequence[WindowAccount]) -> pa.Table:
    """step_trace.csv's rows: one per rank, device and step, the span row (step -1) last."""
    ordered = sorted(accounts, key=lambda a: (a.rank, a.device, a.step == -1, a.step))
    return _account_table(ordered, STEP_TRACE_COLUMNS)


def host_step_trace_table(accounts: Sequence[HostWindowAccount]) -> pa.Table:
    """step_trace.csv's rows for a host-only run (device -1), the span row (step -1) last."""
    ordered = sorted(accounts, key=lambda a: (a.rank, a.step == -1, a.step))
    return _account_table(ordered, HOST_STEP_TRACE_COLUMNS)


def _account_table(accounts: Sequence[object], columns: Sequence[str]) -> pa.Table:
    host_only = "dataloader_ns" in columns
    data: dict[str, pa.Array] = {}
    for column in columns:
        if host_only and column == "device":
            values: list[int] = [-1] * len(accounts)
        else:
            values = [int(getattr(account, column)) for account in accounts]
        data[column] = pa.array(values, _SMALL_INT_COLUMNS.get(column, pa.int64()))
    return pa.table(data)
