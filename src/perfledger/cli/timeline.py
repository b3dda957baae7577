"""``perfledger timeline PROFILE --step N | --window A:B``: a timeline of part of a profile.

Writes a Chrome trace (Perfetto, chrome://tracing) of one step, or of a time window given
in ms from the profile start (as Perfetto shows it), from the profile's tables: the same
tracks, names and time origin as the profile's own ``timeline.json.gz``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import gzip
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from perfledger.errors import PerfledgerError
from perfledger.files import is_profile_dir
from perfledger.memory import release_freed_memory
from perfledger.model.whatif import path_spans_by_rank
from perfledger.profiledir import StoredProfile, load_profile
from perfledger.profiledir.layout import (
    COUNTERS_TABLE,
    CRITICAL_PATH_TABLE,
    EVENTS_TABLE,
    GAPS_TABLE,
    STEPS_TABLE,
    TIMELINE,
    TIMELINE_DIR,
)
from perfledger.profiledir.reader import part_rank, read_parquet
from perfledger.render.timeline import (
    EVENT_COLUMNS,
    RankPathSpan,
    TimelinePart,
    TimelineStats,
    prepare_timeline,
    write_prepared_timeline,
    write_ranks_timeline,
)
from perfledger.render.timeline.file import TIMELINE_HEAD, TIMELINE_TAIL

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TIME = re.compile(r"^\s*(-?\d+(?:\.\d*)?|-?\.\d+)\s*(ns|us|µs|ms|s)?\s*$")


def add_parser(subparsers: Any) -> None:
    """Register the ``timeline`` subcommand."""
    parser = subparsers.add_parser(
        "timeline",
        help="write a Perfetto timeline of one step or time window of a profile",
        description=(
            "Write a Chrome trace JSON (open it in https://ui.perfetto.dev or "
            "chrome://tracing) of one step or one time window of a profile directory, with "
            "host threads, device streams, launch flows, idle gaps by cause, counters and the "
            "spans of findings. Times stay relative to the profile start, as in the "
            "profile's timeline.json.gz."
        ),
    )
    parser.add_argument("profile", type=Path, help="profile directory")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, metavar="N", help="the step to show")
    which.add_argument(
        "--window",
        metavar="A:B",
        help="from A to B after the profile start, in ms unless a unit is given "
        "(ns, us, ms, s): 120:180, 1.5s:2s; A or B may be left out",
    )
    parser.add_argument(
        "--max-events", type=int, metavar="K", help="keep only the earliest K events"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="output file, gzip when it ends with .gz (default: "
        "<profile>_step<N>.json.gz or <profile>_window.json.gz in the current directory)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    parser.set_defaults(run=run)


def parse_time_ns(text: str) -> int:
    """``"12.5"`` (ms), ``"300us"``, ``"1.2s"`` ... as integer ns."""
    match = _TIME.match(text)
    if match is None:
        raise PerfledgerError(
            f"--window: cannot read the time {text!r} (a number, optionally with ns, us, ms, s)"
        )
    number, unit = match.group(1), match.group(2) or "ms"
    return round(float(number) * _UNITS_NS[unit])


def parse_window(text: str) -> tuple[int | None, int | None]:
    """``A:B`` as ns offsets from the profile start (None where a side is left out)."""
    if text.count(":") != 1:
        raise PerfledgerError(f"--window: expected A:B, got {text!r}")
    a, b = text.split(":")
    lo = parse_time_ns(a) if a.strip() else None
    hi = parse_time_ns(b) if b.strip() else None
    if lo is not None and hi is not None and hi <= lo:
        raise PerfledgerError(f"--window: {text!r} ends before it starts")
    return lo, hi


def _origin(profile: StoredProfile, counters: pa.Table | None) -> int:
    """The profile start: the first event (else the first counter sample), as the profile's
    own timeline counts it."""
    firsts = []
    for path in _event_files(profile):  # one rank's column at a time
        starts = read_parquet(path, columns=["start_ns"])
        if starts.num_rows:
            firsts.append(int(pc.min(starts.column("start_ns")).as_py()))
    if firsts:
        return min(firsts)
    if counters is not None and counters.num_rows:
        return int(pc.min(counters.column("ts_ns")).as_py())
    raise PerfledgerError(f"{profile.path}: the profile holds no event")


def _event_files(profile: StoredProfile) -> list[Path]:
    files = profile.table_files(EVENTS_TABLE)
    if not files:
        profile.read_table(EVENTS_TABLE)  # the one-line error naming the missing table
    return files


def _step_window(profile: StoredProfile, step: int) -> tuple[int, int]:
    steps = profile.read_table(STEPS_TABLE)
    assert steps is not None
    rows = steps.filter(pc.equal(steps.column("step"), step))
    if rows.num_rows == 0:
        known = sorted(set(steps.column("step").to_pylist()))
        shown = ", ".join(str(s) for s in known[:20]) + (" ..." if len(known) > 20 else "")
        raise PerfledgerError(f"{profile.path}: no step {step} (steps: {shown or 'none'})")
    return int(pc.min(rows.column("start_ns")).as_py()), int(pc.max(rows.column("end_ns")).as_py())


def _write_by_rank(
    profile: StoredProfile,
    output: Path,
    parts: list[Path],
    gaps: pa.Table | None,
    counters: pa.Table | None,
    filters: list[tuple[str, str, int]] | None,
    window: tuple[int, int] | None,
    args: argparse.Namespace,
    origin: int,
) -> TimelineStats:
    """The timeline of a profile of several ranks, read and written one rank at a time."""
    ranks = [_file_rank(path) for path in parts]
    paths = _critical_paths(profile)

    def load(i: int) -> TimelinePart:
        events = read_parquet(parts[i], columns=list(EVENT_COLUMNS), filters=filters)
        mine = gaps.filter(pc.equal(gaps.column("rank"), ranks[i])) if gaps is not None else None
        return TimelinePart(ranks[i], events, mine, paths.get(ranks[i], ()))

    return write_ranks_timeline(
        output,
        ranks,
        load,
        origin_ns=origin,
        window=window,
        counters=counters,
        findings=profile.findings,
        max_events=args.max_events,
    )


def _critical_paths(profile: StoredProfile) -> dict[int, tuple[RankPathSpan, ...]]:
    """Per rank, the critical-path pieces analyze stored (none in older profiles)."""
    table = profile.read_table(CRITICAL_PATH_TABLE, required=False)
    return path_spans_by_rank(table) if table is not None else {}


def _file_rank(path: Path) -> int:
    """The rank of a per-rank table file (``rank=<N>.parquet``), else its first row's."""
    named = part_rank(path)
    if named is not None:
        return named
    ranks = read_parquet(path, columns=["rank"])
    return int(ranks.column("rank")[0].as_py()) if ranks.num_rows else 0


