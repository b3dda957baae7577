"""Writing a profile directory: created whole or not at all, never overwritten without ``--force``.

Everything is written into a staging directory beside the target and renamed into place at the
end, so an interrupted run never leaves a directory that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from perfledger.direct_files import write_parquet
from perfledger.errors import PerfledgerError
from perfledger.files import (
    is_profile_dir,
    mark_staging,
    remove_stale_staging,
    replacing,
    unmark_staging,
    write_json,
)
from perfledger.interrupts import interrupts_held
from perfledger.profiledir.layout import PROFILE_ENTRIES, TABLES_DIR, TIMELINE_DIR

# Errors that only writing the output can raise: no space, a read-only file system.
_OUTPUT_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
# The same, as libraries that drop the errno (Arrow's writers) word them.
_OUTPUT_MESSAGES: Final = (
    "No space left on device",
    "Read-only file system",
    "Disk quota exceeded",
)
# Errors that writing the output may raise, when they name a path of the output.
_WRITE_ERRNOS: Final = frozenset(
    {errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.ENOENT}
)


def check_target(path: Path, *, force: bool) -> None:
    """Refuse an output that cannot be written, or an existing one not ours to replace.

    ``--force`` replaces only an empty folder or a perfledger profile (its meta.json says so)
    holding nothing but what analyze writes; never a file, a link, a mount point, a folder of
    the user's (or a profile the user put files in), the current folder or one above it.
    """
    _check_output_name(path)
    if path.is_symlink():
        raise PerfledgerError(
            f"{path} is a symbolic link: refusing to write through it; name a real folder with -o"
        )
    if not path.exists():
        _check_parent(path)
        return
    if not force:
        raise PerfledgerError(
            f"{path} already exists: choose another output with -o, or pass --force to replace it"
        )
    if not path.is_dir():
        raise PerfledgerError(f"{path} exists and is not a directory: refusing to replace it")
    if os.path.ismount(path):
        raise PerfledgerError(
            f"{path} is a mount point: a profile cannot take its place; name a folder inside it "
            "with -o"
        )
    if _is_empty(path):
        return
    if not is_profile_dir(path):
        raise PerfledgerError(
            f"{path} is not a perfledger profile (no meta.json of ours) and not empty: --force "
            "replaces only those; choose another output with -o"
        )
    foreign = foreign_entries(path)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        shown = ", ".join(foreign[:3]) + more
        raise PerfledgerError(
            f"{path} holds files analyze did not write ({shown}): --force replaces only a "
            "profile as analyze wrote it; move them out or choose another output with -o"
        )


def foreign_entries(profile: Path) -> list[str]:
    """What a profile folder holds that analyze does not write (the user's files put there
    since), as paths below it; unreadable folders count as foreign."""
    foreign: list[str] = []
    try:
        for entry in sorted(profile.iterdir()):
            if entry.name not in PROFILE_ENTRIES:
                foreign.append(entry.name)
            elif entry.name in (TABLES_DIR, TIMELINE_DIR) and entry.is_dir():
                foreign += [f"{entry.name}/{name}" for name in _foreign_below(entry)]
    except OSError:
        return [profile.name]
    return foreign


def _foreign_below(folder: Path) -> list[str]:
    """Below tables/ and timeline/: Parquet files (tables/events/ of them) and gzip
    timelines; anything else is named."""
    foreign: list[str] = []
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink():
            foreign.append(entry.name)
        elif entry.is_dir():
            foreign += [f"{entry.name}/{name}" for name in _foreign_below(entry)]
        elif not entry.name.endswith((".parquet", ".json.gz")):
            foreign.append(entry.name)
    return foreign


def _check_output_name(path: Path) -> None:
    """The output must name a folder of its own: not ``.``, ``..``, ``/`` or an ancestor of
    the current folder (replacing it would pull the ground from under the user)."""
    if path.name in ("", ".", "..") or path.parts[-1:] == ("..",):
        raise PerfledgerError(
            f"-o {path}: name a new folder for the profile, not the current folder or one above it"
        )
    try:
        resolved = path.resolve()
        here = Path.cwd().resolve()
    except (OSError, RuntimeError) as error:
        raise PerfledgerError(f"-o {path}: cannot resolve the path ({error})") from error
    if resolved == here or resolved in here.parents:
        raise PerfledgerError(
            f"-o {path}: that is the current folder or one above it; name a new folder"
        )


def _check_parent(path: Path) -> None:
    """The folders above a new output: each one that exists must be a folder."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise PerfledgerError(
                    f"-o {path}: {parent} is a file, not a folder: cannot write the profile there"
                )
            return


def _is_empty(path: Path) -> bool:
    try:
        return next(path.iterdir(), None) is None
    except OSError:
        return False


