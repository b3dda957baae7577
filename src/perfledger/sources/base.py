"""What every importer returns."""

from __future__ import annotations

import os
from pathlib import Path

from perfledger.files import open_regular
from perfledger.import_pool import GZIP_RATIO
from perfledger.sources.gunzip import GZIP_MAGIC


def decoded_bytes(path: Path) -> int:
    """About how many bytes of data the file ``path`` holds once read: a gzip file at ten
    times its size (0 when it cannot be read: its reader reports why)."""
    try:
        with open_regular(path) as raw:
            size = os.fstat(raw.fileno()).st_size
            return size * GZIP_RATIO if raw.read(2) == GZIP_MAGIC else size
    except OSError:
        return 0
