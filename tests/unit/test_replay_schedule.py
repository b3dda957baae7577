"""The replay's longest-path loop gives the schedule of the plain reference recursion below
(every node visited the same way: release, chain, launch, wake-up, event edges, waits, a
collective's transfer), node for node, on every trace of tests/data under several changes and
with the other ranks' arrivals at the collectives; with the compiled short-path walk and with
the Python loop alone."""

from __future__ import annotations

from array import array
from dataclasses import fields, replace

import numpy as np
import pytest

from perfledger.analysis import replay as replay_module
from perfledger.analysis.critical_path import collective_arrivals, prepare_rank
from perfledger.analysis.graph import StepGraph
from perfledger.analysis.graph_codes import FREE
from perfledger.analysis.graph_plain import PlainColumns
from perfledger.analysis.profile import analyze_rank
from perfledger.analysis.replay import (
    AWAITED,
    CHAIN,
    LAUNCHED,
    RELEASE,
    WAITED,
    WOKEN,
    Peers,
    Schedule,
    replay,
)
from perfledger.model.whatif import WhatIf
from perfledger.sources import load_traces
from tests.paths import data_file
from tests.unit.test_replay_windows import TRACES, changes


def reference_schedule(
    pred: list[int],
    delay: list[int],
    launch_src: list[int],
    launch_delay: list[int],
    release: list[int],
    dur: list[int],
    observed: list[int],
    waits: dict[int, list[int]],
    wakes: dict[int, tuple[int, int]],
    events: dict[int, list[tuple[int, int]]],
    transfers: dict[int, tuple[int, int]],
) -> tuple[array[int], array[int], array[int], bytearray]:
    """Each node in turn, every kind of predecessor looked up (the results in the loop's
    types: C arrays of int64, one byte a node for how)."""
    n = len(dur)
    start, end, via, how = [0] * n, [0] * n, [-1] * n, [RELEASE] * n
    for v in range(n):
        s, by, kind = release[v], -1, RELEASE
        candidates: list[tuple[int, int, int]] = []
        if pred[v] >= 0:
            candidates.append((end[pred[v]] + delay[v], pred[v], CHAIN))
        if launch_src[v] >= 0:
            candidates.append((start[launch_src[v]] + launch_delay[v], launch_src[v], LAUNCHED))
        if v in wakes:
            candidates.append((start[wakes[v][0]] + wakes[v][1], wakes[v][0], WOKEN))
        candidates += [(end[w] + gap, w, AWAITED) for w, gap in events.get(v, [])]
        candidates += [(end[w], w, WAITED) for w in waits.get(v, [])]
        for t, u, k in candidates:  # the first of the latest wins
            if t > s:
                s, by, kind = t, u, k
        if s == FREE:
            s = observed[v]
        start[v] = s
        end[v] = s + dur[v] if v not in transfers else max(s, transfers[v][0]) + transfers[v][1]
        via[v], how[v] = by, kind
    return array("q", start), array("q", end), array("q", via), bytearray(how)


def assert_same_schedule(
    monkeypatch: pytest.MonkeyPatch, graph: StepGraph, change: WhatIf, peers: Peers | None
) -> Schedule:
    got = replay(graph, change, peers)
    with monkeypatch.context() as patch:
        patch.setattr(replay_module, "_schedule", reference_schedule)
        expected = replay(graph, change, peers)
    for name in ("start", "end", "via", "how", "chain_delay", "chain_pred"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), (name, change)
    return got


