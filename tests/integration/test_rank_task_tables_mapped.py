"""A rank task hands on its counters, gaps and operator tables read through maps of files in
its folder (the replay and the advisor run with them out of the heap); where the files cannot
be mapped the tables stay in the heap, with the same values and the same advice."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from perfledger.memory import in_mapped_files
from perfledger.run.tasks import RankResult, RankTask, run_rank_task

TRACE = Path(__file__).resolve().parents[1] / "data" / "kineto" / "v100_rank1_ddp.json.gz"
MAPPED = ("counters", "gaps", "op_summary", "kernel_details")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_the_task_tables_are_mapped_and_the_same_in_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapped = run_rank_task(RankTask(0, "kineto", TRACE, tmp_path / "mapped", spill=False))
    assert isinstance(mapped, RankResult)
    for name in MAPPED:
        assert mapped.tables[name].num_rows > 0, name
        assert in_mapped_files(mapped.tables[name]), name

    def refused(*args: object, **kwargs: object) -> None:
        # what a filesystem without memory maps (some FUSE and network mounts) answers
        raise OSError(19, "refused", str(args[0]))

    monkeypatch.setattr(pa, "memory_map", refused)
    heap = run_rank_task(RankTask(0, "kineto", TRACE, tmp_path / "heap", spill=False))
    assert isinstance(heap, RankResult)
    for name in MAPPED:
        assert not in_mapped_files(heap.tables[name]), name
        assert heap.tables[name].equals(mapped.tables[name]), name
    assert heap.advice == mapped.advice
    assert heap.replay == mapped.replay
