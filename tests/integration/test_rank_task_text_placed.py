"""The import writes the events' text and number columns to their mapped files as soon as the
layout has made them (each beside the other's layout); the rank task then keeps them where
they lie, unless something replaced them since (args over the limit cut): then those are
written again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perfledger.memory import in_mapped_files
from perfledger.run import filled_columns, mapped_files
from perfledger.run.tasks import EVENTS, RankResult, RankTask, run_rank_task
from perfledger.sources.kineto import NUMBER_COLUMNS, TEXT_COLUMNS
from perfledger.sources.names import ARGS_LIMIT
from tests import kineto_gen as gen
from tests.synth import assert_same_events

TRACE = Path(__file__).resolve().parents[1] / "data" / "kineto" / "v100_rank1_ddp.json.gz"
TEXT_FILE = f"{EVENTS}-text.arrow"
NUMBERS_FILE = f"{EVENTS}-plain.arrow"

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps"
)


def _counted_writes(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The files written (a table at once, batch by batch, or filled in place), by name."""
    written: Counter[str] = Counter()
    for name in ("write_ipc", "mapped_batches"):
        monkeypatch.setattr(mapped_files, name, _counting(getattr(mapped_files, name), written))
    for name in ("filled_columns", "filled_text"):
        monkeypatch.setattr(mapped_files, name, _counting(getattr(mapped_files, name), written))
    return written


def _counting(write: Callable[..., Any], written: Counter[str]) -> Callable[..., Any]:
    def counting(*args: Any) -> Any:
        path = next(a for a in args if isinstance(a, Path))
        written[path.name] += 1
        return write(*args)

    return counting


def test_the_files_are_written_once_and_the_events_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = _counted_writes(monkeypatch)
    result = run_rank_task(RankTask(0, "kineto", TRACE, tmp_path / "task", spill=False))
    assert isinstance(result, RankResult)
    assert written[TEXT_FILE] == written[NUMBERS_FILE] == 1
    events = result.tables["events"]
    assert in_mapped_files(events.select(list(TEXT_COLUMNS)))
    assert in_mapped_files(events.select(["start_ns", "dur_ns", "correlation"]))
    # the same columns as a task whose files cannot be written (a full disk) keeps in the heap
    monkeypatch.setattr(mapped_files, "_sink", _refused)
    monkeypatch.setattr(filled_columns.os, "posix_fallocate", _refused_space)
    heap = run_rank_task(RankTask(0, "kineto", TRACE, tmp_path / "heap", spill=False))
    assert isinstance(heap, RankResult)
    held = heap.tables["events"]
    assert not in_mapped_files(held.select(list(TEXT_COLUMNS)))
    assert not in_mapped_files(held.select(list(NUMBER_COLUMNS)))
    assert_same_events(held, events)


def _refused(path: Path) -> Any:
    raise OSError(28, "No space left on device", str(path))


def _refused_space(fd: int, offset: int, length: int) -> None:
    raise OSError(28, "No space left on device")


def test_text_replaced_after_the_import_is_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob = "x" * (ARGS_LIMIT + 100)
    events = [
        gen.cpu_op("aten::mm", 10, 50, external_id=1, blob=blob),
        gen.cpu_op("aten::add", 70, 20, external_id=2),
    ]
    trace = gen.write_kineto(tmp_path / "cut.json", events)
    written = _counted_writes(monkeypatch)
    result = run_rank_task(RankTask(0, "kineto", trace, tmp_path / "task", spill=False))
    assert isinstance(result, RankResult)
    # the import's text, then the text with the long args cut (names.bounded); the numbers once
    assert written[TEXT_FILE] == 2 and written[NUMBERS_FILE] == 1
    table = result.tables["events"]
    assert in_mapped_files(table.select(list(TEXT_COLUMNS)))
    args = [a for a in table["args"].to_pylist() if a is not None]
    assert any("perfledger_cut_args_bytes" in a for a in args)
    assert not any(blob in a for a in args)
