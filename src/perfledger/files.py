"""Files written whole or not at all: a temporary name beside the target, renamed at the end.

Every file perfledger writes goes through :func:`replacing` (or the helpers on top of it), so
an interrupted run never leaves a half-written file under its final name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def temporary_name(path: Path) -> Path:
    """The hidden name a file is written under before it is renamed to ``path``."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path to write; renamed onto ``path`` when the block ends, removed on error.

    The file gets the usual permissions (0666 less the umask), whatever wrote it.
    """
    temporary = temporary_name(path)
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name."""
    with replacing(path) as temporary:
        temporary.write_bytes(data)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary name."""
    write_bytes(path, text.encode("utf-8"))


def json_text(document: Any) -> str:
    """Deterministic JSON: key order as given, 2-space indent, no NaN, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, document: Any) -> None:
    """Write ``document`` as :func:`json_text` through a temporary name."""
    write_text(path, json_text(document))
