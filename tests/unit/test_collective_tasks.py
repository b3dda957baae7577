"""collective_tasks and link_usage: the figures a communication task's args hold, however the
args spell them, and nothing from args that hold none."""

from __future__ import annotations

from perfledger.analysis.cluster.collectives import collective_tasks, link_usage
from perfledger.model import schema
from tests.scenarios import Timeline


def _comm(t: Timeline, start_us: float, name: str, args: dict[str, object]) -> None:
    t.event(schema.COMM, name, start_us, 5, device=0, stream=20, args=args)


def test_groups_waits_and_links_are_read_from_the_args() -> None:
    t = Timeline()
    links = {"HCCS": {"transit_bytes": 4000, "transit_ns": 20}}
    _comm(t, 10, "allreduce_a", {"Process Group Name": "dp", "grid": [1, 1, 1]})
    _comm(t, 20, "allreduce_b", {"Process Group Ranks": "[0, 1]"})
    _comm(t, 30, "hcom_allReduce_1", {"hccl": {"wait_ns": 700, "links": links}})
    # a CUDA kernel's own args: no group, no wait
    _comm(t, 40, "allreduce_c", {"registers per thread": 96, "grid": [2, 1, 1]})
    # the group's key written with escapes, and args that are not JSON
    _comm(t, 50, "allreduce_d", {})
    t.rows[-1]["args"] = '{"Process Group \\u004eame": "tp"}'
    _comm(t, 60, "allreduce_e", {})
    t.rows[-1]["args"] = '{"Process Group Name": '
    events = t.table()
    tasks = collective_tasks(events)
    assert tasks.column("name").to_pylist() == [
        "allreduce_a", "allreduce_b", "hcom_allReduce_1", "allreduce_c", "allreduce_d",
        "allreduce_e",
    ]  # fmt: skip
    assert tasks.column("group").to_pylist() == ["dp", "[0, 1]", "", "", "tp", ""]
    assert tasks.column("wait_ns").to_pylist() == [-1, -1, 700, -1, -1, -1]
    # the rows of the events they were taken from
    names = events.column("name").to_pylist()
    assert [names[r] for r in tasks.column("row").to_pylist()] == tasks.column("name").to_pylist()
    used = link_usage(events).to_pylist()
    assert [(u["link"], u["collectives"], u["transit_bytes"], u["transit_ns"]) for u in used] == [
        ("HCCS", 1, 4000, 20)
    ]
    assert used[0]["gbps"] == 200.0