def run(args: argparse.Namespace) -> int:
    """Write the timeline; print what it holds."""
    if args.max_events is not None and args.max_events < 0:
        raise PerfledgerError("--max-events must be >= 0")
    profile = load_profile(args.profile)
    name = profile.label
    counters = profile.read_table(COUNTERS_TABLE, required=False)
    origin = _origin(profile, counters)
    window: tuple[int, int] | None = None
    if args.step is not None:
        window = _step_window(profile, args.step)
        default_name = f"{name}_step{args.step}.json.gz"
    elif args.window is not None:
        lo, hi = parse_window(args.window)
        window = (
            origin + (lo if lo is not None else 0),
            origin + hi if hi is not None else 2**62,
        )
        default_name = f"{name}_window.json.gz"
    else:
        default_name = f"{name}_timeline.json.gz"
    output: Path = args.output or Path(default_name)
    _check_output(output, force=args.force, whole=window is None)
    # events starting after the window cannot show in it: leave them on disk
    filters = [("start_ns", "<", window[1])] if window is not None else None
    gaps = profile.read_table(GAPS_TABLE, required=False)
    parts = _event_files(profile)
    with _naming_output(output):
        if len(parts) > 1:
            stats = _write_by_rank(
                profile, output, parts, gaps, counters, filters, window, args, origin
            )
        else:
            # the columns the timeline is made from: the args text (half the table) stays on
            # disk
            events = profile.read_table(EVENTS_TABLE, columns=list(EVENT_COLUMNS), filters=filters)
            assert events is not None
            prepared = prepare_timeline(
                events,
                gaps=gaps,
                counters=counters,
                findings=profile.findings,
                origin_ns=origin,
                critical_path=[p for spans in _critical_paths(profile).values() for p in spans],
            )
            # the preparation holds what the records are made of: the events go before the
            # file's records are ordered and written (the largest arrays of the command)
            del events
            release_freed_memory()
            stats = write_prepared_timeline(
                output, prepared, window=window, max_events=args.max_events
            )
    what = f"{stats.events_written} of {stats.events_total} events, {stats.flows} flows"
    if stats.truncated_at_ns is not None:
        cut_ms = (stats.truncated_at_ns - origin) / 1e6
        what += f"; cut at {cut_ms:.3f} ms after the profile start (--max-events)"
    print(f"wrote {output}: {what}")
    return 0


