"""Timelines of many ranks written one rank at a time: same slices, shared caps, one origin."""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfledger.analysis.profile import analyze_traces
from perfledger.model import schema
from perfledger.model.profile import ProfileAnalysis
from perfledger.profiledir import artefacts
from perfledger.render import timeline
from perfledger.render.timeline import writer
from perfledger.sources import load_traces
from tests.cluster_gen import write_ranks
from tests.paths import data_file
from tests.timeline_check import Summary, load, perfetto_ns, validate

MS = 1_000_000
US = 1_000


@pytest.fixture(scope="module")
def sampled() -> ProfileAnalysis:
    """The two real ranks of sampled_2ranks (4810 and 4675 events, steps 551 and 552)."""
    return analyze_traces(load_traces([data_file("kineto/sampled_2ranks")]))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> ProfileAnalysis:
    """Three synthetic ranks (tests/cluster_gen.py), three steps 20 ms apart from 1 ms.

    Per rank and step k (B = 1 ms + 20 ms k): ProfilerStep [B, B + 14 ms), launches at
    B + 100 µs and B + 150 µs, gemm from B + 200 µs, the all-reduce after it; idle gaps
    [B, B + 200 µs) (host_dispatch) and [B + 13.2 ms, B + 14 ms) (other).
    """
    directory = tmp_path_factory.mktemp("ranks")
    paths = write_ranks(directory, 3, slow_rank=1, steps=3)
    return analyze_traces(load_traces(paths))


def findings_on(ranks: list[int], start_ns: int) -> list[dict[str, Any]]:
    return [
        {
            "id": "excessive_sync",
            "title": "sync",
            "spans": [{"rank": r, "start_ns": start_ns, "end_ns": start_ns + MS} for r in ranks],
        }
    ]


def content(summary: Summary) -> dict[tuple[str, str], list[tuple[str, int, int]]]:
    """Slices per track, the track named by its process and thread names (pids aside)."""
    out: dict[tuple[str, str], list[tuple[str, int, int]]] = {}
    for (pid, tid), items in summary.by_track.items():
        key = (summary.processes[pid], summary.tracks[(pid, tid)])
        out[key] = sorted(
            (ev["name"], perfetto_ns(ev["ts"]), perfetto_ns(ev["dur"])) for ev in items
        )
    return out


def counters(doc: dict[str, Any], processes: dict[int, str]) -> list[tuple[str, str, int, str]]:
    return sorted(
        (processes[ev["pid"]], ev["name"], perfetto_ns(ev["ts"]), json.dumps(ev["args"]))
        for ev in doc["traceEvents"]
        if ev["ph"] == "C"
    )


def rank_of_process(name: str) -> int:
    assert name.startswith("rank "), name
    return int(name.split()[1])


def record_ranks(doc: dict[str, Any], summary: Summary) -> list[int]:
    """The rank of every record in file order (metadata included)."""
    return [rank_of_process(summary.processes[ev["pid"]]) for ev in doc["traceEvents"]]


def one_gzip_member(path: Path) -> bytes:
    """The file's data, checking it is a single gzip member (some readers stop after one)."""
    inflate = zlib.decompressobj(wbits=31)
    data = inflate.decompress(path.read_bytes())
    assert inflate.eof and inflate.unused_data == b"", f"{path}: not one gzip member"
    return data


def write_all_at_once(
    directory: Path, analysis: ProfileAnalysis, findings: list[dict[str, Any]]
) -> list[Path]:
    whole = directory / "timeline.json.gz"
    # one preparation of the whole profile for the whole timeline and its step slices
    prepared = timeline.prepare_timeline(
        analysis.events,
        gaps=analysis.gaps,
        counters=analysis.counters,
        findings=findings,
    )
    timeline.write_prepared_timeline(whole, prepared)
    windows = [w for r in analysis.ranks if r.annotated_steps for w in r.windows]
    slices = timeline.write_prepared_step_timelines(directory / "timeline", prepared, windows)
    return [whole, *slices]


