"""Where the test data is: real traces and reference figures under tests/data (see its README)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

PROJECT_ROOT: Final = Path(__file__).resolve().parents[1]
DATA: Final = PROJECT_ROOT / "tests" / "data"
ASCEND: Final = DATA / "ascend"


def data_file(relative: str) -> Path:
    """A file or folder under tests/data; the test fails (never skips) when it is absent."""
    path = DATA / relative
    if not path.exists():
        pytest.fail(f"test data {path} is missing: the checkout is incomplete")
    return path
