"""Reading a profile directory: the one reader every command uses (diff, query, timeline, the
ledger and later commands).

:func:`load_profile` checks what the folder is before anything reads it: a perfledger profile
(its meta.json and summary.json), of a ``format_version`` this version reads. A newer version
is a one-line error; an older one is migrated in memory (:data:`MIGRATIONS`). Figures the
profile holds (step time, step count, findings) are read from it, never derived again.
Tables are read in either layout: ``tables/<name>.parquet``, or a folder of per-rank parts
``tables/<name>/rank=<N>.parquet`` (profiles analysed rank by rank), in rank order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from perfledger.errors import PerfledgerError
from perfledger.model.schema import FORMAT_VERSION
from perfledger.profiledir.layout import (
    CLUSTER_SUMMARY_JSON,
    META_JSON,
    RANK_PART_PREFIX,
    SUMMARY_JSON,
    TABLES_DIR,
)

Document = dict[str, Any]


def _from_version_1(meta: Document, summary: Document) -> tuple[Document, Document]:
    """Format 2 names what could not be read ``unread_input`` (format 1: ``loss``) and adds
    the profiler overhead's noise and the unprofiled step time (unknown in format 1)."""
    summary = dict(summary)
    summary.setdefault("unread_input", summary.get("loss"))
    summary.setdefault("profiler_overhead_noise_pct", None)
    summary.setdefault("unprofiled_step_ms", None)
    return meta, summary


# format_version N -> the function that turns a version-N (meta, summary) into version N + 1.
MIGRATIONS: Final[Mapping[int, Callable[[Document, Document], tuple[Document, Document]]]] = {
    1: _from_version_1,
}
_RANK_PART: Final = re.compile(rf"{re.escape(RANK_PART_PREFIX)}(-?\d+)\.parquet$")


