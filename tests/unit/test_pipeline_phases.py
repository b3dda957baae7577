"""The phases of ``analyze`` after the import: the status line naming them, and the writer
that runs beside the advisor."""

from __future__ import annotations

import io
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from perfledger.analysis.profile import analyze_traces
from perfledger.profiledir import artefacts
from perfledger.run import pipeline
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from perfledger.sources import load_traces
from tests.paths import data_file

AFTER_THE_ADVISOR = [
    pipeline.PHASE_ADVISOR,  # the raw copies, tables and CSVs are written meanwhile
    pipeline.PHASE_TABLES,  # what is left of them, if anything
    artefacts.PHASE_TIMELINES,
    artefacts.PHASE_REPORT,
]


@pytest.fixture
def phases(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The phases each status line named, in order (one list per status line)."""
    lines: list[list[str]] = []

    @contextmanager
    def recorder(console: Console) -> Iterator[Callable[[str], None]]:
        lines.append([])
        yield lines[-1].append

    monkeypatch.setattr(pipeline, "_phase_status", recorder)
    return lines


def test_one_trace_names_every_phase_in_order(tmp_path: Path, phases: list[list[str]]) -> None:
    build_profile(
        [data_file("kineto/v100_rank1_test.json.gz")],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
    )
    assert phases == [[pipeline.PHASE_ANALYSIS, *AFTER_THE_ADVISOR]]


def test_several_ranks_name_the_merge_then_the_same_phases(
    tmp_path: Path, phases: list[list[str]]
) -> None:
    build_profile(
        [data_file("kineto/sampled_2ranks")],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=0),
    )
    assert phases == [[pipeline.PHASE_MERGE, *AFTER_THE_ADVISOR]]


def test_a_terminal_sees_the_status_line_and_a_pipe_does_not(tmp_path: Path) -> None:
    source = data_file("kineto/v100_rank1_test.json.gz")
    terminal = io.StringIO()
    build_profile(
        [source], tmp_path / "t", console=Console(file=terminal, force_terminal=True, width=120)
    )
    # the line is drawn once more as it closes: the last phase at least shows
    assert artefacts.PHASE_REPORT in terminal.getvalue()
    piped = io.StringIO()
    build_profile([source], tmp_path / "p", console=Console(file=piped))
    assert "writing:" not in piped.getvalue()
    assert pipeline.PHASE_ADVISOR not in piped.getvalue()


def test_an_advisor_error_stops_the_writer_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    real_write = pipeline.write_table

    def slow_write(directory: Path, name: str, table: Any) -> Path:
        time.sleep(1.0 if name == "events" else 0.0)
        written.append(name)
        return real_write(directory, name, table)

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a rule failed")

    monkeypatch.setattr(pipeline, "write_table", slow_write)
    monkeypatch.setattr(pipeline, "diagnose", failing)
    out = tmp_path / "p"
    with pytest.raises(RuntimeError, match="a rule failed"):
        build_profile(
            [data_file("kineto/v100_rank1_test.json.gz")],
            out,
            console=Console(file=io.StringIO()),
        )
    # the writer ended with the file it was writing when the advisor failed
    assert written == ["events"]
    assert list(tmp_path.iterdir()) == []


def test_a_writer_outliving_its_removed_staging_folder_does_not_bring_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C can interrupt the wait for the writer: the staging folder is removed
    while the writer still runs. What it writes next must fail, not recreate the folder."""
    staging = tmp_path / ".p.partial-1"
    staging.mkdir()
    source = data_file("kineto/v100_rank1_test.json.gz")
    analysis = analyze_traces(load_traces([source]))
    real_write = pipeline.write_table

    def removed_meanwhile(directory: Path, name: str, table: Any) -> Path:
        if name == "counters":  # after the events and the raw copies
            shutil.rmtree(staging)
        return real_write(directory, name, table)

    monkeypatch.setattr(pipeline, "write_table", removed_meanwhile)
    with pytest.raises(FileNotFoundError):
        pipeline._write_independent(
            staging, analysis, [source], None, None, True, threading.Event()
        )
    assert not staging.exists()
