"""Make a large torch_npu export by repeating a real one end to end in time.

Text exports (``--kind text``): the rank's ``trace_view.json`` events, ``kernel_details.csv``
rows and ``memory_record.csv`` samples are written K times; copy k has every timestamp moved
by k * span (whole µs: the text of the number keeps its decimals), every flow ``id`` and
``connection_id`` moved by k * id_offset, and ``ProfilerStep#N`` / ``Step Id`` N renumbered
N + k * step_count (``step_trace_time.csv`` gets a row per copy). Metadata events and every
other file are written once.

Database exports (``--kind db``): the same for ``ascend_pytorch_profiler_<r>.db``: the rows of
every table of the run (tasks, APIs, operators, memory and counter samples, step times,
connection ids) are inserted K times with their times (columns ``*Ns``, ``timestamp*``) moved
by k * span, their links (``connectionId``, ``globalTaskId``, ``opId``, ``callchainId`` and
the connection-id table) by k * id_offset, and step names and ids renumbered; lookup tables
(``STRING_IDS`` but for the new step names, ``ENUM_*``, metadata) are kept once.

Source: rank 0 of ``tests/data/ascend/torch_npu_{text,db}/level1`` (one step). The export is
written under a temporary name and renamed, with an ``.info.json`` next to it; a later run
reuses it.

Usage: python bench/make_ascend.py [--kind text|db] [--size-mb 500] [--workdir bench/out]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import shutil
import sqlite3
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_WORKDIR, TEST_TRACES  # noqa: E402

GENERATOR_VERSION = 2  # 2: the call chains of each copy its own (PYTORCH_CALLCHAINS.id moved)
SOURCES = {
    "text": TEST_TRACES / "ascend" / "torch_npu_text" / "level1" / "rank0_ascend_pt",
    "db": TEST_TRACES / "ascend" / "torch_npu_db" / "level1" / "rank0_ascend_pt",
}
OUTPUT = "ASCEND_PROFILER_OUTPUT"
_STEP = re.compile(r"ProfilerStep#(\d+)")
# "ts": "<µs>.<decimals>" in trace_view.json; flow ids and connection ids.
_TEXT_PATTERN = re.compile(
    r'(?P<ts>"ts": ")(?P<us>\d+)(?=[."])|(?P<key>"(?:id|connection_id)": )(?P<num>\d+)'
    r"|ProfilerStep#(?P<step>\d+)"
)
# Database columns that hold times, and those that link rows across tables.
_TIME_COLUMN = re.compile(r"(Ns|^timestamp|^timestampNs|^allocationTime|^releaseTime)$")
_LINK_COLUMNS = ("connectionId", "globalTaskId", "opId", "callchainId")
# the tables keyed by a link (their own id column): moved with the links that name them
_LINK_KEYS = {("CONNECTION_IDS", "id"), ("PYTORCH_CALLCHAINS", "id")}
# Tables written once: lookups and run metadata.
_ONCE = re.compile(
    r"^(ENUM_.*|STRING_IDS|META_DATA|NPU_INFO|HOST_INFO|SESSION_TIME_INFO|RANK_DEVICE_MAP|"
    r"sqlite_sequence|status_info)$"
)


@dataclass(frozen=True)
class AscendExport:
    """A generated export and how it was made."""

    path: Path  # the rank folder (what perfledger analyze reads)
    kind: str
    source: str
    copies: int
    raw_bytes: int  # the export's files, all of them
    events: int  # timeline events (text) or task + API rows (db) written
    shift_us: int
    generator_version: int = GENERATOR_VERSION


def _args(event: dict[str, object]) -> dict[str, object]:
    """An event's args (empty where it has none or they are not an object)."""
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _span_us(times_us: list[float]) -> int:
    """Whole ms covering the source's times, plus 1 ms between copies."""
    return (math.ceil((max(times_us) - min(times_us)) / 1000.0) + 1) * 1000


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _write_text(source: Path, target: Path, copies: int) -> tuple[int, int]:
    """The text export, K copies; (events written, shift in µs)."""
    shutil.copytree(source, target)
    out = target / OUTPUT
    text = (source / OUTPUT / "trace_view.json").read_text()
    events: list[dict[str, object]] = msgspec.json.decode(text.encode())
    timed = [e for e in events if e.get("ts") is not None]
    shift = _span_us(
        [float(str(e["ts"])) for e in timed]
        + [float(str(e["ts"])) + float(str(e.get("dur", 0))) for e in timed]
    )
    ids = [
        int(v)
        for e in timed
        for v in (e.get("id"), _args(e).get("connection_id"))
        if isinstance(v, int)
    ]
    id_offset = 10 ** len(str(max(ids) - min(ids) + 1)) if ids else 0
    steps = [int(m.group(1)) for e in timed if (m := _STEP.fullmatch(str(e.get("name", ""))))]
    step_count = max(steps) - min(steps) + 1 if steps else 1
    # one event per item, as the source writes them (", " between items)
    once = [msgspec.json.encode(e).decode() for e in events if e.get("ts") is None]
    repeated = ", ".join(
        json.dumps(e, ensure_ascii=False) for e in events if e.get("ts") is not None
    )

    def copy_text(k: int) -> str:
        def moved(match: re.Match[str]) -> str:
            if match.group("ts") is not None:
                return f'"ts": "{int(match.group("us")) + k * shift}'
            if match.group("key") is not None:
                return f"{match.group('key')}{int(match.group('num')) + k * id_offset}"
            return f"ProfilerStep#{int(match.group('step')) + k * step_count}"

        return _TEXT_PATTERN.sub(moved, repeated) if k else repeated

    with (out / "trace_view.json").open("w") as sink:
        sink.write("[")
        for k in range(copies):
            sink.write((", " if k else "") + copy_text(k))
        if once:
            sink.write(", " + ", ".join(once))
        sink.write("]")
    _repeat_csv(
        source / OUTPUT / "kernel_details.csv", out, copies, shift, "Start Time(us)", step_count
    )
    _repeat_csv(source / OUTPUT / "memory_record.csv", out, copies, shift, "Timestamp(us)", 0)
    _repeat_csv(source / OUTPUT / "step_trace_time.csv", out, copies, 0, None, step_count)
    return len(timed) * copies + len(once), shift


