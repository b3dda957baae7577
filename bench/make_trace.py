"""Make a large Kineto trace by repeating a real one end to end in time.

The source's activity events are written K times; copy k has every timestamp moved by
k * span, every link id (External id, correlation, flow id, Python id) moved by k * id_offset so
that links stay unique, and ProfilerStep#N renumbered to N + k * step_count. Process/thread
metadata and the profiler's bookkeeping events are written once. The text of each event is
kept exactly as Kineto wrote it (pretty-printed, several lines per event): only the numbers
above are rewritten, one copy at a time, so memory stays near twice the source size whatever
the output size.

Usage: python bench/make_trace.py [--size-mb 500] [--gzip] [--workdir bench/out]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_WORKDIR, TEST_TRACES  # noqa: E402

DEFAULT_SOURCE = TEST_TRACES / "kineto" / "v100_rank1_ddp.json.gz"
GENERATOR_VERSION = 1

# Keys whose integer values link events to each other and must stay unique across copies.
LINK_KEYS: tuple[str, ...] = ("External id", "correlation", "id", "Python id", "Python parent id")

# One pass rewrites every number that a copy moves. Keys are matched with their opening quote
# so that "id" never matches inside "External id"; only non-negative integers are moved
# (-1 means "no link"), and for float timestamps only the integer part is touched, which is
# exact because the shift is a whole number of microseconds.
_COPY_PATTERN = re.compile(
    r'(?P<key>"(?P<name>ts|'
    + "|".join(re.escape(key) for key in LINK_KEYS)
    + r')": )(?P<num>\d+)|(?P<step>ProfilerStep#)(?P<step_num>\d+)'
)
# A top-level event of a pretty-printed Kineto trace: from a line "  {" to the next "  }".
_EVENT_BLOCK = re.compile(r"^  \{$.*?^  \}", re.MULTILINE | re.DOTALL)
_EVENTS_OPEN = re.compile(r'"traceEvents"\s*:\s*\[')
_STEP_NAME = re.compile(r"ProfilerStep#(\d+)")


class SourceTraceError(Exception):
    """The source trace is not a pretty-printed Kineto trace this generator understands."""


@dataclass(frozen=True)
class ScaledTrace:
    """A generated trace and how it was made."""

    path: Path
    source: str
    copies: int
    raw_bytes: int  # uncompressed JSON size
    file_bytes: int  # size on disk (smaller when gzipped)
    events: int
    ts_shift_us: int
    id_offset: int
    step_offset: int
    generator_version: int = GENERATOR_VERSION


@dataclass(frozen=True)
class _Template:
    """The source split into what is repeated and what is written once."""

    header: str  # up to and including "traceEvents": [
    repeated: str  # activity events, joined with ",\n"
    repeated_count: int
    once: list[str]  # metadata and bookkeeping events, already adjusted for the copies
    footer: str  # from the closing bracket of traceEvents to the end
    ts_shift_us: int
    id_offset: int
    step_offset: int


def open_trace(path: Path) -> io.BufferedIOBase:
    """A trace opened for binary reading, gzip or plain by its name."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return path.open("rb")


def _read_text(path: Path) -> str:
    """The whole source as text."""
    with open_trace(path) as fh:
        return fh.read().decode("utf-8")


def _is_bookkeeping(event: dict[str, Any]) -> bool:
    """Metadata ("M") and the profiler's own span/marker events (string pids) are not activity."""
    return event.get("ph") == "M" or isinstance(event.get("pid"), str)


def _template(source: Path, copies: int) -> _Template:
    """Split the source into header, repeated activity text, once-only events and footer."""
    text = _read_text(source)
    opening = _EVENTS_OPEN.search(text)
    if opening is None:
        raise SourceTraceError(f"{source}: no traceEvents array")
    closing = text.rfind("\n  ]")
    if closing < opening.end():
        raise SourceTraceError(f"{source}: traceEvents is not pretty-printed as Kineto does")
    events: list[dict[str, Any]] = msgspec.json.decode(text.encode())["traceEvents"]
    blocks = _EVENT_BLOCK.findall(text, opening.end(), closing + 1)
    if len(blocks) != len(events) or any(
        f'"ph": "{event.get("ph")}"' not in block
        for block, event in zip(blocks, events, strict=True)
    ):
        raise SourceTraceError(
            f"{source}: found {len(blocks)} event blocks for {len(events)} events; "
            "the text layout is not Kineto's"
        )

    activity = [e for e in events if not _is_bookkeeping(e)]
    first_ts = min(float(e["ts"]) for e in activity)
    last_end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in activity)
    # Whole milliseconds, with at least 1 ms between the end of a copy and the next one.
    ts_shift_us = (math.ceil((last_end - first_ts) / 1000.0) + 1) * 1000

    max_id = 0
    for event in activity:
        args = event.get("args") or {}
        for value in (event.get("id"), *(args.get(key) for key in LINK_KEYS)):
            if isinstance(value, int):
                max_id = max(max_id, value)
    id_offset = 10 ** len(str(max_id))  # a round number above every id: copies read clearly

    step_numbers = [
        int(m.group(1)) for e in activity if (m := _STEP_NAME.fullmatch(str(e.get("name", ""))))
    ]
    step_offset = max(step_numbers) - min(step_numbers) + 1 if step_numbers else 0

    repeated = [block for block, e in zip(blocks, events, strict=True) if not _is_bookkeeping(e)]
    extra_us = (copies - 1) * ts_shift_us
    once: list[str] = []
    for block, event in zip(blocks, events, strict=True):
        if not _is_bookkeeping(event):
            continue
        if event.get("name") == "Record Window End":
            # The profiler's end marker moves to the end of the last copy.
            block = re.sub(r'"ts": (\d+)', lambda m: f'"ts": {int(m.group(1)) + extra_us}', block)
        elif event.get("ph") == "X" and event.get("pid") == "Spans":
            # The profiler's own span covers every copy.
            block = re.sub(r'"dur": (\d+)', lambda m: f'"dur": {int(m.group(1)) + extra_us}', block)
        once.append(block)
    return _Template(
        header=text[: opening.end()],
        repeated=",\n".join(repeated),
        repeated_count=len(repeated),
        once=once,
        footer=text[closing:],
        ts_shift_us=ts_shift_us,
        id_offset=id_offset,
        step_offset=step_offset,
    )


