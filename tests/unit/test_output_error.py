"""The one-line message of an output that cannot be written: the system's reason, and the file
written when it tells the user something."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from perfledger.profiledir.writer import output_error


def test_a_copy_that_fills_the_disk_does_not_name_its_source(tmp_path: Path) -> None:
    target = tmp_path / "prof"
    staged = tmp_path / f".prof.partial-{os.getpid()}" / "raw" / "trace.json.gz"
    # shutil's copy names the source first and the file it writes second
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/trace.json.gz", None, staged)
    message = str(output_error(target, error))
    assert message == f"{target}: cannot write the profile: No space left on device"


def test_arrow_words_become_the_systems_reason(tmp_path: Path) -> None:
    error = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    message = str(output_error(tmp_path / "prof", error))
    assert message.endswith("cannot write the profile: No space left on device"), message


def test_a_file_outside_the_staging_folder_is_named(tmp_path: Path) -> None:
    elsewhere = tmp_path / "ledger" / "runs.parquet"
    error = OSError(errno.EACCES, os.strerror(errno.EACCES), str(elsewhere))
    message = str(output_error(tmp_path / "prof", error))
    assert message.endswith(f"cannot write the profile: Permission denied ({elsewhere})")