@pytest.mark.parametrize("source", ["sampled", "synthetic"])
def test_rank_by_rank_files_hold_the_slices_of_the_all_at_once_writer(
    source: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    analysis: ProfileAnalysis = request.getfixturevalue(source)
    ranks = [r.rank for r in analysis.ranks]
    first = min(pc.min(r.events["start_ns"]).as_py() for r in analysis.ranks)
    findings = findings_on(ranks, first + 2 * MS)
    by_rank = artefacts.write_timelines(tmp_path / "by_rank", analysis, findings)
    at_once = write_all_at_once(tmp_path / "at_once", analysis, findings)
    assert [p.relative_to(tmp_path / "by_rank") for p in by_rank] == [
        p.relative_to(tmp_path / "at_once") for p in at_once
    ]
    steps = {w.step for r in analysis.ranks for w in r.windows}
    assert len(by_rank) == 1 + len(steps)
    instants = int(pc.sum(pc.equal(pc.cast(analysis.events["kind"], "string"), "instant")).as_py())
    for mine, reference in zip(by_rank, at_once, strict=True):
        doc = json.loads(one_gzip_member(mine))
        summary = validate(doc)
        expected = validate(load(reference))
        assert content(summary) == content(expected), mine.name
        assert counters(doc, summary.processes) == counters(load(reference), expected.processes)
        assert summary.flows == expected.flows
        assert summary.other["origin_ns"] == first
        # in rank order, pids and tids are numbered as the all-at-once writer numbers them
        assert summary.processes == expected.processes and summary.tracks == expected.tracks
        # written rank by rank: every record of a rank before any of the next rank
        order = record_ranks(doc, summary)
        assert order == sorted(order) and set(order) == set(ranks), mine.name
        other = summary.other
        assert other["max_events_per_rank"] is not None
        assert [r["rank"] for r in other["ranks"]] == sorted(ranks)
        assert other["truncated_at_ns"] is None
    whole = validate(load(by_rank[0]))
    # nothing is cut: every event a slice or an instant, every gap and span a slice
    assert whole.other["events_written"] == analysis.events.num_rows
    assert whole.instants == instants
    spans = len(ranks)
    assert whole.slices == analysis.events.num_rows - instants + analysis.gaps.num_rows + spans


def test_sampled_ranks_share_the_first_instant_of_rank_0(
    sampled: ProfileAnalysis, tmp_path: Path
) -> None:
    by_rank = artefacts.write_timelines(tmp_path, sampled, [])
    # rank 0 starts 192 µs before rank 1 (first events at ...079292 and ...079484 µs)
    assert [pc.min(r.events["start_ns"]).as_py() for r in sampled.ranks] == [
        1_682_725_898_079_292_000,
        1_682_725_898_079_484_000,
    ]
    for path in by_rank:
        summary = validate(load(path))
        assert summary.other["origin_ns"] == 1_682_725_898_079_292_000
    whole = validate(load(by_rank[0]))
    per_rank = {r["rank"]: r for r in whole.other["ranks"]}
    assert per_rank[0]["events_written"] == 4810 and per_rank[1]["events_written"] == 4675
    # rank 1's first slice is at 192 µs on the shared origin
    firsts = defaultdict(list)
    for (pid, _tid), items in whole.by_track.items():
        firsts[rank_of_process(whole.processes[pid])].extend(perfetto_ns(e["ts"]) for e in items)
    assert min(firsts[0]) == 0 and min(firsts[1]) == 192 * US


def test_each_rank_keeps_its_earliest_share_of_a_small_cap(
    synthetic: ProfileAnalysis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artefacts, "FULL_TIMELINE_MAX_EVENTS", 7)
    monkeypatch.setattr(artefacts, "STEP_MAX_EVENTS", 4)
    whole_path, *steps = artefacts.write_timelines(tmp_path, synthetic, [])
    # whole timeline: ceil(7 / 3) = 3 events per rank, its 3 earliest: ProfilerStep#1 at 1 ms
    # and the launches at 1.1 and 1.15 ms; the cut falls at the gemm (1.2 ms, 0.2 ms after
    # the origin). The gap [1, 1.2) ms starts before the cut; the busy counter's first
    # sample (at the origin) too; no task is kept, so no flow.
    whole = validate(load(whole_path))
    for rank in (0, 1, 2):
        assert content_of_rank(whole, rank) == {
            "host": [
                ("ProfilerStep#1", 0, 14 * MS),
                ("cudaLaunchKernel", 100 * US, 10 * US),
                ("cudaLaunchKernel", 150 * US, 10 * US),
            ],
            "idle gaps": [("idle: host_dispatch", 0, 200 * US)],
        }
    assert whole.flows == 0 and whole.counters == 3
    other = whole.other
    assert other["max_events_per_rank"] == 3
    assert (other["events_total"], other["events_written"]) == (45, 9)
    assert other["truncated_at_ns"] == 1_200_000
    assert [(r["rank"], r["events_total"], r["events_written"]) for r in other["ranks"]] == [
        (0, 15, 3),
        (1, 15, 3),
        (2, 15, 3),
    ]
    assert {r["truncated_at_ns"] for r in other["ranks"]} == {1_200_000}
    # step 2's slice [21, 35) ms: ceil(4 / 3) = 2 events per rank, ProfilerStep#2 and the
    # first launch; cut at the second launch (21.15 ms)
    assert [p.name for p in steps] == ["step_1.json.gz", "step_2.json.gz", "step_3.json.gz"]
    step2 = validate(load(steps[1]))
    for rank in (0, 1, 2):
        assert content_of_rank(step2, rank) == {
            "host": [
                ("ProfilerStep#2", 20 * MS, 14 * MS),
                ("cudaLaunchKernel", 20 * MS + 100 * US, 10 * US),
            ],
            "idle gaps": [("idle: host_dispatch", 20 * MS, 200 * US)],
        }
    assert step2.other["window_ns"] == [21 * MS, 35 * MS]
    assert {r["truncated_at_ns"] for r in step2.other["ranks"]} == {21_150_000}


def content_of_rank(summary: Summary, rank: int) -> dict[str, list[tuple[str, int, int]]]:
    """A rank's slices: host threads together, device gaps apart."""
    out: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for (pid, tid), items in summary.by_track.items():
        if rank_of_process(summary.processes[pid]) != rank:
            continue
        key = "idle gaps" if summary.tracks[(pid, tid)] == "idle gaps" else "host"
        if " device " in summary.processes[pid] and key == "host":
            key = "device"
        out[key].extend((e["name"], perfetto_ns(e["ts"]), perfetto_ns(e["dur"])) for e in items)
    return {k: sorted(v, key=lambda s: (s[1], s[0])) for k, v in out.items()}


def test_counters_and_spans_go_with_their_rank_and_strays_with_the_last(
    synthetic: ProfileAnalysis, tmp_path: Path
) -> None:
    host = pa.table(
        {
            "rank": pa.array([0, 2, 7], pa.int32()),
            "track": ["host", "host", "host"],
            "name": ["cpu %", "cpu %", "cpu %"],
            "ts_ns": [2 * MS, 3 * MS, 4 * MS],
            "value": [10.0, 20.0, 70.0],
        },
        schema=schema.COUNTERS_SCHEMA,
    )
    analysis = dataclasses.replace(synthetic, counters=host)
    findings = findings_on([1, 7], 5 * MS)
    path = artefacts.write_timelines(tmp_path, analysis, findings)[0]
    doc = load(path)
    summary = validate(doc)
    cpu = [
        (summary.processes[ev["pid"]], ev["args"]["cpu %"], i)
        for i, ev in enumerate(doc["traceEvents"])
        if ev["ph"] == "C" and ev["name"] == "host"
    ]
    assert [(p, v) for p, v, _ in cpu] == [
        ("rank 0 analysis", 10.0),
        ("rank 2 analysis", 20.0),
        ("rank 7 analysis", 70.0),
    ]
    spans = [
        (summary.processes[ev["pid"]], perfetto_ns(ev["ts"]), i)
        for i, ev in enumerate(doc["traceEvents"])
        if ev.get("cat") == "finding"
    ]
    assert [(p, ts) for p, ts, _ in spans] == [
        ("rank 1 analysis", 4 * MS),
        ("rank 7 analysis", 4 * MS),
    ]
    # rank 7 has no part of its own: its records are written with the last rank's
    order = record_ranks(doc, summary)
    own = [r for r in order if r != 7]
    assert own == sorted(own)
    assert all(i > order.index(2) for i, r in enumerate(order) if r == 7)


def test_each_rank_is_prepared_once_from_its_own_events(
    synthetic: ProfileAnalysis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = writer.place_timeline
    seen: list[tuple[list[int], int, int]] = []

    def spy(events: pa.Table, **kwargs: Any) -> Any:
        seen.append((pc.unique(events["rank"]).to_pylist(), events.num_rows, kwargs["first_pid"]))
        return place(events, **kwargs)

    monkeypatch.setattr(writer, "place_timeline", spy)
    paths = artefacts.write_timelines(tmp_path, synthetic, [])
    assert len(paths) == 4  # the whole timeline and 3 steps, all from these preparations
    # per rank: host process, device process, analysis process (busy counters)
    assert seen == [([0], 15, 1), ([1], 15, 4), ([2], 15, 7)]


def test_a_failing_file_leaves_no_temporary_file(
    synthetic: ProfileAnalysis, tmp_path: Path
) -> None:
    (tmp_path / "timeline").mkdir()
    (tmp_path / "timeline" / "step_2.json.gz").mkdir()  # a folder where a file must go
    with pytest.raises(OSError):
        artefacts.write_timelines(tmp_path, synthetic, [])
    left = sorted(p.name for p in tmp_path.rglob(".*"))
    assert left == []


def test_plain_json_parts_join_into_one_document(
    synthetic: ProfileAnalysis, tmp_path: Path
) -> None:
    parts = [timeline.TimelinePart(r.rank, r.events, r.accounting.gaps) for r in synthetic.ranks]
    stats, steps = timeline.write_profile_timelines(
        tmp_path / "t.json", tmp_path / "steps", parts, [], counters=None
    )
    assert steps == []
    summary = validate(json.loads((tmp_path / "t.json").read_text()))
    assert stats.events_written == summary.other["events_written"] == 45
    assert summary.flows == stats.flows == 18  # two launches per step, three steps, 3 ranks
    assert (tmp_path / "t.json").read_bytes().startswith(b'{"traceEvents":[\n')
