"""Import Huawei Ascend profiler output: torch_npu (text or database) and msprof command line.

Layouts recognised (docs/formats.md lists versions and column mappings):

- torch_npu: ``<name>_ascend_pt/`` holding ``profiler_info_{rank}.json`` and
  ``ASCEND_PROFILER_OUTPUT/`` with either ``ascend_pytorch_profiler_{rank}.db`` or the text
  export (``trace_view.json``, ``kernel_details.csv``, ...);
- msprof: ``PROF_*/`` holding ``msprof_*.db`` and/or ``mindstudio_profiler_output/``
  (``msprof_*.json``, ``op_summary_*.csv`` possibly split into ``*_slice_<i>_*`` files);
- any of those directories, one of their files, or a folder holding several per-rank directories.

When a rank has both a database and a text export, the database is read: it is faster (see
docs/formats.md for the measurement) and carries the same facts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import msgspec
import pyarrow as pa

from perfledger.errors import PerfledgerError, TraceFormatError
from perfledger.files import is_own_output
from perfledger.model import schema
from perfledger.model.trace import Trace
from perfledger.sources import ascend_build as build
from perfledger.sources import ascend_db, ascend_text

SOURCE_TORCH_NPU_TEXT: Final = "torch_npu_text"
SOURCE_TORCH_NPU_DB: Final = "torch_npu_db"
SOURCE_MSPROF_CLI: Final = "msprof_cli"

_PROFILER_OUTPUT: Final = "ASCEND_PROFILER_OUTPUT"
_MSPROF_OUTPUT: Final = "mindstudio_profiler_output"
_TORCH_NPU_DB: Final = re.compile(r"^ascend_pytorch_profiler(_\d+)?\.db$")
_MSPROF_DB: Final = re.compile(r"^msprof_.*\.db$")
_MSPROF_JSON: Final = re.compile(r"^msprof(_slice_\d+)?_.*\.json$")
_OP_SUMMARY: Final = re.compile(r"^op_summary(_slice_\d+)?(_.*)?\.csv$")
_PROFILER_INFO: Final = re.compile(r"^profiler_info(_(-?\d+))?\.json$")
_NPU_DEVICE: Final = re.compile(rb"NPU:(\d+)")
_TEXT_SUMMARIES: Final = ("step_trace_time", "op_statistic", "api_statistic")


@dataclass(frozen=True)
class RankSource:
    """Where one rank's data lies and how to read it."""

    kind: str  # SOURCE_*
    root: Path  # the directory named by the user for this rank (or the file)
    db: Path | None = None
    text: ascend_text.TextFiles = field(default_factory=ascend_text.TextFiles)
    info: Path | None = None  # profiler_info_{rank}.json
    metadata: Path | None = None  # profiler_metadata.json
    analysis_db: Path | None = None


def _nonempty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _files(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.is_file())
    except OSError:
        return []


def _text_files(directory: Path, msprof: bool) -> ascend_text.TextFiles:
    """The text export files of one output directory (0-byte files count as absent)."""
    files = [p for p in _files(directory) if _nonempty(p)]
    names = {p.name: p for p in files}
    if msprof:
        timeline = tuple(sorted(p for p in files if _MSPROF_JSON.match(p.name)))
        kernels = ascend_text.kernel_files([p for p in files if _OP_SUMMARY.match(p.name)])
        memory = next((p for p in files if p.name.startswith("npu_mem")), None)
        summaries = {
            name: p
            for name in ("op_statistic", "api_statistic")
            for p in files
            if p.name.startswith(name + "_") and p.suffix == ".csv"
        }
        return ascend_text.TextFiles(
            timeline=timeline,
            kernels=kernels,
            memory=memory,
            summaries=summaries,
            device_hints=(*kernels[:1], *([memory] if memory else [])),
        )
    # memory_record.csv has been seen naming device 0 on every rank for its APP rows, while the
    # per-module and per-operator tables name the right one: ask them first
    hints = ("npu_module_mem.csv", "operator_memory.csv", "memory_record.csv", "kernel_details.csv")
    return ascend_text.TextFiles(
        device_hints=tuple(names[n] for n in hints if n in names),
        timeline=tuple(p for p in [names.get("trace_view.json")] if p is not None),
        kernels=tuple(p for p in [names.get("kernel_details.csv")] if p is not None),
        memory=names.get("memory_record.csv"),
        communication=names.get("communication.json"),
        matrix=names.get("communication_matrix.json"),
        summaries={n: names[n + ".csv"] for n in _TEXT_SUMMARIES if n + ".csv" in names},
    )


