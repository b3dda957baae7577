"""Where the test data is: real traces and reference figures under tests/data (see its README)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
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


def bench_module(name: str) -> ModuleType:
    """A module of bench/ (the benchmarks import each other by bare name), imported with
    bench/ on the import path for the import only."""
    folder = str(PROJECT_ROOT / "bench")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)
