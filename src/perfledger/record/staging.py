"""What the workers of a recorded program left in the staging directory, read back.

Each profiled process writes ``steps-<pid>.jsonl`` (its step log, see
:class:`perfledger.record.inprocess.StepLog`) and, when it recorded steps, its Kineto trace in
chunks, ``trace-<pid>-<n>.json``. This module turns them into the inputs of the pipeline: one
trace file per process, the ``step_times`` table, the profiler overhead estimate and
per-process facts for meta.json.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from perfledger.errors import PerfledgerError
from perfledger.files import replacing, write_bytes
from perfledger.model.schema import STEP_TIMES_SCHEMA
from perfledger.record.inprocess import (
    ACTION_NONE,
    CHUNK_PREFIX,
    PROFILER_LOG_PREFIX,
    PROFILER_LOG_SUFFIX,
    RECORDED_ACTIONS,
    STEP_LOG_PREFIX,
    STEP_LOG_SUFFIX,
    TRACE_SUFFIX,
)

# The name an incomplete recorded step's annotation is given in the trace: the program ended
# inside it, so it is not a step to account (its work is kept, outside any step).
INCOMPLETE_STEP_PREFIX: Final = "perfledger.incomplete_step#"


@dataclass(frozen=True)
class StepRecord:
    """One step of one process: wall time and what the profiler did during it; ``device_ns``
    its time on the device (:mod:`perfledger.record.device_steps`), None where unknown (no
    CUDA, or its events never completed)."""

    step: int
    start_ns: int
    end_ns: int
    action: str
    device_ns: int | None = None

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
    its end record: the process was killed or called ``os._exit``); ``traces`` the trace files
    it wrote (the chunks of its trace, in order); ``traced_through`` the last step they hold.
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
    traced_through: int | None = None

    def fact(self, key: str) -> Any:
        """The last known value of a fact the process logged (rank, world_size, backend, torch)."""
        return self.facts.get(key)

    @property
    def end_reason(self) -> str:
        """How the process ended: ``exit``, ``exception ...``, ``signal ...`` or ``killed``
        (no end record: SIGKILL, or ``os._exit`` which runs no exit handler)."""
        return str(self.end["reason"]) if self.end else "killed"

    @property
    def kept_steps(self) -> int:
        """The complete profiled steps whose trace was written."""
        if self.traced_through is None or not self.traces:
            return 0
        return sum(s.profiled and s.step <= self.traced_through for s in self.steps)


TIMED_ON_DEVICE: Final = "device"
TIMED_ON_HOST: Final = "host"


def _step_ms(steps: Sequence[StepRecord]) -> tuple[list[float], str]:
    """The steps' times in ms, all on the device where every one has its device time (an
    asynchronous step's host time is only how fast its work was queued), else on the host."""
    if steps and all(s.device_ns is not None for s in steps):
        return [(s.device_ns or 0) / 1e6 for s in steps], TIMED_ON_DEVICE
    return [s.wall_ns / 1e6 for s in steps], TIMED_ON_HOST


@dataclass(frozen=True)
class OverheadEstimate:
    """Median step time with the profiler recording against without it (see
    :func:`profiler_overhead`).

    ``noise_pct`` is the half-width, in % of the unprofiled median, of an approximate 95 %
    interval of the overhead: from the spread of the pairs' ratios (paired), else of each
    group's steps; None when a group has a single step. An overhead within ``noise_pct`` of
    zero cannot be told from the run's own step-to-step variation.
    """

    profiled_ms: float
    unprofiled_ms: float
    profiled_steps: int
    unprofiled_steps: int
    noise_pct: float | None = None
    paired: bool = False  # each recorded step against the unprofiled step right after it
    # what timed the steps compared: "device" (every one has its device time) or "host"
    timed: str = TIMED_ON_HOST

    @property
    def overhead_pct(self) -> float:
        return 100.0 * (self.profiled_ms / self.unprofiled_ms - 1.0)