def _repeat_csv(
    source: Path, out: Path, copies: int, shift_us: int, time_column: str | None, steps: int
) -> None:
    """A CSV's rows K times, times moved (their text's decimals kept) and steps renumbered."""
    if not source.exists():
        return
    with source.open(newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    at = header.index(time_column) if time_column in header else None
    step_at = next((i for i, h in enumerate(header) if h in ("Step Id", "Step")), None)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for k in range(copies):
        for row in body:
            row = list(row)
            if at is not None and row[at].strip():
                whole, _, rest = row[at].partition(".")
                row[at] = f"{int(whole) + k * shift_us}" + (f".{rest}" if _ else "")
            if step_at is not None and row[step_at].strip().isdigit() and steps:
                row[step_at] = str(int(row[step_at]) + k * steps)
            writer.writerow(row)
    (out / source.name).write_text(buffer.getvalue())


def _write_db(source: Path, target: Path, copies: int) -> tuple[int, int]:
    """The database export, K copies; (task and API rows written, shift in µs)."""
    shutil.copytree(source, target)
    path = next((target / OUTPUT).glob("ascend_pytorch_profiler_*.db"))
    db = sqlite3.connect(path)
    tables = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'") if n]
    times: list[int] = []
    for table in ("TASK", "CANN_API"):
        times += [int(v) for row in db.execute(f"SELECT startNs, endNs FROM {table}") for v in row]
    shift_ns = _span_us([t / 1000 for t in times]) * 1000
    links: list[int] = []
    for table in tables:
        columns = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
        for column in columns:
            if column in _LINK_COLUMNS:
                links += [int(v) for (v,) in db.execute(f'SELECT "{column}" FROM "{table}"') if v]
    id_offset = 10 ** len(str(max(links) + 1)) if links else 0
    steps = [int(s) for (s,) in db.execute("SELECT id FROM STEP_TIME")]
    step_count = max(steps) - min(steps) + 1 if steps else 1
    step_names = {
        sid: int(m.group(1))
        for sid, value in db.execute("SELECT id, value FROM STRING_IDS")
        if (m := _STEP.fullmatch(str(value)))
    }
    next_string = int(db.execute("SELECT max(id) FROM STRING_IDS").fetchone()[0]) + 1
    repeated = [t for t in tables if not _ONCE.match(t)]
    last_rowid = {
        t: int(db.execute(f'SELECT coalesce(max(rowid), 0) FROM "{t}"').fetchone()[0])
        for t in repeated
    }
    with db:
        for k in range(1, copies):
            # the step names of copy k, as new strings
            renamed: dict[int, int] = {}
            for sid, number in step_names.items():
                db.execute(
                    "INSERT INTO STRING_IDS (id, value) VALUES (?, ?)",
                    (next_string, f"ProfilerStep#{number + k * step_count}"),
                )
                renamed[sid] = next_string
                next_string += 1
            for table in repeated:
                columns = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
                picks = []
                for column in columns:
                    quoted = f'"{column}"'
                    if _TIME_COLUMN.search(column):
                        picks.append(f"CAST({quoted} AS INTEGER) + {k * shift_ns}")
                    elif column in _LINK_COLUMNS or (table, column) in _LINK_KEYS:
                        picks.append(f"{quoted} + {k * id_offset}")
                    elif table == "STEP_TIME" and column == "id":
                        picks.append(f"{quoted} + {k * step_count}")
                    elif column == "name" and renamed:
                        cases = " ".join(f"WHEN {a} THEN {b}" for a, b in renamed.items())
                        picks.append(f"CASE {quoted} {cases} ELSE {quoted} END")
                    elif table == "OVERLAP_ANALYSIS" and column == "id":
                        picks.append("NULL")
                    else:
                        picks.append(quoted)
                names = ", ".join(f'"{c}"' for c in columns)
                # the source's rows only (copies get larger rowids: appended, or keyed by a
                # moved link)
                db.execute(
                    f'INSERT INTO "{table}" ({names}) SELECT {", ".join(picks)} FROM "{table}" '
                    f"WHERE rowid <= {last_rowid[table]}"
                )
        end = db.execute("SELECT max(endNs) FROM TASK").fetchone()[0]
        db.execute("UPDATE SESSION_TIME_INFO SET endTimeNs = max(endTimeNs, ?)", (end,))
    rows = sum(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("TASK", "CANN_API"))
    rows += db.execute("SELECT count(*) FROM PYTORCH_API").fetchone()[0]
    db.close()
    return int(rows), shift_ns // 1000


def make_ascend_export(
    out_dir: Path, *, kind: str = "text", size_mb: float = 500.0, reuse: bool = True
) -> AscendExport:
    """Write (or reuse) a repeated copy of the sample export under ``out_dir``."""
    source = SOURCES[kind]
    copies = max(1, round(size_mb * 1e6 / _folder_bytes(source)))
    folder = out_dir / f"ascend_{kind}_x{copies}"
    target = folder / source.name
    info = folder.with_name(folder.name + ".info.json")
    if reuse and target.exists() and info.exists():
        cached = json.loads(info.read_text())
        if cached.get("generator_version") == GENERATOR_VERSION:
            return AscendExport(**{**cached, "path": target})
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    write = _write_text if kind == "text" else _write_db
    events, shift_us = write(source, partial / source.name, copies)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    export = AscendExport(
        path=target,
        kind=kind,
        source=str(source),
        copies=copies,
        raw_bytes=_folder_bytes(target),
        events=events,
        shift_us=shift_us,
    )
    info.write_text(json.dumps({**asdict(export), "path": str(target)}, indent=1) + "\n")
    return export


def main(argv: list[str] | None = None) -> int:
    """Command line: generate the export and print where it is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(SOURCES), default="text")
    parser.add_argument("--size-mb", type=float, default=500.0, help="target size of the export")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--no-reuse", action="store_true", help="regenerate even if cached")
    args = parser.parse_args(argv)
    export = make_ascend_export(
        args.workdir, kind=args.kind, size_mb=args.size_mb, reuse=not args.no_reuse
    )
    print(
        f"{export.path}: {export.copies} copies, {export.events} events, "
        f"{export.raw_bytes / 1e6:.1f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