@contextlib.contextmanager
def _naming_output(output: Path) -> Iterator[None]:
    """A failed write of the timeline as a one-line error naming it (:func:`_output_error`)."""
    try:
        yield
    except OSError as error:
        raise _output_error(output, error) or error from error


# How every timeline perfledger writes begins (its first record, or the end of an empty one).
_OWN_STARTS = (
    f'{TIMELINE_HEAD}{{"ph":"M","pid":'.encode(),
    f"{TIMELINE_HEAD}{TIMELINE_TAIL}".encode(),
)


def _check_output(output: Path, *, force: bool, whole: bool) -> None:
    """Refuse an output that is a folder, a file of a profile, or (without ``--force``) any
    file there; ``--force`` replaces only a timeline perfledger wrote. ``whole``: the whole
    timeline, which may go to a profile's own ``timeline.json.gz``."""
    if output.name in ("", ".", "..") or (output.is_dir() and not output.is_symlink()):
        raise PerfledgerError(f"-o {output}: name a file for the timeline, not a folder")
    folder = output.absolute().parent
    in_profile = is_profile_dir(folder) or (
        folder.name == TIMELINE_DIR and is_profile_dir(folder.parent)
    )
    whole_of_profile = whole and output.name == TIMELINE and is_profile_dir(folder)
    if in_profile and not whole_of_profile:
        raise PerfledgerError(
            f"-o {output}: that is inside a profile, whose files analyze wrote; name a file "
            f"outside it (the whole timeline alone may go to PROFILE/{TIMELINE})"
        )
    if not os.path.lexists(output):
        return
    if not force:
        raise PerfledgerError(f"{output} already exists: choose another -o, or pass --force")
    if output.is_symlink() or not output.is_file():
        raise PerfledgerError(f"{output} exists and is not a file: refusing to replace it")
    if not _own_timeline(output):
        raise PerfledgerError(
            f"{output} exists and is not a timeline perfledger wrote: --force replaces only "
            "those; choose another -o"
        )


def _own_timeline(path: Path) -> bool:
    """Whether ``path`` begins as every timeline perfledger writes does (gzip or not)."""
    size = max(len(start) for start in _OWN_STARTS)
    try:
        with path.open("rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            if head == b"\x1f\x8b":
                with gzip.open(raw) as text:
                    begin = text.read(size)
            else:
                begin = raw.read(size)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    return begin.startswith(_OWN_STARTS)


# Errors of the timeline's own file (the reading of the profile's tables fails otherwise).
_OUTPUT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}
)


def _output_error(output: Path, error: OSError) -> PerfledgerError | None:
    """The one-line error naming ``output`` for a write of it that failed (its temporary name
    is not the user's concern), or None for another error."""
    named = error.filename
    place = Path(os.fsdecode(named)).absolute().parent if named is not None else None
    if error.errno not in _OUTPUT_ERRNOS or place not in (None, output.absolute().parent):
        return None
    return PerfledgerError(f"{output}: cannot write the timeline: {error.strerror or error}")
