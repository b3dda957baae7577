"""The status line of ``analyze`` after the import: which phase runs now."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from perfledger import artefacts, pipeline
from perfledger.cluster.execution import Execution
from perfledger.pipeline import build_profile
from tests.paths import shared_trace

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
        [shared_trace("kineto/v100_rank1_test.json.gz")],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
    )
    assert phases == [[pipeline.PHASE_ANALYSIS, *AFTER_THE_ADVISOR]]


def test_several_ranks_name_the_merge_then_the_same_phases(
    tmp_path: Path, phases: list[list[str]]
) -> None:
    build_profile(
        [shared_trace("kineto/sampled_2ranks")],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=0),
    )
    assert phases == [[pipeline.PHASE_MERGE, *AFTER_THE_ADVISOR]]


def test_a_terminal_sees_the_status_line_and_a_pipe_does_not(tmp_path: Path) -> None:
    source = shared_trace("kineto/v100_rank1_test.json.gz")
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
