"""Where the real traces are: ../shared/traces beside the project checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TRACES = PROJECT_ROOT.parent / "shared" / "traces"


def shared_trace(relative: str) -> Path:
    """A file or folder under ../shared/traces; the test fails (never skips) when it is absent."""
    path = TRACES / relative
    if not path.exists():
        pytest.fail(
            f"real trace {path} is missing: tests need ../shared/traces beside the checkout"
        )
    return path