# Unprofiled steps compared with the profiled ones: the ones nearest the profiled window, at
# least this many (or as many as were profiled), so that both groups ran under the same
# conditions (machine load, caches, learning-rate schedule) rather than minutes apart.
MIN_NEIGHBOURS: Final = 5
# Robust spread: MAD x 1.4826 estimates a normal sample's standard deviation; a median's
# standard error is about 1.2533 sigma / sqrt(n); 1.96 of those make a 95 % half-width.
_MAD_TO_SIGMA: Final = 1.4826
_MEDIAN_SE: Final = 1.2533
_Z95: Final = 1.96


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
    device = {
        int(r["step"]): int(r["device_ns"]) for r in records if r.get("event") == "device_step"
    }
    steps = tuple(
        StepRecord(
            int(r["step"]),
            int(r["start_ns"]),
            int(r["end_ns"]),
            str(r["action"]),
            device.get(int(r["step"])),
        )
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
    facts["export_ns"] = sum(int(r.get("export_ns") or 0) for r in traces) or None
    # A chunk renamed into place just before the process was killed has no log record yet.
    named = [path.parent / str(r["file"]) for r in traces]
    pid = int(start["pid"])
    on_disk = sorted(path.parent.glob(f"{CHUNK_PREFIX}{pid}-*{TRACE_SUFFIX}"))
    return ProcessRecord(
        pid=int(start["pid"]),
        rank=int(rank),
        log=path,
        start=start,
        end=end,
        steps=steps,
        open_step=open_step,
        traces=(*named, *(p for p in on_disk if p not in named)),
        errors=tuple(str(r["error"]) for r in records if r.get("event") == "profiler_error"),
        facts=facts,
        traced_through=max((int(r["last_step"]) for r in traces if "last_step" in r), default=None),
    )


def read_staging(staging: Path) -> tuple[ProcessRecord, ...]:
    """Every profiled process of a run, ordered by rank then pid."""
    logs = sorted(staging.glob(f"{STEP_LOG_PREFIX}*{STEP_LOG_SUFFIX}"))
    processes = [read_step_log(path) for path in logs]
    return tuple(sorted(processes, key=lambda p: (p.rank, p.pid)))


def step_times_table(processes: Iterable[ProcessRecord]) -> pa.Table:
    """Every complete step of every process: rank, step, start_ns, end_ns, profiled,
    device_ns.

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
            "device_ns": pa.array([s.device_ns for _, s in rows], pa.int64()),
        },
        schema=STEP_TIMES_SCHEMA,
    )


def profiler_overhead(
    steps: Sequence[StepRecord], *, interleaved: bool = False
) -> OverheadEstimate | None:
    """How much slower the profiled steps ran than comparable unprofiled ones; None without
    both.

    ``steps``: every step of every process, each process's in order. ``interleaved``
    recording (each recorded step followed by an unprofiled one) compares each recorded step
    with the unprofiled step right after it, in the same process: the medians of the two, and
    a noise from the spread of the pairs' ratios, so that a change of conditions during the run
    (another job starting) moves both sides of each pair alike. Otherwise (a window of consecutive
    recorded steps) the unprofiled steps nearest the window are compared
    (:func:`_neighbouring`). Step 0 (first-call initialisation everywhere) and warm-up steps
    (the profiler is already armed) are never counted as unprofiled.
    """
    pairs = [
        (first, second)
        for first, second in zip(steps, steps[1:], strict=False)
        if first.profiled and _plain(second) and second.step == first.step + 1
    ]
    # only an interleaved recording pairs its steps: in a window of consecutive recorded
    # steps, only each process's last one is followed by a plain step
    if interleaved and len(pairs) >= 2:
        times, timed = _step_ms([step for pair in pairs for step in pair])
        recorded, plain = times[0::2], times[1::2]
        ratios = [a / b for a, b in zip(recorded, plain, strict=True)]
        unprofiled_ms = statistics.median(plain)
        return OverheadEstimate(
            profiled_ms=statistics.median(recorded),
            unprofiled_ms=unprofiled_ms,
            profiled_steps=len(recorded),
            unprofiled_steps=len(plain),
            noise_pct=100.0 * _Z95 * _median_se(ratios),
            paired=True,
            timed=timed,
        )
    return _neighbouring(steps)


def _plain(step: StepRecord) -> bool:
    return step.action == ACTION_NONE and step.step > 0 and step.wall_ns > 0


def _neighbouring(steps: Sequence[StepRecord]) -> OverheadEstimate | None:
    """The median profiled step against the median of the unprofiled steps nearest the
    profiled window (by step number, before or after it): at least :data:`MIN_NEIGHBOURS`
    step numbers, or as many as were profiled, every process's steps of those numbers."""
    profiled = [s for s in steps if s.profiled]
    plain = [s for s in steps if _plain(s)]
    if not profiled or not plain:
        return None
    first = min(s.step for s in profiled)
    last = max(s.step for s in profiled)

    def distance(step: int) -> int:
        return first - step if step < first else step - last

    wanted = max(MIN_NEIGHBOURS, len({s.step for s in profiled}))
    nearest = set(sorted({s.step for s in plain}, key=lambda n: (distance(n), n))[:wanted])
    compared = [s for s in plain if s.step in nearest]
    times, timed = _step_ms([*profiled, *compared])
    profiled_walls, plain_walls = times[: len(profiled)], times[len(profiled) :]
    unprofiled_ms = statistics.median(plain_walls)
    return OverheadEstimate(
        profiled_ms=statistics.median(profiled_walls),
        unprofiled_ms=unprofiled_ms,
        profiled_steps=len(profiled_walls),
        unprofiled_steps=len(plain_walls),
        noise_pct=_noise_pct(profiled_walls, plain_walls, unprofiled_ms),
        timed=timed,
    )


def _median_se(values: Sequence[float]) -> float:
    """A median's standard error from the values' robust spread (MAD)."""
    centre = statistics.median(values)
    sigma = _MAD_TO_SIGMA * statistics.median(abs(v - centre) for v in values)
    return float(_MEDIAN_SE * sigma / math.sqrt(len(values)))


def _noise_pct(
    profiled_ms: Sequence[float], plain_ms: Sequence[float], unprofiled_ms: float
) -> float | None:
    """The half-width of the difference of the two medians, in % of ``unprofiled_ms``."""
    if len(profiled_ms) < 2 or len(plain_ms) < 2 or unprofiled_ms <= 0:
        return None
    spread = math.hypot(_median_se(profiled_ms), _median_se(plain_ms))
    return float(100.0 * _Z95 * spread / unprofiled_ms)


# Where the profiler's own messages of a recording are kept in its profile directory.
PROFILER_LOG: Final = "raw/profiler.log"


def keep_profiler_log(staging: Path, profile: Path) -> Path | None:
    """Join what the profiler library printed in each process (``profiler-<pid>.log``, in pid
    order) into the profile's :data:`PROFILER_LOG`; the file written, None when nothing was
    printed."""
    logs = sorted(
        staging.glob(f"{PROFILER_LOG_PREFIX}*{PROFILER_LOG_SUFFIX}"),
        key=lambda path: (len(path.name), path.name),
    )
    text = b"".join(path.read_bytes() for path in logs)
    if not text:
        return None
    target = profile / PROFILER_LOG
    target.parent.mkdir(exist_ok=True)
    write_bytes(target, text)
    return target


def incomplete_recorded_step(process: ProcessRecord) -> int | None:
    """The step whose annotation the trace holds although the program ended inside it."""
    step = process.open_step
    if step is not None and step.profiled and process.traces:
        return step.step
    return None


def finish_trace(
    trace: Path, *, incomplete_step: int | None = None, chunk_bytes: int = 1 << 22
) -> Path:
    """Gzip a staged trace, renaming an incomplete step's annotation; returns the new path."""
    target = trace.with_name(trace.name + ".gz")
    return finish_traces([trace], target, incomplete_step=incomplete_step, chunk_bytes=chunk_bytes)


def finish_traces(
    chunks: Sequence[Path],
    target: Path,
    *,
    incomplete_step: int | None = None,
    chunk_bytes: int = 1 << 22,
) -> Path:
    """Join the chunks of one process's trace into the gzipped trace ``target``; returns it.

    One chunk is streamed (bounded memory whatever its size); several are joined into one
    Kineto document: the events of every chunk in order, the other keys of the last chunk (it
    knows the most: ranks and devices initialised late). The events' text is copied as it is,
    so timestamps keep every digit. An incomplete step's annotation is renamed (see
    :data:`INCOMPLETE_STEP_PREFIX`). Written through a temporary name; the chunks are removed.

    Raises:
        PerfledgerError: a chunk that is not a Kineto trace.
    """
    old = new = b""
    if incomplete_step is not None:
        old = f'"ProfilerStep#{incomplete_step}"'.encode()
        new = f'"{INCOMPLETE_STEP_PREFIX}{incomplete_step}"'.encode()
    with replacing(target) as partial, gzip.open(partial, "wb", compresslevel=1) as sink:
        write = _Renamer(old, new, sink.write)
        if len(chunks) == 1:
            with chunks[0].open("rb") as source:
                while block := source.read(chunk_bytes):
                    write(block)
        else:
            _join_chunks(chunks, write)
        write.close()
    for chunk in chunks:
        chunk.unlink()
    return target


class _Renamer:
    """Writes text with ``old`` replaced by ``new``, across the pieces it is given."""

    def __init__(self, old: bytes, new: bytes, write: Callable[[bytes], object]) -> None:
        self._old, self._new, self._write = old, new, write
        self._carry = b""

    def __call__(self, text: bytes) -> None:
        if not self._old:
            self._write(text)
            return
        self._carry = _replace_complete(self._carry + text, self._old, self._new, self._write)

    def close(self) -> None:
        self._write(self._carry)
        self._carry = b""


# Where a Kineto document's event array opens.
_EVENTS_OPEN: Final = re.compile(rb'"traceEvents"\s*:\s*\[')
# How far from its end a document's event array may close (the keys written after it).
_TAIL_LIMIT: Final = 1 << 20


def _events_span(path: Path) -> tuple[tuple[int, int] | None, dict[str, Any]]:
    """Where the text of the document's events lies, ``[start, end)`` between its array's
    brackets (None where it cannot be told), and the document itself.

    Raises:
        PerfledgerError: not a Kineto document.
    """
    text = path.read_bytes()
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise PerfledgerError(f"{path}: not a JSON trace ({error})") from error
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise PerfledgerError(f"{path}: not a Kineto trace (no traceEvents array)")
    opened = _EVENTS_OPEN.search(text)
    if opened is None:
        return None, document
    head = text[: opened.end()]
    rest = {**document, "traceEvents": []}
    close = len(text)
    floor = max(opened.end(), len(text) - _TAIL_LIMIT)
    # The array closes at the last "]" whose cut leaves the rest of the document intact.
    while (close := text.rfind(b"]", floor, close)) != -1:
        if _parses_to(head + text[close:], rest):
            return (opened.end(), close), document
    return None, document


def _parses_to(text: bytes, expected: dict[str, Any]) -> bool:
    try:
        return bool(json.loads(text) == expected)
    except (ValueError, RecursionError):
        return False


def _join_chunks(chunks: Sequence[Path], write: Callable[[bytes], object]) -> None:
    """Write the joined document: the last chunk's head, every chunk's events, its tail.

    One chunk is read at a time (twice: once to find its events, once to copy them).
    """
    spans: list[tuple[int, int]] = []
    bases: set[Any] = set()
    for chunk in chunks:
        span, document = _events_span(chunk)
        if span is None:
            _join_documents(chunks, write)
            return
        spans.append(span)
        bases.add(document.get("baseTimeNanoseconds"))
    if len(bases) > 1:
        _join_documents(chunks, write)
        return
    last = chunks[-1].read_bytes()
    write(last[: spans[-1][0]])
    first = True
    for chunk, (start, end) in zip(chunks, spans, strict=True):
        events = chunk.read_bytes()[start:end]
        if not events.strip():
            continue
        if not first:
            write(b",")
        write(events)
        first = False
    write(last[spans[-1][1] :])


def _join_documents(chunks: Sequence[Path], write: Callable[[bytes], object]) -> None:
    """Join chunks whose text cannot be cut, or whose base times differ, as parsed documents.

    Only a fallback: numbers are printed again by Python, so the nanosecond digits of large
    microsecond timestamps may round.
    """
    documents = [_events_span(chunk)[1] for chunk in chunks]
    base = documents[-1].get("baseTimeNanoseconds")
    events: list[Any] = []
    for document in documents:
        shift_us = 0.0
        if isinstance(base, int) and isinstance(document.get("baseTimeNanoseconds"), int):
            shift_us = (document["baseTimeNanoseconds"] - base) / 1e3
        for event in document["traceEvents"]:
            if shift_us and isinstance(event, dict) and isinstance(event.get("ts"), int | float):
                event["ts"] += shift_us
            events.append(event)
    write(json.dumps({**documents[-1], "traceEvents": events}).encode())


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
