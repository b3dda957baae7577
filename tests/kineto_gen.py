"""Synthetic Kineto (PyTorch profiler) Chrome-trace documents for tests.

Builders return plain event dicts; :func:`write_kineto` writes a document the way Kineto does
(pretty-printed, one key group per line) or compactly (the way Python tools rewrite traces),
optionally gzipped. Numbers that must keep every digit (float timestamps with nanosecond
digits) are given as :class:`Num`, written verbatim.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from perfledger.sources import kineto_stream

Event = dict[str, Any]


class Num(str):
    """A JSON number written exactly as given (e.g. ``Num("1712195495505543.2")``)."""


def _dump(value: Any) -> str:
    if isinstance(value, Num):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_dump(v) for v in value) + "]"
    return json.dumps(value)


def _pretty_event(event: Event) -> str:
    """One event laid out like Kineto's writer: header line, times line, args block."""
    head = [k for k in ("ph", "cat", "name", "pid", "tid") if k in event]
    times = [k for k in ("ts", "dur", "id", "bp", "s") if k in event]
    rest = [k for k in event if k not in head and k not in times and k != "args"]
    lines = ["  {"]
    lines.append("    " + ", ".join(f'"{k}": {_dump(event[k])}' for k in head + rest) + ",")
    if "args" in event:
        lines.append("    " + ", ".join(f'"{k}": {_dump(event[k])}' for k in times) + ",")
        items = [f"{json.dumps(k)}: {_dump(v)}" for k, v in event["args"].items()]
        lines.append('    "args": {')
        lines.append("      " + ",\n      ".join(items))
        lines.append("    }")
    else:
        lines.append("    " + ", ".join(f'"{k}": {_dump(event[k])}' for k in times))
    lines.append("  }")
    return "\n".join(lines)


def document_text(
    events: Iterable[Event], *, style: str = "pretty", bare: bool = False, **top: Any
) -> str:
    """The text of a Kineto document: ``top`` keys before ``traceEvents``; ``_after`` after."""
    after = top.pop("_after", {})
    if style == "compact":
        body = ", ".join(_dump(e) for e in events)
        if bare:
            return "[" + body + "]"
        keys = [f"{json.dumps(k)}: {_dump(v)}" for k, v in top.items()]
        keys.append(f'"traceEvents": [{body}]')
        keys += [f"{json.dumps(k)}: {_dump(v)}" for k, v in after.items()]
        return "{" + ", ".join(keys) + "}"
    body = ",\n".join(_pretty_event(e) for e in events)
    if bare:
        return "[\n" + body + "\n]\n"
    parts = [f"  {json.dumps(k)}: {_dump(v)}" for k, v in top.items()]
    parts.append('  "traceEvents": [\n' + body + "\n  ]")
    parts += [f"  {json.dumps(k)}: {_dump(v)}" for k, v in after.items()]
    return "\n{\n" + ",\n".join(parts) + "\n}"


def write_kineto(
    path: Path,
    events: Sequence[Event],
    *,
    style: str = "pretty",
    bare: bool = False,
    **top: Any,
) -> Path:
    """Write a document to ``path`` (gzipped when the name ends with ``.gz``)."""
    text = document_text(events, style=style, bare=bare, **top).encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text, mtime=0))
    else:
        path.write_bytes(text)
    return path


# --- event builders (times in µs, as Kineto writes them) -------------------------------------


def complete(
    cat: str, name: str, ts: Any, dur: Any, *, pid: Any = 100, tid: Any = 100, **args: Any
) -> Event:
    """An ``X`` (complete) event; keyword arguments become its args."""
    event: Event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts}
    event["dur"] = dur
    if args:
        event["args"] = args
    return event


def cpu_op(name: str, ts: Any, dur: Any, *, external_id: int, **args: Any) -> Event:
    """A host operator with the current arg names."""
    pid = args.pop("pid", 100)
    tid = args.pop("tid", 100)
    return complete(
        "cpu_op", name, ts, dur, pid=pid, tid=tid, **{"External id": external_id}, **args
    )


