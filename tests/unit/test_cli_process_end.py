"""``perfledger analyze`` as the process's command line keeps the memory it freed to the end
(the system takes it all back at the exit); called by a program with its arguments, it hands
the memory back when the analysis ends, as before."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfledger.__main__ import main
from perfledger.cli import analyze
from tests.paths import data_file


def _releases(monkeypatch: pytest.MonkeyPatch, out: Path, argv: list[str] | None) -> list[bool]:
    seen: list[bool] = []
    held = analyze.holding_freed_memory

    @contextlib.contextmanager
    def noted(*, release: bool = True) -> Iterator[None]:
        seen.append(release)
        with held(release=release):
            yield

    monkeypatch.setattr(analyze, "holding_freed_memory", noted)
    line = ["analyze", str(data_file("kineto/a100_alexnet.json.gz")), "-o", str(out)]
    monkeypatch.setattr(sys, "argv", ["perfledger", *line, "--no-ledger"])
    assert main(None if argv is None else [*line, "--no-ledger"]) == 0
    assert (out / "summary.json").is_file()
    return seen


def test_the_command_line_of_the_process_keeps_its_freed_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _releases(monkeypatch, tmp_path / "p", None) == [False]


def test_main_called_with_arguments_hands_the_memory_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _releases(monkeypatch, tmp_path / "p", []) == [True]
