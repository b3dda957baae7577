"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.browser import chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One chromium per test module."""
    with chromium() as running:
        yield running