@dataclass(frozen=True)
class StoredProfile:
    """A profile directory as written, checked and migrated to the current format.

    Attributes:
        path: the profile directory.
        meta: meta.json (run metadata, timings).
        summary: summary.json (every headline figure and finding).
        format_version: the version the profile was written with (before migration).
        kernel_names: the distinct names of kernel_details.csv where the profile was just
            written (the ledger then need not read that CSV of millions of rows again);
            None: read from the file when asked.
        op_summary_head: the first rows of op_summary (``perfledger.ledger.record``'s
            BATCH_READ_ROWS or more) where the profile was just written, for the ledger's
            batch size; None: read from op_summary.csv when asked.
    """

    path: Path
    meta: Document
    summary: Document
    format_version: int
    kernel_names: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    op_summary_head: pa.Table | None = field(default=None, compare=False, repr=False)

    # --- figures the profile holds ----------------------------------------------------------

    @property
    def label(self) -> str:
        """The profile's name: its folder's."""
        return self.path.resolve().name

    @property
    def step_count(self) -> int:
        value = self.summary.get("step_count")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def step_time_ms(self) -> float | None:
        """The profile's step time: summary.json's ``step_time_ms``."""
        value = self.summary.get("step_time_ms")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    @property
    def source_kind(self) -> str:
        source = self.summary.get("source")
        kind = source.get("kind") if isinstance(source, Mapping) else None
        if isinstance(kind, list):
            return "+".join(map(str, kind))
        return str(kind) if kind is not None else "unknown"

    @property
    def ranks(self) -> list[int]:
        ranks = self.summary.get("ranks")
        return [int(r) for r in ranks if isinstance(r, int)] if isinstance(ranks, list) else []

    @property
    def findings(self) -> list[Document]:
        """summary.json's findings, largest gain first (whatif_ms, else severity_ms)."""
        findings = self.summary.get("findings") or []
        if not isinstance(findings, list) or not all(isinstance(f, Mapping) for f in findings):
            raise PerfledgerError(f"{self.path / SUMMARY_JSON}: findings is not a list of objects")
        return [dict(f) for f in findings]

    @property
    def confidence(self) -> str | None:
        """The data quality of the profile (summary.json's quality.confidence); None when it
        predates the quality report."""
        quality = self.summary.get("quality")
        value = quality.get("confidence") if isinstance(quality, Mapping) else None
        return value if value in ("high", "medium", "low") else None

    @property
    def devices(self) -> list[Document]:
        """summary.json's per-device headlines (span rows of the device accounts)."""
        devices = self.summary.get("devices")
        if not isinstance(devices, list):
            return []
        return [dict(d) for d in devices if isinstance(d, Mapping)]

    def cluster_summary(self) -> Document | None:
        """cluster_summary.json (profiles of several ranks), else None."""
        path = self.path / CLUSTER_SUMMARY_JSON
        return _json_object(path) if path.is_file() else None

    # --- tables -----------------------------------------------------------------------------

    def table_names(self) -> list[str]:
        """The canonical tables the profile holds, in name order."""
        folder = self.path / TABLES_DIR
        names = {p.stem for p in folder.glob("*.parquet")}
        names |= {p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.parquet"))}
        return sorted(names)

    def table_files(self, name: str) -> list[Path]:
        """The Parquet file of a table, or its per-rank parts in rank order; [] when absent."""
        single = self.path / TABLES_DIR / f"{name}.parquet"
        if single.is_file():
            return [single]
        folder = self.path / TABLES_DIR / name
        if folder.is_dir():
            return sorted(folder.glob("*.parquet"), key=_part_order)
        return []

    def read_table(
        self,
        name: str,
        *,
        columns: Sequence[str] | None = None,
        filters: Any = None,
        required: bool = True,
    ) -> pa.Table | None:
        """A canonical table, all its rank parts together; None when absent and not required.

        Raises:
            PerfledgerError: a required table is missing, or a file cannot be read.
        """
        files = self.table_files(name)
        if not files:
            if required:
                missing = self.path / TABLES_DIR / f"{name}.parquet"
                raise PerfledgerError(
                    f"{self.path} is not a complete profile: {missing} is missing"
                )
            return None
        tables = [read_parquet(f, columns=columns, filters=filters) for f in files]
        if len(tables) == 1:
            return tables[0]
        return pa.concat_tables(tables, promote_options="permissive")

    def read_csv(
        self,
        name: str,
        schema: pa.Schema | None = None,
        include: Sequence[str] | None = None,
    ) -> pa.Table:
        """A CSV artefact; columns typed by ``schema`` when given, else inferred.

        Raises:
            PerfledgerError: the file is missing or cannot be read.
        """
        path = self.path / name
        if not path.is_file():
            raise PerfledgerError(f"{self.path} is not a complete profile: {name} is missing")
        types = {f.name: f.type for f in schema} if schema is not None else {}
        try:
            return pacsv.read_csv(
                path,
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(
                    column_types=types,
                    strings_can_be_null=True,
                    include_columns=list(include) if include else None,
                    include_missing_columns=include is not None,
                ),
            )
        except (OSError, pa.ArrowInvalid) as error:
            raise PerfledgerError(f"{path}: cannot read ({_first_line(error)})") from error

    def csv_header(self, name: str) -> list[str]:
        """The column names of a CSV artefact."""
        path = self.path / name
        if not path.is_file():
            raise PerfledgerError(f"{self.path} is not a complete profile: {name} is missing")
        with path.open("rb") as handle:
            return handle.readline().decode("utf-8", "replace").strip().split(",")


def is_profile(path: Path) -> bool:
    """Whether ``path`` looks like a perfledger profile directory (rather than a trace)."""
    return path.is_dir() and (path / META_JSON).is_file() and (path / SUMMARY_JSON).is_file()


def load_profile(path: Path) -> StoredProfile:
    """Open a profile directory: its documents read, its format checked and migrated.

    Raises:
        PerfledgerError: not a profile, a damaged one, or one written by a newer perfledger.
    """
    if not path.exists():
        raise PerfledgerError(f"{path}: no such profile directory")
    if not path.is_dir() or not (path / META_JSON).is_file():
        raise PerfledgerError(f"{path} is not a perfledger profile: {META_JSON} is missing")
    meta = _json_object(path / META_JSON)
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise PerfledgerError(
            f"{path / META_JSON}: no valid format_version: not a perfledger profile"
        )
    if version > FORMAT_VERSION:
        raise PerfledgerError(
            f"{path} was written by a newer perfledger (profile format {version}; this "
            f"version reads up to {FORMAT_VERSION}): upgrade perfledger to read it"
        )
    if not (path / SUMMARY_JSON).is_file():
        raise PerfledgerError(f"{path} is not a complete profile: {SUMMARY_JSON} is missing")
    summary = _json_object(path / SUMMARY_JSON)
    meta, summary = migrate(meta, summary, version)
    return StoredProfile(path=path, meta=meta, summary=summary, format_version=version)


def migrate(meta: Document, summary: Document, version: int) -> tuple[Document, Document]:
    """The documents of a version-``version`` profile as the current version writes them."""
    while version < FORMAT_VERSION:
        step = MIGRATIONS.get(version)
        if step is not None:
            meta, summary = step(meta, summary)
        version += 1
    return meta, summary


def read_parquet(path: Path, **options: Any) -> pa.Table:
    """One Parquet file, memory-mapped; a damaged file is a one-line error naming it."""
    try:
        return pq.read_table(path, memory_map=True, **options)
    except (OSError, pa.ArrowInvalid) as error:
        raise PerfledgerError(f"{path}: cannot read the table ({_first_line(error)})") from error


def read_parquet_schema(path: Path) -> pa.Schema:
    """The schema of one Parquet file; a damaged file is a one-line error naming it."""
    try:
        return pq.read_schema(path)
    except (OSError, pa.ArrowInvalid) as error:
        raise PerfledgerError(f"{path}: cannot read the table ({_first_line(error)})") from error


def part_rank(path: Path) -> int | None:
    """The rank of a per-rank table file (``rank=<N>.parquet``), None for another name."""
    match = _RANK_PART.search(path.name)
    return int(match.group(1)) if match else None


def _part_order(path: Path) -> tuple[int, str]:
    """rank=10 after rank=9: the rank of a part file, then its name."""
    rank = part_rank(path)
    return (rank if rank is not None else -1, path.name)


def _json_object(path: Path) -> Document:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PerfledgerError(f"{path}: cannot read ({_first_line(error)})") from error
    if not isinstance(document, dict):
        raise PerfledgerError(f"{path}: not a JSON object")
    return document


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