def runtime(
    name: str,
    ts: Any,
    dur: Any,
    *,
    correlation: int,
    external_id: int = 0,
    cat: str = "cuda_runtime",
    pid: Any = 100,
    tid: Any = 100,
    **args: Any,
) -> Event:
    """A host runtime call (cudaLaunchKernel, hipMemcpyWithStream, ...)."""
    return complete(
        cat,
        name,
        ts,
        dur,
        pid=pid,
        tid=tid,
        **{"External id": external_id, "correlation": correlation},
        **args,
    )


def device_task(
    cat: str,
    name: str,
    ts: Any,
    dur: Any,
    *,
    correlation: int | None,
    device: int = 0,
    stream: int = 7,
    external_id: int = 0,
    **args: Any,
) -> Event:
    """A device event (kernel, gpu_memcpy, gpu_memset, ...) on pid=device, tid=stream."""
    fields: dict[str, Any] = {"External id": external_id, "device": device, "stream": stream}
    if correlation is not None:
        fields["correlation"] = correlation
    fields.update(args)
    return complete(cat, name, ts, dur, pid=device, tid=stream, **fields)


def flow(
    ph: str, cat: str, flow_id: int, ts: Any, *, pid: Any, tid: Any, name: str | None = None
) -> Event:
    """A flow start (``s``) or finish (``f``, binding to the enclosing slice) event."""
    event: Event = {
        "ph": ph,
        "id": flow_id,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "cat": cat,
        "name": name or cat,
    }
    if ph == "f":
        event["bp"] = "e"
    return event


def instant(
    name: str, ts: Any, *, pid: Any = 100, tid: Any = 100, scope: str = "t", **args: Any
) -> Event:
    """An ``i`` instant event."""
    event: Event = {"ph": "i", "s": scope, "name": name, "pid": pid, "tid": tid, "ts": ts}
    if args:
        event["args"] = args
    return event


def metadata(what: str, pid: Any, tid: Any = 0, ts: Any = 0, **args: Any) -> Event:
    """An ``M`` metadata event (``what``: process_name, thread_name, process_labels, ...)."""
    return {"name": what, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args}


def profiler_span(ts: Any, dur: Any) -> list[Event]:
    """The bookkeeping events Kineto adds at the end: string pids, dropped on import."""
    return [
        {
            "ph": "X",
            "cat": "Trace",
            "ts": ts,
            "dur": dur,
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        },
        {
            "name": "process_sort_index",
            "ph": "M",
            "ts": ts,
            "pid": "Spans",
            "tid": 0,
            "args": {"sort_index": 536870912},
        },
        {
            "name": "Iteration Start: PyTorch Profiler",
            "ph": "i",
            "s": "g",
            "pid": "Traces",
            "tid": "Trace PyTorch Profiler",
            "ts": ts,
        },
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": ts},
    ]


# --- large files for throughput and memory measurements --------------------------------------

_TS = re.compile(rb'("ts": )(\d+)')


def _moved(match: re.Match[bytes], shift: int) -> bytes:
    """A "ts" field moved by ``shift`` µs."""
    return match.group(1) + str(int(match.group(2)) + shift).encode()


def scale_trace(source: Path, target: Path, copies: int) -> Path:
    """Write ``copies`` back-to-back repetitions of a pretty-printed Kineto trace's events.

    Each copy's integer ``ts`` values are shifted by the source's time span so that the result
    looks like a longer recording. The header and tail keys are kept once.
    """
    text = (
        gzip.decompress(source.read_bytes())
        if source.name.endswith(".gz")
        else (source.read_bytes())
    )
    start = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    ends, array_end, _ = kineto_stream.element_structure(text, start, len(text))
    assert array_end > 0, f"{source}: the traceEvents array does not end"
    end = ends[-1]
    body = text[start:end]
    stamps = [int(m.group(2)) for m in _TS.finditer(body)]
    span = max(stamps) - min(stamps) + 1000
    with target.open("wb") as out:
        out.write(text[:start])
        for copy in range(copies):
            shift = copy * span
            if copy:
                out.write(b",")
            out.write(_TS.sub(partial(_moved, shift=shift), body))
        out.write(text[end:])
    return target
