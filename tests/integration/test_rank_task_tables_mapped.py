"""A rank task hands on its counters, gaps and operator tables read through maps of files in
its folder (the replay and the advisor run with them out of the heap); where the files cannot
be mapped the tables stay in the heap, with the same values and the same advice. The step graph
lets go of the pages it reads of the mapped events as it is built."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from perfledger.analysis import graph
from perfledger.memory import in_mapped_files
from perfledger.run import tasks
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
    # the profile's gaps are its only rank's: one file holds them
    assert [p.name for p in (tmp_path / "mapped").rglob("*gaps*")] == ["rank-gaps.arrow"]

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


def _resident_kb(suffix: str) -> int:
    """The resident kB of this process's maps of files whose path ends in ``suffix``."""
    total, counting = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):  # a map's header line
            counting = len(fields) > 5 and fields[5].endswith(suffix)
        elif counting and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
def test_the_step_graph_lets_the_pages_it_reads_of_the_mapped_events_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []
    built = threading.Event()
    order, write = graph._topological, tasks._write_mapped

    def watched(nodes: Any) -> Any:
        # the graph's nodes made: the events' times, ids, devices ... read whole
        read = _resident_kb("events-plain.arrow")
        # still building: what it read goes meanwhile (the dropper passes every 0.25 s), not
        # only at its end; waited for up to 10 s, a loaded machine's thread may run late
        deadline = time.monotonic() + 10.0
        later = _resident_kb("events-plain.arrow")
        while later and time.monotonic() < deadline:
            time.sleep(0.05)
            later = _resident_kb("events-plain.arrow")
        seen.append((read, later))
        built.set()
        return order(nodes)

    def held_back(*args: Any, **kwargs: Any) -> Any:
        # the events' Parquet file (whose writing lets the pages of the events go too)
        # written once the graph is built
        built.wait(timeout=60)  # never forever where the graph is not built
        return write(*args, **kwargs)

    monkeypatch.setattr(graph, "_topological", watched)
    monkeypatch.setattr(tasks, "_write_mapped", held_back)
    result = run_rank_task(RankTask(0, "kineto", TRACE, tmp_path / "task", spill=False))
    assert isinstance(result, RankResult)
    ((read, later),) = seen
    assert read > 0 and later == 0