def _has_text(files: ascend_text.TextFiles) -> bool:
    return bool(files.timeline or files.kernels)


def _torch_npu_source(rank_dir: Path) -> RankSource | None:
    output = rank_dir / _PROFILER_OUTPUT
    if not output.is_dir():
        return None
    info = next((p for p in _files(rank_dir) if _PROFILER_INFO.match(p.name)), None)
    metadata = rank_dir / "profiler_metadata.json"
    meta_path = metadata if _nonempty(metadata) else None
    db = next((p for p in _files(output) if _TORCH_NPU_DB.match(p.name) and _nonempty(p)), None)
    analysis = output / "analysis.db"
    text = _text_files(output, msprof=False)
    if db is not None:
        return RankSource(
            SOURCE_TORCH_NPU_DB,
            rank_dir,
            db=db,
            text=text,
            info=info,
            metadata=meta_path,
            analysis_db=analysis if _nonempty(analysis) else None,
        )
    if _has_text(text):
        return RankSource(SOURCE_TORCH_NPU_TEXT, rank_dir, text=text, info=info, metadata=meta_path)
    return None


def _msprof_source(directory: Path) -> RankSource | None:
    """A PROF_* directory, a mindstudio_profiler_output directory or loose msprof files."""
    db = next((p for p in _files(directory) if _MSPROF_DB.match(p.name) and _nonempty(p)), None)
    output = directory / _MSPROF_OUTPUT
    text = _text_files(output if output.is_dir() else directory, msprof=True)
    if db is not None:
        return RankSource(SOURCE_MSPROF_CLI, directory, db=db, text=text)
    if _has_text(text):
        return RankSource(SOURCE_MSPROF_CLI, directory, text=text)
    return None


def _source_of(path: Path) -> RankSource | None:
    """The rank source at ``path`` itself (not in sub-folders), or None."""
    if path.is_file():
        return _file_source(path)
    if not path.is_dir():
        return None
    if path.name == _PROFILER_OUTPUT:
        return _torch_npu_source(path.parent)
    if path.name == _MSPROF_OUTPUT:
        source = _msprof_source(path)
        return (
            None
            if source is None
            else RankSource(source.kind, path.parent, db=source.db, text=source.text)
        )
    torch_npu = _torch_npu_source(path)
    if torch_npu is not None:
        return torch_npu
    return _msprof_source(path)


def _file_source(path: Path) -> RankSource | None:
    name = path.name
    if _TORCH_NPU_DB.match(name):
        if path.parent.name == _PROFILER_OUTPUT:
            source = _torch_npu_source(path.parent.parent)
            if source is not None and source.db == path:
                return source
        return RankSource(SOURCE_TORCH_NPU_DB, path, db=path)
    if _MSPROF_DB.match(name):
        return RankSource(SOURCE_MSPROF_CLI, path, db=path)
    if _MSPROF_JSON.match(name):
        return RankSource(SOURCE_MSPROF_CLI, path, text=ascend_text.TextFiles(timeline=(path,)))
    if _OP_SUMMARY.match(name):
        return RankSource(SOURCE_MSPROF_CLI, path, text=ascend_text.TextFiles(kernels=(path,)))
    if name in ("trace_view.json", "kernel_details.csv"):
        if path.parent.name == _PROFILER_OUTPUT:
            return _torch_npu_source(path.parent.parent)
        files = (
            ascend_text.TextFiles(timeline=(path,))
            if name.endswith(".json")
            else ascend_text.TextFiles(kernels=(path,))
        )
        return RankSource(SOURCE_TORCH_NPU_TEXT, path, text=files)
    return None


