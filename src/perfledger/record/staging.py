"""What the workers of a recorded program left in the staging directory, read back.

Each profiled process writes ``steps-<pid>.jsonl`` (its step log, see
:class:`perfledger.record.inprocess.StepLog`) and, when it recorded steps, ``rank<R>.json`` (its
Kineto trace). This module turns them into the inputs of the pipeline: trace files, the
``step_times`` table, the profiler overhead estimate and per-process facts for meta.json.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from perfledger.errors import PerfledgerError
from perfledger.files import replacing
from perfledger.model.schema import STEP_TIMES_SCHEMA
from perfledger.record.inprocess import (
    ACTION_NONE,
    RECORDED_ACTIONS,
    STEP_LOG_PREFIX,
    STEP_LOG_SUFFIX,
)

# The name an incomplete recorded step's annotation is given in the trace: the program ended
# inside it, so it is not a step to account (its work is kept, outside any step).
INCOMPLETE_STEP_PREFIX: Final = "perfledger.incomplete_step#"


@dataclass(frozen=True)
class StepRecord:
    """One step of one process: wall time and what the profiler did during it."""

    step: int
    start_ns: int
    end_ns: int
    action: str

    @property
    def profiled(self) -> bool:
        return self.action in RECORDED_ACTIONS

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class ProcessRecord:
    """One profiled process, from its step log.

    ``open_step`` is the step running when the process ended (None when the log was cut before
    its end record: the process was killed); ``traces`` the trace files it wrote.
    """

    pid: int
    rank: int
    log: Path
    start: dict[str, Any]
    end: dict[str, Any] | None
    steps: tuple[StepRecord, ...]
    open_step: StepRecord | None
    traces: tuple[Path, ...]
    errors: tuple[str, ...]
    facts: dict[str, Any]

    def fact(self, key: str) -> Any:
        """The last known value of a fact the process logged (rank, world_size, backend, torch)."""
        return self.facts.get(key)

    @property
    def end_reason(self) -> str:
        """How the process ended: ``exit``, ``exception ...``, ``signal ...`` or ``killed``."""
        return str(self.end["reason"]) if self.end else "killed"


@dataclass(frozen=True)
class OverheadEstimate:
    """Median step time with the profiler recording against without it."""

    profiled_ms: float
    unprofiled_ms: float
    profiled_steps: int
    unprofiled_steps: int

    @property
    def overhead_pct(self) -> float:
        return 100.0 * (self.profiled_ms / self.unprofiled_ms - 1.0)


def read_step_log(path: Path) -> ProcessRecord:
    """Read one ``steps-<pid>.jsonl``; a cut last line (a killed process) is dropped.

    Raises:
        PerfledgerError: the file has no start record.
    """
    records: list[dict[str, Any]] = []
    with path.open("rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                break  # the process died while writing this line
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise PerfledgerError(f"{path}: malformed step log line ({error})") from error
    starts = [r for r in records if r.get("event") == "start"]
    if not starts:
        raise PerfledgerError(f"{path}: not a step log (no start record)")
    start = starts[0]
    ends = [r for r in records if r.get("event") == "end"]
    end = ends[-1] if ends else None
    traces = [r for r in records if r.get("event") == "trace"]
    steps = tuple(
        StepRecord(int(r["step"]), int(r["start_ns"]), int(r["end_ns"]), str(r["action"]))
        for r in records
        if r.get("event") == "step"
    )
    open_step = (
        StepRecord(int(end["step"]), int(end["start_ns"]), int(end["end_ns"]), str(end["action"]))
        if end
        else None
    )
    # The rank a process knew last: torch.distributed may be initialised after the first step.
    rank = next(
        (
            r["rank"]
            for r in (*reversed(traces), *([end] if end else []), start)
            if r.get("rank") is not None
        ),
        0,
    )
    # What a process knew last wins: torch.distributed may start after the first step and be
    # destroyed before the end.
    facts: dict[str, Any] = {}
    for record in (start, *traces, *([end] if end else [])):
        facts.update({k: v for k, v in record.items() if v not in (None, {}, [])})
    return ProcessRecord(
        pid=int(start["pid"]),
        rank=int(rank),
        log=path,
        start=start,
        end=end,
        steps=steps,
        open_step=open_step,
        traces=tuple(path.parent / str(r["file"]) for r in traces),
        errors=tuple(str(r["error"]) for r in records if r.get("event") == "profiler_error"),
        facts=facts,
    )


def read_staging(staging: Path) -> tuple[ProcessRecord, ...]:
    """Every profiled process of a run, ordered by rank then pid."""
    logs = sorted(staging.glob(f"{STEP_LOG_PREFIX}*{STEP_LOG_SUFFIX}"))
    processes = [read_step_log(path) for path in logs]
    return tuple(sorted(processes, key=lambda p: (p.rank, p.pid)))


def step_times_table(processes: Iterable[ProcessRecord]) -> pa.Table:
    """Every complete step of every process: rank, step, start_ns, end_ns, profiled.

    The step running when a process ended is left out: it was cut short.
    """
    rows = [(p.rank, s) for p in processes for s in p.steps]
    return pa.table(
        {
            "rank": pa.array([rank for rank, _ in rows], pa.int32()),
            "step": pa.array([s.step for _, s in rows], pa.int32()),
            "start_ns": pa.array([s.start_ns for _, s in rows], pa.int64()),
            "end_ns": pa.array([s.end_ns for _, s in rows], pa.int64()),
            "profiled": pa.array([s.profiled for _, s in rows], pa.bool_()),
        },
        schema=STEP_TIMES_SCHEMA,
    )


def profiler_overhead(steps: Sequence[StepRecord]) -> OverheadEstimate | None:
    """Median profiled step time against median unprofiled step time; None without both.

    Step 0 (first-call initialisation everywhere) and the warm-up step (the profiler is already
    armed) are not counted as unprofiled.
    """
    profiled = [s.wall_ns for s in steps if s.profiled]
    unprofiled = [
        s.wall_ns for s in steps if s.action == ACTION_NONE and s.step > 0 and s.wall_ns > 0
    ]
    if not profiled or not unprofiled:
        return None
    return OverheadEstimate(
        profiled_ms=statistics.median(profiled) / 1e6,
        unprofiled_ms=statistics.median(unprofiled) / 1e6,
        profiled_steps=len(profiled),
        unprofiled_steps=len(unprofiled),
    )


def incomplete_recorded_step(process: ProcessRecord) -> int | None:
    """The step whose annotation the trace holds although the program ended inside it."""
    step = process.open_step
    if step is not None and step.profiled and process.traces:
        return step.step
    return None


def finish_trace(
    trace: Path, *, incomplete_step: int | None = None, chunk_bytes: int = 1 << 22
) -> Path:
    """Gzip a staged trace, renaming an incomplete step's annotation; returns the new path.

    The file is streamed (bounded memory whatever its size) to ``<name>.gz`` through a partial
    name and renamed at the end, then the plain file is removed.
    """
    target = trace.with_name(trace.name + ".gz")
    old = new = b""
    if incomplete_step is not None:
        old = f'"ProfilerStep#{incomplete_step}"'.encode()
        new = f'"{INCOMPLETE_STEP_PREFIX}{incomplete_step}"'.encode()
    with (
        replacing(target) as partial,
        trace.open("rb") as source,
        gzip.open(partial, "wb", compresslevel=1) as sink,
    ):
        carry = b""
        while chunk := source.read(chunk_bytes):
            if old:
                carry = _replace_complete(carry + chunk, old, new, sink.write)
            else:
                sink.write(chunk)
        sink.write(carry)
    trace.unlink()
    return target


def _replace_complete(
    text: bytes, old: bytes, new: bytes, write: Callable[[bytes], object]
) -> bytes:
    """Write ``text`` with ``old`` replaced, holding back a tail that may start a cut match.

    Returns the tail: source text, shorter than ``old``, to be prefixed to the next chunk.
    """
    position = 0
    while (found := text.find(old, position)) != -1:
        write(text[position:found])
        write(new)
        position = found + len(old)
    # A match starting before this point would have ended inside ``text`` and been found.
    safe = max(position, len(text) - len(old) + 1)
    write(text[position:safe])
    return text[safe:]