def output_error(target: Path, error: OSError) -> PerfledgerError:
    """The one-line error for an output that cannot be written (read-only, full, no rights)."""
    text = str(error).strip()
    # Arrow says "Error writing bytes to file. Detail: [errno 28] ...": the system's words
    coded = re.search(r"\[errno (\d+)\]", text)
    reason = error.strerror or (
        os.strerror(int(coded.group(1)))
        if coded
        else text.splitlines()[0]
        if text
        else type(error).__name__
    )
    # a copy names its source first and the file it writes second: the written one matters;
    # one in the staging folder (removed by now) says nothing the target does not
    written = error.filename2 or error.filename
    staged = written is not None and Path(os.fsdecode(written)).absolute().is_relative_to(
        _staging_of(target).absolute()
    )
    where = f" ({os.fsdecode(written)})" if written is not None and not staged else ""
    return PerfledgerError(f"{target}: cannot write the profile: {reason}{where}")


def _staging_of(target: Path) -> Path:
    """The folder a profile is written into before it replaces ``target``."""
    return target.with_name(f".{target.name}.partial-{os.getpid()}")


@contextlib.contextmanager
def staged_directory(
    target: Path, *, force: bool, removals: list[threading.Thread] | None = None
) -> Iterator[Path]:
    """A fresh staging directory that replaces ``target`` when the block ends without error.

    On error the staging directory is removed and ``target`` is left as it was. Staging
    folders of earlier runs into the same parent whose process died are removed first. An
    output that cannot be written (read-only, disk full, no rights) is a one-line error.
    ``removals``: the profile replaced (``force``) is removed on a thread appended there, for
    the caller to join (else before the block ends); it is renamed aside and marked as a
    leftover first, so a run that dies meanwhile leaves nothing a later run keeps.
    """
    check_target(target, force=force)
    staging = _staging_of(target)
    made = _missing_folders(target.parent)
    try:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_staging(target.parent)
        except OSError as error:
            raise output_error(target, error) from error
        # from here on the staging folder (of this process's name) goes on any way out: an
        # interrupt (Ctrl-C, SIGTERM) may land between its making and its mark
        try:
            try:
                if staging.exists():
                    shutil.rmtree(staging)
                staging.mkdir()
                mark_staging(staging)
            except OSError as error:
                raise output_error(target, error) from error
            yield staging
            _readable_by_all(staging)
            # the renames done whole: never the old profile aside and the new one not in place
            with interrupts_held():
                _replace(target, staging, force=force, removals=removals)
        except BaseException as error:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(error, OSError) and _is_output_error(error, target, staging):
                raise output_error(target, error) from error
            raise
    except BaseException:
        # the folders made for the output, innermost first, as long as they are empty
        with contextlib.suppress(OSError):
            for folder in made:
                folder.rmdir()
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those above it that do not exist yet, innermost first."""
    missing: list[Path] = []
    for place in (folder, *folder.absolute().parents):
        if os.path.lexists(place):
            break
        missing.append(place)
    return missing


def _replace(
    target: Path, staging: Path, *, force: bool, removals: list[threading.Thread] | None = None
) -> None:
    """Rename ``staging`` to ``target``. What holds the target's name now is checked again as
    at the start: a folder the user made there during the run (or another run's profile,
    without ``--force``) is never replaced."""
    unmark_staging(staging)
    # nothing there, or an empty folder made meanwhile (nothing to lose): taken at once
    vacant = not os.path.lexists(target) or (
        not target.is_symlink() and not os.path.ismount(target) and _is_empty(target)
    )
    if vacant:
        try:
            staging.rename(target)
            return
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
    try:
        check_target(target, force=force)
    except PerfledgerError as error:
        raise PerfledgerError(f"{error} (found at the run's end: no profile written)") from None
    retired = target.with_name(f".{target.name}.old-{os.getpid()}")
    target.rename(retired)
    if not (_is_empty(retired) or (is_profile_dir(retired) and not foreign_entries(retired))):
        retired.rename(target)  # changed between the check and the rename: left as it is
        raise PerfledgerError(f"{target} changed while it was being replaced: no profile written")
    mark_staging(retired)  # a leftover of this run if it dies before the removal below
    try:
        staging.rename(target)
    except OSError:
        unmark_staging(retired)
        retired.rename(target)  # the old profile back in its place
        raise
    if removals is None:
        shutil.rmtree(retired, ignore_errors=True)
        return
    removal = threading.Thread(
        target=shutil.rmtree, args=(retired,), kwargs={"ignore_errors": True}, name="retired"
    )
    removal.start()
    removals.append(removal)


def _is_output_error(error: OSError, target: Path, staging: Path) -> bool:
    """Whether an error came from writing the output rather than from reading an input."""
    if error.errno in _OUTPUT_ERRNOS or any(m in str(error) for m in _OUTPUT_MESSAGES):
        return True
    filename = error.filename
    if filename is None:
        return False
    written = Path(str(filename)).absolute()
    return (
        any(
            written == place or place in written.parents
            for place in (staging.absolute(), target.absolute(), target.parent.absolute())
        )
        and error.errno in _WRITE_ERRNOS
    )


def _readable_by_all(directory: Path) -> None:
    """Give files written through private temporary names the usual permissions."""
    umask = os.umask(0)
    os.umask(umask)
    for path in directory.rglob("*"):
        if not path.is_file():
            continue
        status = path.stat()
        # a hard-linked source (raw/) is the user's file too: its mode is not ours to change
        if not status.st_mode & 0o044 and status.st_nlink == 1:
            path.chmod(0o666 & ~umask)


# Sources up to this size are copied into raw/; larger ones are hard-linked where the file
# system allows, else recorded (path, size, checksum): a gigabyte trace is not duplicated.
RAW_COPY_MAX_BYTES: Final = 256 * 1024 * 1024
# The record that stands in raw/ for a large source that could not be linked.
SOURCE_RECORD_SUFFIX: Final = ".source.json"
_HASH_BLOCK: Final = 8 * 1024 * 1024


def copy_source(source: Path, destination: Path) -> Path:
    """Keep a source file or folder under ``raw/``, unchanged; the path written.

    A file up to :data:`RAW_COPY_MAX_BYTES` is copied. A larger one is hard-linked (the
    profile then keeps the data even if the original is deleted, without a second copy on
    disk; the link shares the original's bytes, so raw/ files must not be edited in place)
    and, where the file system refuses links (another device, no link support), recorded in
    ``<name>.source.json``: its absolute path, size and SHA-256. A folder's files each follow
    the same rule. The destination must not exist yet.
    """
    if destination.exists():
        raise FileExistsError(f"{destination} exists: refusing to write over it")
    # the folder it goes in is made when missing, but never the profile's own folder: a writer
    # that outlives an interrupted run must not bring a removed staging folder back
    destination.parent.mkdir(exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, destination, copy_function=_keep_file)
        return destination
    return _keep_file(source, destination)


def _keep_file(source: str | Path, destination: str | Path) -> Path:
    """One file of :func:`copy_source`: a copy, a hard link or a record."""
    source, destination = Path(source), Path(destination)
    size = source.stat().st_size
    if size <= RAW_COPY_MAX_BYTES:
        shutil.copyfile(source, destination)
        return destination
    try:
        os.link(source, destination)
        return destination
    except OSError:
        pass  # not on this file system: recorded instead
    record = destination.with_name(destination.name + SOURCE_RECORD_SUFFIX)
    write_json(
        record,
        {
            "path": str(source.resolve()),
            "size_bytes": size,
            "sha256": _sha256(source),
            "kept": f"recorded, not copied: larger than {RAW_COPY_MAX_BYTES:,} bytes and the "
            "file system refused a hard link",
        },
    )
    return record


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_table(directory: Path, name: str, table: pa.Table) -> Path:
    """Store a canonical table as ``tables/<name>.parquet``.

    Only the text columns are stored with a Parquet dictionary (tracks, names, causes: few
    distinct values). On the number columns (times, values, ids) the writer would build a
    dictionary for every column chunk and give up on it: half the CPU of writing the counters
    of a large trace, for a larger file; the table read back is the same either way."""
    path = directory / TABLES_DIR / f"{name}.parquet"
    path.parent.mkdir(exist_ok=True)  # ``directory`` itself must exist (see copy_source)
    coded = [field.name for field in table.schema if _text_type(field.type)]
    with replacing(path) as temporary:
        write_parquet(table, temporary, compression="zstd", use_dictionary=coded)
    return path


def _text_type(kind: pa.DataType) -> bool:
    """Whether a column of this type holds text (plain or dictionary-encoded)."""
    if pa.types.is_dictionary(kind):
        return True
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


# The events' columns stored with a Parquet dictionary: those of few distinct values. On the
# others (times, ids, sizes, args) the writer would build a dictionary, holding every page of
# the column chunk until it gives up on it (tens of MB on a large trace, a fifth of the
# write's CPU) for a larger file; the table read back is the same either way.
EVENTS_PARQUET_DICTIONARY: Final = frozenset(
    {"rank", "kind", "name", "device", "stream", "pid", "step", "shapes", "dtypes"}
)
# The starts (ascending) stored as their differences, Parquet's delta encoding, which every
# reader has: on the 1.5 GB trace's 4.2 M events the column 9.1 -> 5.7 MB, its writing 0.18 ->
# 0.08 s of CPU (bench/README.md, "Growth"), read back faster too.
EVENTS_PARQUET_ENCODINGS: Final = {"start_ns": "DELTA_BINARY_PACKED"}


def write_events_parquet(events: pa.Table, path: Path) -> None:
    """A rank's events table as the Parquet file at ``path`` (``tables/events.parquet``)."""
    write_parquet(events, path, compression="zstd", **events_parquet_options(events))


def events_parquet_options(events: pa.Table) -> dict[str, Any]:
    """How the events' columns are stored (``pyarrow.parquet.write_table``'s options but the
    codec): the dictionary columns, the encodings and the columns with their ranges (the
    numbers, by whose ranges a reader's filter skips row groups: times, steps, ranks; a text
    column's range skips nothing, since every row group holds texts from all over the
    alphabet, and it costs a tenth of the file's CPU)."""
    names = events.column_names
    return {
        "use_dictionary": [name for name in names if name in EVENTS_PARQUET_DICTIONARY],
        "write_statistics": [f.name for f in events.schema if not _text_type(f.type)],
        "column_encoding": {c: e for c, e in EVENTS_PARQUET_ENCODINGS.items() if c in names},
    }