def _looks_like_output(path: Path) -> bool:
    """A directory laid out as Ascend output, whether or not it holds readable files."""
    if not path.is_dir():
        return False
    name = path.name
    if name in (_PROFILER_OUTPUT, _MSPROF_OUTPUT):
        return True
    if name.endswith("_ascend_pt") or name.startswith("PROF_"):
        return True
    return (path / _PROFILER_OUTPUT).is_dir() or (path / _MSPROF_OUTPUT).is_dir()


def rank_sources(path: Path) -> list[RankSource]:
    """Every rank source at ``path``: itself, or its direct sub-directories.

    Raises:
        PerfledgerError: a sub-directory laid out as Ascend output holds nothing readable.
    """
    found = rank_layout(path)
    for item in found:
        if isinstance(item, Path):
            raise PerfledgerError(_nothing_found(item))
    return [item for item in found if isinstance(item, RankSource)]


def rank_layout(path: Path) -> list[RankSource | Path]:
    """The rank sources at ``path`` (itself, or its direct sub-directories) in order, with the
    sub-directories laid out as a rank's Ascend output that hold nothing readable (their
    paths) in their places: ranks to report as skipped, not a reason to drop the others."""
    own = _source_of(path)
    if own is not None:
        return [own]
    if not path.is_dir() or _looks_like_output(path):
        return []
    found: list[RankSource | Path] = []
    for child in sorted(p for p in path.iterdir() if p.is_dir() and not is_own_output(p)):
        source = _source_of(child)
        if source is not None:
            found.append(source)
        elif _looks_like_output(child):
            found.append(child)
    return found


def find_runs(path: Path, depth: int = 3) -> list[Path]:
    """The Ascend profiling runs at or below ``path`` (``depth`` folders down at most): a rank
    source on its own, or a folder whose sub-folders are the ranks of one run.

    Folders beside the ranks of a run that hold runs of their own are runs too: a folder of
    several runs (three profiler levels, a text and a database export) is never one run.
    """
    try:
        if _source_of(path) is not None or _looks_like_output(path):
            return [path]
        if depth <= 0 or not path.is_dir():
            return []
        children = sorted(p for p in path.iterdir() if p.is_dir() and not is_own_output(p))
    except OSError:
        return []
    ranks = [c for c in children if _source_of(c) is not None or _looks_like_output(c)]
    # a lone rank beside other runs is named itself, not by the folder around it
    runs = ([path] if len(ranks) > 1 else ranks) if ranks else []
    for child in children:
        if child not in ranks:
            runs.extend(find_runs(child, depth - 1))
    return runs


def is_ascend(path: Path) -> bool:
    """Whether ``path`` is Ascend profiler output (see the module doc), readable or not.

    Output laid out as Ascend's but empty counts, so that :func:`load_ascend` can say what is
    wrong with it.
    """
    path = Path(path)
    try:
        if _source_of(path) is not None or _looks_like_output(path):
            return True
        if not path.is_dir():
            return False
        return any(
            _source_of(child) is not None or _looks_like_output(child)
            for child in path.iterdir()
            if child.is_dir() and not is_own_output(child)
        )
    except OSError:
        return False


# --- metadata ------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from exc


def _side_documents(source: RankSource, loss: list[str]) -> tuple[Any, Any]:
    """profiler_info and profiler_metadata decoded (None when absent); a damaged one is left
    out and said in ``loss``: the traces do not depend on them."""

    def read(path: Path | None) -> Any:
        try:
            return None if path is None else _read_json(path)
        except TraceFormatError as exc:
            loss.append(f"{exc}, left out")
            return None

    return read(source.info), read(source.metadata)


def _rank_from_info(source: RankSource, info: Any) -> int | None:
    if source.info is None:
        return None
    rank = info.get("rank_id") if isinstance(info, dict) else None
    if isinstance(rank, int) and _is_rank(rank):
        return rank
    match = _PROFILER_INFO.match(source.info.name)
    if match and match.group(2) is not None and _is_rank(int(match.group(2))):
        return int(match.group(2))
    return None


