"""Rank numbering of task results, copied Ascend output, worker counts, failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfledger.errors import PerfledgerError
from perfledger.model.cluster import COLLECTIVES_SCHEMA, LINKS_SCHEMA
from perfledger.model.gaps import WORST_GAPS_SCHEMA, GapReport
from perfledger.model.tables import API_STATISTIC_SCHEMA, COMMUNICATION_SCHEMA, SPELLINGS_SCHEMA
from perfledger.run.execution import Execution, Runner
from perfledger.run.tasks import (
    KINETO,
    RankFailure,
    RankResult,
    RankTask,
    flag_copies,
    resolve_ranks,
)


def result(
    index: int,
    rank: int,
    claimed: int | None,
    file_name: str,
    *,
    kind: str = KINETO,
    fingerprint: tuple[int, bytes] | None = None,
) -> RankResult:
    return RankResult(
        index=index,
        rank=rank,
        claimed_rank=claimed,
        source_kind=kind,
        source_files=(Path("/run") / file_name,),
        meta={},
        loss=None,
        windows=(),
        accounts=(),
        host_accounts=(),
        annotated_steps=0,
        events_rows=0,
        tables={},
        table_files={},
        events_parquet=Path("/run/events.parquet"),
        communication=COMMUNICATION_SCHEMA.empty_table(),
        collectives=COLLECTIVES_SCHEMA.empty_table(),
        links=LINKS_SCHEMA.empty_table(),
        gap_report=GapReport((), 0, 0, WORST_GAPS_SCHEMA.empty_table()),
        api_statistic=API_STATISTIC_SCHEMA.empty_table(),
        copy_spellings=SPELLINGS_SCHEMA.empty_table(),
        main_file=Path("/run") / file_name if fingerprint else None,
        fingerprint=fingerprint,
    )


def test_ranks_the_traces_name_are_kept() -> None:
    results = [result(0, 1, 1, "a.json"), result(1, 0, 0, "b.json")]
    assert resolve_ranks(results) == [1, 0]


def test_file_names_number_traces_that_do_not_name_their_rank() -> None:
    results = [result(0, 0, None, "rank-3.json"), result(1, 0, None, "rank_7.json.gz")]
    assert resolve_ranks(results) == [3, 7]


def test_repeated_ranks_fall_back_to_file_names() -> None:
    results = [result(0, 1, 1, "rank1.json"), result(1, 1, 1, "rank2.json")]
    assert resolve_ranks(results) == [1, 2]


def test_file_order_numbers_traces_when_nothing_else_does() -> None:
    results = [result(i, 0, None, name) for i, name in enumerate(["x.json", "y.json", "z.json"])]
    assert resolve_ranks(results) == [0, 1, 2]


def test_ascend_ranks_in_conflict_are_numbered_by_position() -> None:
    results = [result(i, 0, 0, "trace_view.json", kind="torch_npu_text") for i in range(2)]
    assert resolve_ranks(results) == [0, 1]


def test_kineto_traces_claiming_one_rank_with_unhelpful_names_are_an_error() -> None:
    results = [result(0, 2, 2, "a.json"), result(1, 2, 2, "b.json")]
    with pytest.raises(
        PerfledgerError, match=r"several traces claim the same rank: a.json, b.json"
    ):
        resolve_ranks(results)


def test_a_single_trace_keeps_its_rank() -> None:
    assert resolve_ranks([result(0, 5, None, "x.json")]) == [5]


def test_a_rank_whose_output_repeats_another_ranks_is_flagged() -> None:
    same = (10, b"digest")
    results = [
        result(0, 0, 0, "r0.db", kind="torch_npu_db", fingerprint=same),
        result(1, 1, 1, "r1.db", kind="torch_npu_db", fingerprint=same),
        result(2, 2, 2, "r2.db", kind="torch_npu_db", fingerprint=(10, b"other")),
    ]
    flagged = flag_copies(results)
    assert flagged[0].loss is None and flagged[2].loss is None
    assert flagged[1].loss == (
        "/run/r1.db: same content as rank 0's /run/r0.db, "
        "one rank's output probably copied over another's"
    )


@pytest.mark.parametrize(
    ("workers", "tasks", "expected"),
    [(None, 1, 1), (0, 8, 0), (4, 2, 2), (2, 8, 2), (3, 0, 1)],
)
def test_worker_count(workers: int | None, tasks: int, expected: int) -> None:
    assert Execution(workers=workers).worker_count(tasks) == expected


def test_default_workers_are_one_per_core_at_most_one_per_task() -> None:
    import os

    assert Execution().worker_count(1000) == (os.cpu_count() or 1)


def test_failed_tasks_come_back_in_task_order_beside_the_results() -> None:
    failures = [
        RankFailure(2, Path("c.json"), "c.json: bad", 2),
        RankFailure(1, Path("b.json"), "b.json: truncated", 2),
    ]
    runner = Runner(lambda tasks, progress: list(failures), "test")
    tasks = [RankTask(i, KINETO, Path(f"{i}.json"), Path("work")) for i in range(3)]
    results, failed = runner.run(tasks)
    assert results == []
    assert [f.message for f in failed] == ["b.json: truncated", "c.json: bad"]
