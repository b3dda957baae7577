"""Writing a profile directory: created whole or not at all, never overwritten without ``--force``.

Everything is written into a staging directory beside the target and renamed into place at the
end, so an interrupted run never leaves a directory that looks complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from perfledger.errors import PerfledgerError
from perfledger.files import replacing
from perfledger.profiledir.layout import TABLES_DIR


def check_target(path: Path, *, force: bool) -> None:
    """Refuse to replace an existing file or profile unless forced."""
    if path.exists() and not force:
        raise PerfledgerError(
            f"{path} already exists: choose another output with -o, or pass --force to replace it"
        )
    if path.exists() and not path.is_dir():
        raise PerfledgerError(f"{path} exists and is not a directory: refusing to replace it")


@contextlib.contextmanager
def staged_directory(target: Path, *, force: bool) -> Iterator[Path]:
    """A fresh staging directory that replaces ``target`` when the block ends without error.

    On error the staging directory is removed and ``target`` is left as it was.
    """
    check_target(target, force=force)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.partial-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _readable_by_all(staging)
    if target.exists():
        retired = target.with_name(f".{target.name}.old-{os.getpid()}")
        target.rename(retired)
        staging.rename(target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(target)


def _readable_by_all(directory: Path) -> None:
    """Give files written through private temporary names the usual permissions."""
    umask = os.umask(0)
    os.umask(umask)
    for path in directory.rglob("*"):
        if path.is_file() and not path.stat().st_mode & 0o044:
            path.chmod(0o666 & ~umask)


def copy_source(source: Path, destination: Path) -> None:
    """Place an unchanged copy of a source file or folder under ``raw/``.

    Always a real copy, never a hard link: a link would let a later write to the profile
    reach the user's original. The destination must not exist yet.
    """
    if destination.exists():
        raise FileExistsError(f"{destination} exists: refusing to write over it")
    # the folder it goes in is made when missing, but never the profile's own folder: a writer
    # that outlives an interrupted run must not bring a removed staging folder back
    destination.parent.mkdir(exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, destination)
    else:
        shutil.copyfile(source, destination)


def write_table(directory: Path, name: str, table: pa.Table) -> Path:
    """Store a canonical table as ``tables/<name>.parquet``."""
    path = directory / TABLES_DIR / f"{name}.parquet"
    path.parent.mkdir(exist_ok=True)  # ``directory`` itself must exist (see copy_source)
    with replacing(path) as temporary:
        pq.write_table(table, temporary, compression="zstd")
    return path