def _is_rank(value: Any) -> bool:
    """A rank as every table holds it (32 bits); anything else is damage, read as no rank."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def _default_device(source: RankSource) -> int:
    """The device index of a text export: memory tables name it (``NPU:3``)."""
    text = source.text
    for path in text.device_hints or (*text.kernels, *([text.memory] if text.memory else [])):
        try:
            with path.open("rb") as stream:
                head = stream.read(1 << 16)
        except OSError:
            continue
        match = _NPU_DEVICE.search(head)
        if match:
            return int(match.group(1))
    return 0


def _base_meta(info: Any, metadata: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"vendor": "ascend", "clock": "epoch_ns"}
    if isinstance(info, dict):
        config = info.get("config", {})
        meta["profiler_config"] = config
        experimental = config.get("experimental_config", {}) if isinstance(config, dict) else {}
        if isinstance(experimental, dict) and "_profiler_level" in experimental:
            meta["profiler_level"] = experimental["_profiler_level"]
        for key in ("start_info", "end_info", "torch_npu_version", "cann_version"):
            if key in info:
                meta[key] = info[key]
    if isinstance(metadata, dict):
        meta["profiler_metadata"] = metadata
        for key, value in metadata.items():
            lowered = key.lower()
            if "cann" in lowered or "driver" in lowered or "version" in lowered:
                meta.setdefault("versions", {})[key] = value
    return meta


# --- loading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Loaded:
    rank: int | None
    staged: build.Staged
    meta: dict[str, Any]
    files: tuple[Path, ...]
    loss: str | None
    matrix: list[dict[str, Any]] | None = None  # communication_matrix.json rows


def _load_source(source: RankSource) -> _Loaded:
    loss: list[str] = []
    info, metadata = _side_documents(source, loss)
    meta = _base_meta(info, metadata)
    meta["source_kind"] = source.kind
    rank = _rank_from_info(source, info)
    if source.db is not None:
        staged, facts = ascend_db.read_db(source.db)
        files: tuple[Path, ...] = (source.db,)
        if rank is None and _is_rank(facts.get("rank")):
            rank = int(facts["rank"])
        npu = facts.get("npu", {})
        if npu:
            meta["device_properties"] = {"name": sorted(set(npu.values()))[0], "npu": npu}
        for key in ("host", "db_meta", "session_ns", "step_time_ns", "hccl_ranks"):
            if key in facts:
                meta[key] = facts[key]
        if source.analysis_db is not None:
            try:
                meta["profiler_summaries"] = ascend_db.analysis_summaries(source.analysis_db)
                info = ascend_db.communication_info(source.analysis_db)
                staged = replace(
                    staged, comm=ascend_text.with_communication_info(staged.comm, info)
                )
                files += (source.analysis_db,)
            except PerfledgerError as exc:
                loss.append(str(exc))
    else:
        staged = ascend_text.read_text(source.text, _default_device(source))
        files = source.text.all_files
        try:
            meta["profiler_summaries"] = ascend_text.summaries(source.text)
        except PerfledgerError as exc:
            loss.append(str(exc))
    files += tuple(p for p in (source.info, source.metadata) if p is not None)
    matrix = None
    if source.text.matrix is not None:
        # an extra, as communication.json: a damaged one is reported, not fatal
        try:
            matrix = ascend_text.communication_matrix(source.text.matrix)
            files += (source.text.matrix,)
        except PerfledgerError as exc:
            loss.append(str(exc))
    loss = [*staged.losses, *loss]
    return _Loaded(rank, staged, meta, tuple(dict.fromkeys(files)), "; ".join(loss) or None, matrix)


def load_ascend(path: Path, *, progress: Callable[[int, int], None] | None = None) -> list[Trace]:
    """Read Ascend profiler output into one :class:`Trace` per rank, sorted by rank.

    Args:
        path: a directory or file in one of the layouts of the module doc.
        progress: called with (ranks done, ranks in all) after each rank.

    Raises:
        PerfledgerError: nothing readable at ``path`` (exit code 2), naming the file at fault.
    """
    path = Path(path)
    if not path.exists():
        raise PerfledgerError(f"{path}: no such file or directory")
    sources = rank_sources(path)
    if not sources:
        raise PerfledgerError(_nothing_found(path))
    loaded: list[_Loaded] = []
    for done, source in enumerate(sources, start=1):
        loaded.append(_load_source(source))
        if progress is not None:
            progress(done, len(sources))
    ranks = _assign_ranks(loaded)
    loaded = _flag_copies(sources, loaded, ranks)
    world = max(len(loaded), *(int(item.meta.get("hccl_ranks", 0)) for item in loaded))
    traces = []
    for rank, item in sorted(zip(ranks, loaded, strict=True), key=lambda pair: pair[0]):
        meta = dict(item.meta)
        meta["rank"] = rank
        meta["world_size"] = max(world, rank + 1)
        traces.append(
            Trace(
                events=build.build_events(item.staged, rank),
                counters=build.build_counters(item.staged, rank),
                meta=meta,
                source_kind=str(meta["source_kind"]),
                source_files=item.files,
                loss=item.loss,
                communication_matrix=_matrix_table(item.matrix, rank),
            )
        )
    return traces


def _matrix_table(rows: list[dict[str, Any]] | None, rank: int) -> pa.Table | None:
    """A rank's communication matrix rows as a table, None when its output has none."""
    if rows is None:
        return None
    return pa.Table.from_pylist(
        [{"rank": rank, **row} for row in rows], schema=schema.COMM_MATRIX_SCHEMA
    )


