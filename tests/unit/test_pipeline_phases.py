"""The phases of ``analyze``: what the display is told, and the writer that runs beside the
advisor."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from perfledger.errors import PerfledgerError
from perfledger.profiledir import artefacts
from perfledger.run import tasks
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from perfledger.run.progress import (
    PHASE_ADVISOR,
    PHASE_ANALYSIS,
    PHASE_MERGE,
    PHASE_TABLES,
    Report,
)
from tests.paths import data_file

AFTER_THE_ADVISOR = [artefacts.PHASE_TIMELINES, PHASE_TABLES, artefacts.PHASE_REPORT]


class RecordingDisplay:
    """A display that keeps what it was told: import reports, phases, rank reports."""

    def __init__(self) -> None:
        self.imports: list[tuple[int, int]] = []
        self.phase_lines: list[list[str]] = []
        self.ranks_done: list[tuple[int, int]] = []

    @contextmanager
    def importing(self, label: str) -> Iterator[Report]:
        yield lambda done, total: self.imports.append((done, total))

    @contextmanager
    def phases(self) -> Iterator[Callable[[str], None]]:
        self.phase_lines.append([])
        yield self.phase_lines[-1].append

    @contextmanager
    def ranks(self, description: str, total: int) -> Iterator[Report]:
        yield lambda done, count: self.ranks_done.append((done, count))


def test_one_trace_shows_its_import_then_every_phase_in_order(tmp_path: Path) -> None:
    display = RecordingDisplay()
    build_profile(
        [data_file("kineto/v100_rank1_test.json.gz")],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        display=display,
    )
    assert display.imports, "the import reports its progress"
    done, total = display.imports[-1]
    assert 0 < done <= total
    # one status line: the rank's analysis and advisor, then the profile's writing
    assert display.phase_lines == [[PHASE_ANALYSIS, PHASE_ADVISOR, *AFTER_THE_ADVISOR]]
    assert display.ranks_done == []


def test_several_ranks_show_the_ranks_then_the_merge_and_the_same_phases(tmp_path: Path) -> None:
    display = RecordingDisplay()
    build_profile(
        [data_file("kineto/sampled_2ranks")],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        display=display,
        execution=Execution(workers=0),
    )
    assert display.ranks_done[-1] == (2, 2)
    assert display.phase_lines == [[PHASE_MERGE, PHASE_ADVISOR, *AFTER_THE_ADVISOR]]


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
    assert PHASE_ADVISOR not in piped.getvalue()


# a failure beside a writer thread: the rank's advisor (the events' Parquet is being written),
# the profile's timelines (the CSVs are being written; a full disk is the user's one line)
FAILURES = {
    "advisor": (tasks, "diagnose_rank", RuntimeError("a rule failed"), RuntimeError, "a rule"),
    "timelines": (
        artefacts,
        "write_timelines",
        OSError(28, "No space left on device"),
        PerfledgerError,
        "p: cannot write the profile: No space left",
    ),
}


@pytest.mark.parametrize("where", sorted(FAILURES))
def test_an_error_beside_a_writer_stops_it_and_leaves_nothing(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, name, error, raised, message = FAILURES[where]

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(module, name, failing)
    with pytest.raises(raised, match=message):
        build_profile(
            [data_file("kineto/v100_rank1_test.json.gz")],
            tmp_path / "p",
            console=Console(file=io.StringIO()),
        )
    # nothing is left behind: neither the profile nor its staging folder
    assert list(tmp_path.iterdir()) == []


def test_meta_json_times_every_phase_of_one_trace_within_the_whole(tmp_path: Path) -> None:
    began = time.perf_counter()
    build_profile(
        [data_file("kineto/v100_rank1_test.json.gz")],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        display=RecordingDisplay(),
    )
    wall = time.perf_counter() - began
    timings = json.loads((tmp_path / "p" / "meta.json").read_text())["timings"]
    # the phases that run one after the other in this process (the writer thread's
    # tables_s and csv_s run beside the advisor; tables_help_s is this thread's share of
    # them after the report, tables_wait_s what was left of them), the timelines beside the
    # report, the help and the wait
    one_after_another = ("import_s", "analysis_s", "replay_s", "advisor_s", "merge_s")
    beside_timelines = ("tables_help_s", "tables_wait_s", "report_s")
    assert all(timings[p] >= 0 for p in (*one_after_another, *beside_timelines)), timings
    assert timings["replay_s"] > 0 and timings["timeline_s"] > 0
    last = max(timings["timeline_s"], sum(timings[p] for p in beside_timelines))
    # rounded to the ms: a few ms of slack for the rounding of each phase
    assert sum(timings[p] for p in one_after_another) + last <= timings["total_s"] + 0.01
    assert timings["total_s"] <= wall
