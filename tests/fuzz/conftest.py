"""The fuzz budget: quick in the default run, long (1,000+ cases per family) with ``-m fuzz``."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.fuzz import harness
from tests.fuzz.seeds import FAMILIES, Seed


def long_run(markexpr: str) -> bool:
    """Whether the mark expression selects the fuzz tests by name (``fuzz``, ``fuzz and
    not slow``), as opposed to leaving them out (``not fuzz``) or not naming them."""
    words = re.findall(r"[\w-]+", markexpr)
    return any(w == "fuzz" and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))


def pytest_configure(config: pytest.Config) -> None:
    harness.LONG = long_run(config.getoption("markexpr") or "")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = harness.summary_lines()
    if lines:
        mode = "long" if harness.LONG else "quick"
        terminalreporter.section(f"fuzz outcomes ({mode} run)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Seed]]:
    """The seeds of a family, built once per session."""
    built: dict[str, list[Seed]] = {}

    def of(family: str) -> list[Seed]:
        if family not in built:
            built[family] = FAMILIES[family](tmp_path_factory.mktemp(f"seeds-{family}"))
        return built[family]

    return of