def main_file(source: RankSource) -> Path | None:
    if source.db is not None:
        return source.db
    files = source.text.timeline or source.text.kernels
    return files[0] if files else None


def fingerprint(path: Path) -> tuple[int, bytes]:
    """Size and a hash of the head and tail: enough to tell two ranks' outputs apart."""
    size = path.stat().st_size
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as stream:
        digest.update(stream.read(1 << 20))
        if size > 2 << 20:
            stream.seek(-(1 << 20), 2)
            digest.update(stream.read())
    return size, digest.digest()


def _flag_copies(
    sources: list[RankSource], loaded: list[_Loaded], ranks: list[int]
) -> list[_Loaded]:
    """Report ranks whose output is byte for byte another rank's (a copy gone wrong)."""
    seen: dict[tuple[int, bytes], tuple[int, Path]] = {}
    flagged: list[_Loaded] = []
    for source, item, rank in zip(sources, loaded, ranks, strict=True):
        path = main_file(source)
        if path is None or len(sources) == 1:
            flagged.append(item)
            continue
        key = fingerprint(path)
        if key in seen:
            other_rank, other = seen[key]
            note = (
                f"{path}: same content as rank {other_rank}'s {other}, "
                "one rank's output probably copied over another's"
            )
            item = replace(item, loss="; ".join(x for x in (item.loss, note) if x))
        else:
            seen[key] = (rank, path)
        flagged.append(item)
    return flagged


def _assign_ranks(loaded: list[_Loaded]) -> list[int]:
    """Ranks as recorded; by position when missing or repeated (several unnamed runs)."""
    recorded = [item.rank for item in loaded]
    known = [r for r in recorded if r is not None]
    if len(known) == len(recorded) and len(set(known)) == len(known):
        return [int(r) for r in known]
    if len(loaded) == 1:
        return [int(recorded[0]) if recorded[0] is not None else 0]
    return list(range(len(loaded)))


def _nothing_found(path: Path) -> str:
    """The one-line error for a path holding no readable Ascend output."""
    if path.is_dir():
        candidates = [path, *(p for p in path.iterdir() if p.is_dir())]
        for directory in candidates:
            for output in (directory, directory / _MSPROF_OUTPUT, directory / _PROFILER_OUTPUT):
                files = _files(output) if output.is_dir() else []
                if files and not any(_nonempty(p) for p in files):
                    return (
                        f"{output}: no profiler output (all {len(files)} files are empty; "
                        "the profiler was probably stopped before it wrote its results)"
                    )
        return (
            f"{path}: no Ascend profiler output found (expected *_ascend_pt/{_PROFILER_OUTPUT}, "
            f"PROF_*/{_MSPROF_OUTPUT}, msprof_*.db or ascend_pytorch_profiler_*.db)"
        )
    return f"{path}: not an Ascend profiler file"