def _copy_text(template: _Template, k: int) -> str:
    """The repeated events of copy k (copy 0 is the source text unchanged)."""
    if k == 0:
        return template.repeated
    ts_add = k * template.ts_shift_us
    id_add = k * template.id_offset
    step_add = k * template.step_offset

    def moved(match: re.Match[str]) -> str:
        if match.group("step") is not None:
            return f"ProfilerStep#{int(match.group('step_num')) + step_add}"
        add = ts_add if match.group("name") == "ts" else id_add
        return f"{match.group('key')}{int(match.group('num')) + add}"

    return _COPY_PATTERN.sub(moved, template.repeated)


def copies_for_size(source_repeated_bytes: int, size_mb: float) -> int:
    """Number of copies whose size is nearest to ``size_mb`` (decimal MB), at least one."""
    return max(1, round(size_mb * 1e6 / source_repeated_bytes))


def _info_path(path: Path) -> Path:
    return path.with_name(path.name + ".info.json")


def make_scaled_trace(
    out_dir: Path,
    *,
    source: Path = DEFAULT_SOURCE,
    size_mb: float = 500.0,
    copies: int | None = None,
    compress: bool = False,
    reuse: bool = True,
) -> ScaledTrace:
    """Write (or reuse) a scaled copy of ``source`` under ``out_dir``; return its description.

    ``copies`` overrides ``size_mb``. The file is written under a temporary name and renamed,
    and its description is written next to it last, so a cached file is always whole.
    """
    if not source.exists():
        raise FileNotFoundError(f"source trace {source} is missing (tests/data?)")
    stem = source.name.removesuffix(".gz").removesuffix(".json")
    if copies is None:
        # The repeated part is nearly the whole file: size the copy count on the file's text.
        with gzip.open(source, "rb") if source.name.endswith(".gz") else open(source, "rb") as fh:
            source_bytes = sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 24), b""))
        copies = copies_for_size(source_bytes, size_mb)
    if copies < 1:
        raise ValueError("copies must be at least 1")
    path = out_dir / f"{stem}_x{copies}.json{'.gz' if compress else ''}"
    info = _info_path(path)
    if reuse and path.exists() and info.exists():
        cached = json.loads(info.read_text())
        if cached.get("generator_version") == GENERATOR_VERSION and cached.get("source") == str(
            source
        ):
            return ScaledTrace(**{**cached, "path": path})

    template = _template(source, copies)
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    raw_bytes = 0
    sink: io.BufferedIOBase = (
        gzip.open(partial, "wb", compresslevel=6) if compress else partial.open("wb")  # noqa: SIM115
    )
    with sink:

        def write(piece: str) -> None:
            nonlocal raw_bytes
            data = piece.encode("utf-8")
            raw_bytes += len(data)
            sink.write(data)

        write(template.header + "\n")
        for k in range(copies):
            if k:
                write(",\n")
            write(_copy_text(template, k))
        if template.once:
            write(",\n" + ",\n".join(template.once))
        write(template.footer)
    partial.replace(path)
    scaled = ScaledTrace(
        path=path,
        source=str(source),
        copies=copies,
        raw_bytes=raw_bytes,
        file_bytes=path.stat().st_size,
        events=copies * template.repeated_count + len(template.once),
        ts_shift_us=template.ts_shift_us,
        id_offset=template.id_offset,
        step_offset=template.step_offset,
    )
    info.write_text(json.dumps({**asdict(scaled), "path": str(path)}, indent=1) + "\n")
    return scaled


def main(argv: list[str] | None = None) -> int:
    """Command line: generate the trace and print where it is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--size-mb", type=float, default=500.0, help="target raw JSON size")
    parser.add_argument("--copies", type=int, default=None, help="number of copies (overrides)")
    parser.add_argument("--gzip", action="store_true", help="write .json.gz")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--no-reuse", action="store_true", help="regenerate even if cached")
    args = parser.parse_args(argv)
    scaled = make_scaled_trace(
        args.workdir,
        source=args.source,
        size_mb=args.size_mb,
        copies=args.copies,
        compress=args.gzip,
        reuse=not args.no_reuse,
    )
    print(
        f"{scaled.path}: {scaled.copies} copies, {scaled.events} events, "
        f"{scaled.raw_bytes / 1e6:.1f} MB raw, {scaled.file_bytes / 1e6:.1f} MB on disk"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
