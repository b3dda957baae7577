"""Importers: one module per trace format, each producing :class:`Trace` objects.

:func:`load_traces` takes what the user named on the command line (files, rank folders, Ascend
output folders) and returns one canonical trace per rank.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from perfledger.errors import PerfledgerError
from perfledger.files import broken_link, is_own_output
from perfledger.model.trace import Trace

__all__ = ["Trace", "discover", "load_traces"]

Progress = Callable[[int, int], None]
_KINETO_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def _ascend_runs(path: Path) -> list[Path]:
    from perfledger.sources import ascend

    return ascend.find_runs(path)


def _is_kineto_name(path: Path) -> bool:
    """A trace's name on anything but a folder: a file, and also a broken link, a named
    pipe or a device so named, which the import then reports as a rank it could not read
    rather than one silently missing."""
    return path.name.lower().endswith(_KINETO_SUFFIXES) and not path.is_dir()


def _inside_own_output(path: Path, root: Path) -> bool:
    """Whether ``path`` is, or lies in, a profile or staging folder perfledger wrote below
    ``root`` (``analyze run -o run/prof`` then ``analyze run``)."""
    return any(is_own_output(p) for p in (path, *path.parents) if p != root and root in p.parents)


def discover(inputs: Sequence[Path]) -> list[tuple[str, Path]]:
    """What to import: (format, path) pairs for the files and folders the user named.

    A folder is an Ascend output folder (torch_npu ``*_ascend_pt``, ``PROF_*``, or a folder of
    them: one run), else a folder of Kineto rank traces (``*.json`` / ``*.json.gz``, searched
    two levels deep). A folder holding several runs is refused with the list of them: which
    one to analyse is the user's choice, never a silent pick.
    """
    found: list[tuple[str, Path]] = []
    for path in inputs:
        if not path.exists():
            target = broken_link(path)
            if target is not None:
                raise PerfledgerError(f"{path}: a broken link (to {target})")
            raise PerfledgerError(f"{path}: no such file or directory")
        if is_own_output(path):
            raise PerfledgerError(
                f"{path} is perfledger's own output, not a trace: read it with perfledger "
                "query, timeline or diff, or analyze the traces it was made from"
            )
        runs = _ascend_runs(path)
        if len(runs) > 1:
            raise PerfledgerError(_several_runs(path, runs))
        if runs:
            found.append(("ascend", runs[0]))
        elif not path.is_dir():  # a named pipe or a device too: the import says what it is
            found.append(("kineto", path))
        else:
            traces = sorted(
                p
                for pattern in ("*", "*/*")
                for p in path.glob(pattern)
                if _is_kineto_name(p) and not _inside_own_output(p, path)
            )
            if not traces:
                raise PerfledgerError(
                    f"{path}: no trace found (expected Kineto *.json / *.json.gz files, or "
                    "Ascend *_ascend_pt / PROF_* profiler output)"
                )
            found.extend(("kineto", p) for p in traces)
    return found


def _several_runs(path: Path, runs: Sequence[Path]) -> str:
    """The one-line error for a folder holding several profiling runs, naming them."""
    shown = [str(run.relative_to(path)) if run != path else "." for run in runs]
    listed = ", ".join(shown[:12]) + (f" and {len(shown) - 12} more" if len(shown) > 12 else "")
    return (
        f"{path}: {len(runs)} profiling runs found ({listed}); analyse one run at a time, "
        f"e.g. perfledger analyze {runs[0] if runs[0] != path else path}"
    )


def _with_rank(trace: Trace, rank: int) -> Trace:
    events = trace.events
    index = events.schema.get_field_index("rank")
    ranks = pa.array([rank] * events.num_rows, pa.int32())
    counters = trace.counters
    c_index = counters.schema.get_field_index("rank")
    c_ranks = pa.array([rank] * counters.num_rows, pa.int32())
    return replace(
        trace,
        events=events.set_column(index, events.schema.field("rank"), ranks),
        counters=counters.set_column(c_index, counters.schema.field("rank"), c_ranks),
        meta={**trace.meta, "rank": rank},
    )


def _trace_rank(trace: Trace) -> int | None:
    rank = trace.meta.get("rank")
    return int(rank) if isinstance(rank, int) else None


def load_traces(
    inputs: Sequence[Path], progress: Progress | None = None, *, workers: int = 0
) -> list[Trace]:
    """Import every trace named by ``inputs``; one :class:`Trace` per rank, sorted by rank.

    Ranks come from the trace itself (distributedInfo, profiler_info), else from a
    ``rank<N>`` in the file name, else from the order of the files. Two traces claiming the
    same rank are an error. ``workers``: processes that decode a large Kineto trace
    (:func:`perfledger.sources.kineto.load_kineto`).
    """
    from perfledger.sources.kineto import load_kineto

    traces: list[Trace] = []
    for fmt, path in discover(inputs):
        if fmt == "ascend":
            from perfledger.sources.ascend import load_ascend

            traces.extend(load_ascend(path, progress=progress))
        else:
            traces.append(load_kineto(path, progress=progress, workers=workers))
    if len(traces) > 1:
        ranks = [_trace_rank(t) for t in traces]
        if len(set(ranks)) < len(ranks):
            # ranks unknown or repeated in the traces: try the file names, then the order
            named = [
                int(m.group(1)) if (m := _RANK_IN_NAME.search(_name_of(t))) else None
                for t in traces
            ]
            if None not in named and len(set(named)) == len(named):
                traces = [
                    _with_rank(t, r) for t, r in zip(traces, named, strict=True) if r is not None
                ]
            elif all(r is None for r in ranks):
                traces = [_with_rank(t, i) for i, t in enumerate(traces)]
            else:
                files = ", ".join(_name_of(t) for t in traces)
                raise PerfledgerError(f"several traces claim the same rank: {files}")
    from perfledger.sources.names import bounded

    return sorted((bounded(t) for t in traces), key=lambda t: _trace_rank(t) or 0)


def _name_of(trace: Trace) -> str:
    return trace.source_files[0].name if trace.source_files else "?"
