"""Shared fixtures."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files of exported formats from the current output",
    )


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt in the test, as in a terminal, whatever the
    runner's own disposition (a shell's background job ignores it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
