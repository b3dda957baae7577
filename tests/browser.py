"""A headless chromium driven by playwright, for the tests that open pages in a browser.

The browser is the system's chromium (Debian: ``apt-get install chromium``), or the one
``PERFLEDGER_CHROMIUM`` names, or playwright's own download. Where none can be had, the browser
tests are skipped with the reason, except in CI (``CI`` set), where they fail: CI installs one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

# headless, and nothing of its own on the network: the tests count the page's requests
CHROMIUM_ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SYSTEM_CHROMIUMS: Final = ("chromium", "chromium-browser", "google-chrome")


def system_chromium() -> Path | None:
    """The chromium to drive: ``PERFLEDGER_CHROMIUM`` or the first one on PATH."""
    named = os.environ.get("PERFLEDGER_CHROMIUM")
    if named:
        return Path(named)
    for name in SYSTEM_CHROMIUMS:
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def _unavailable(reason: str) -> None:
    """Skip the test, or fail it in CI, where a browser is always installed."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs chromium: see .ci/run)")
    pytest.skip(f"{reason}: apt-get install chromium (or set PERFLEDGER_CHROMIUM)")


@contextmanager
def chromium() -> Iterator[Browser]:
    """A running headless chromium."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    executable = system_chromium()
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(
                executable_path=str(executable) if executable else None, args=CHROMIUM_ARGS
            )
        except Error as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else "no browser"
            _unavailable(f"no chromium could be started ({first})")
        try:
            yield browser
        finally:
            browser.close()
