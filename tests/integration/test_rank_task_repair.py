"""A rank task whose repair leaves events out: the events it hands on are the repaired ones,
whether it keeps its tables or spills them to files, and none is read from the file of the
columns as imported (whose rows no longer match)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from perfledger.model.quality import OUTLYING_EVENTS
from perfledger.run.tasks import RankResult, RankTask, loaded, run_rank_task
from tests.synth import assert_same_events

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"


def _traces(tmp_path: Path) -> tuple[Path, Path]:
    """A real trace, and the same with one more kernel stamped ten years after the rest (a
    clock fault), both written the same way."""
    document = json.loads(gzip.decompress((DATA / "v100_rank1_ddp.json.gz").read_bytes()))
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(document))
    kernels = [e for e in document["traceEvents"] if e.get("cat") == "kernel"]
    late = dict(kernels[0], ts=kernels[0]["ts"] + 10 * 365 * 86_400 * 1_000_000)
    document["traceEvents"].append(late)
    faulty = tmp_path / "late_kernel.json"
    faulty.write_text(json.dumps(document))
    return clean, faulty


@pytest.mark.parametrize("spill", [False, True])
def test_a_task_whose_repair_drops_events_hands_on_the_repaired_events(
    tmp_path: Path, spill: bool
) -> None:
    clean_trace, trace = _traces(tmp_path)
    clean = run_rank_task(RankTask(0, "kineto", clean_trace, tmp_path / "clean", spill=spill))
    result = run_rank_task(RankTask(0, "kineto", trace, tmp_path / "task", spill=spill))
    assert isinstance(clean, RankResult) and isinstance(result, RankResult)
    dropped = [c for c in result.quality if c.id == OUTLYING_EVENTS]
    assert [c.count for c in dropped] == [1] and dropped[0].repaired
    events = loaded(result).tables["events"]
    # the late kernel left out: the clean trace's events, row for row
    assert events.num_rows == result.events_rows == loaded(clean).tables["events"].num_rows
    assert_same_events(events, loaded(clean).tables["events"])
    assert_same_events(events, pq.read_table(result.events_parquet))
    # every column was rewritten by the repair: nothing is read from the import's file (a
    # spilled task without repair hands that file on with its own)
    assert result.events_plain == ()
    assert bool(clean.events_plain) == spill