@pytest.mark.parametrize("walk", ["compiled", "python"])
@pytest.mark.parametrize("name", TRACES)
def test_the_schedule_is_the_reference_recursions(
    name: str, walk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the compiled short-path walk (where built) and the Python loop alone
    if walk == "python":
        monkeypatch.setattr(replay_module, "_COMPILED", None)
    elif replay_module._COMPILED is None:
        pytest.skip("no C compiler where the project was installed")
    prepared = [prepare_rank(analyze_rank(t).events) for t in load_traces([data_file(name)])]
    peers: list[Peers | None] = [None] * len(prepared)
    if len(prepared) > 1:
        arrivals = collective_arrivals(prepared)
        peers = list(arrivals.peers(None))
        assert any(p.node.size for p in arrivals.peers(None))  # transfers replayed too
    for rank, rank_peers in zip(prepared, peers, strict=True):
        for change in changes(rank.graph, rank.events):
            schedule = assert_same_schedule(monkeypatch, rank.graph, change, rank_peers)
            assert (schedule.how != RELEASE).any() or rank.graph.size <= 1


@pytest.mark.parametrize("name", ["kineto/v100_rank1_test.json.gz", "kineto/sampled_2ranks"])
def test_replays_leave_the_graphs_shared_columns_as_they_were(name: str) -> None:
    # every replay of a graph reads the same plain columns (made once): the changes that
    # rebuild some of them must not write into them, so the baseline stays the baseline
    prepared = [prepare_rank(analyze_rank(t).events) for t in load_traces([data_file(name)])]
    peers: list[Peers | None] = [None] * len(prepared)
    if len(prepared) > 1:
        peers = list(collective_arrivals(prepared).peers(None))
    for rank, rank_peers in zip(prepared, peers, strict=True):
        graph = rank.graph
        before = PlainColumns.of(graph)
        unsynced = tuple(graph.row[graph.wait_dst[::2]].tolist())
        whatifs = [*changes(graph, rank.events), WhatIf(unsynced_rows=unsynced)]
        # the changes together: scales, fused tasks, own lanes, fewer waits at once
        fused = whatifs[-2]
        whatifs.append(
            replace(fused, scales=whatifs[1].scales, overlap_comm=True, unsynced_rows=unsynced)
        )
        for change in whatifs:
            replay(graph, change)
            replay(graph, change, rank_peers)
        again = replay(graph)
        for column in ("start", "end", "via", "how"):
            assert np.array_equal(getattr(again, column), getattr(rank.baseline, column)), column
        # every field, as made afresh from the graph's arrays before and after the replays:
        # neither the shared lists and dicts nor the arrays behind them were written
        after = PlainColumns.of(graph)
        for field in fields(PlainColumns):
            shared = getattr(graph.plain, field.name)
            assert shared == getattr(before, field.name) == getattr(after, field.name), field.name


def test_the_compiled_walk_stops_where_the_python_loop_must_take_over() -> None:
    if replay_module._COMPILED is None:
        pytest.skip("no C compiler where the project was installed")
    walk = replay_module._COMPILED.walk
    n = 4
    pred = np.array([-1, 0, 1, 2], np.int64)
    delay = np.array([0, 5, 2**62, 2**62], np.int64)  # node 3's sum leaves int64
    launch_src, launch_delay = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    release = np.array([FREE, 0, 0, 0], np.int64)
    dur = np.array([10, 10, 10, 10], np.int64)
    observed = np.array([100, 0, 0, 0], np.int64)
    more = bytearray(n)
    made = (array("q", [0]) * n, array("q", [0]) * n, array("q", [-1]) * n, bytearray(n))
    no_wakes = (np.full(n, -1, np.int64), np.zeros(n, np.int64))
    no_edges = (np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    no_waits = (np.zeros(n + 1, np.int64), np.zeros(0, np.int64))
    columns = (pred, delay, launch_src, launch_delay, release, dur, observed)

    def walked(lo: int, hi: int) -> int:
        result: int = walk(*columns, more, *made, *no_wakes, *no_edges, *no_waits, lo, hi, FREE)
        return result

    assert walked(0, n) == 3
    start, end = made[0], made[1]
    assert list(start[:3]) == [100, 115, 2**62 + 125] and list(end[:3]) == [110, 125, 2**62 + 135]
    more[1] = 2  # a node the loop takes (a collective's transfer)
    assert walked(0, n) == 1
    with pytest.raises(ValueError, match="within"):
        walked(0, n + 1)
    with pytest.raises(ValueError, match="int64"):
        walk(pred[:3], *columns[1:], more, *made, *no_wakes, *no_edges, *no_waits, 0, n, FREE)
