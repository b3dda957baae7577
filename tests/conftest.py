"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

_SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ../shared folder beside the checkout (real traces and references); fails if absent."""
    if not (_SHARED / "traces").is_dir():
        pytest.fail(
            f"{_SHARED / 'traces'} is missing: the tests need ../shared/traces beside the checkout"
        )
    return _SHARED


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files of exported formats from the current output",
    )
