"""An independent validator of Chrome trace JSON as Perfetto's importer reads it.

It converts every ``ts``/``dur`` the way Perfetto does (``trunc(x * 1000)`` in doubles) and
then checks what makes Perfetto drop or truncate data: slices on one track that overlap
without nesting, flows whose ends do not bind to a slice, missing names and sort order.
Written without any code of the exporter, with plain Python loops, so it can judge it.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAUNCH_CATS = {"runtime", "sync"}
DEVICE_CATS = {"kernel", "comm", "memcpy", "memset"}
PHASES = {"X", "i", "s", "f", "C", "M"}


@dataclass
class Summary:
    """What a valid timeline holds, for tests to assert on."""

    slices: int = 0
    instants: int = 0
    flows: int = 0
    counters: int = 0
    tracks: dict[tuple[int, int], str] = field(default_factory=dict)
    processes: dict[int, str] = field(default_factory=dict)
    process_sort: dict[int, int] = field(default_factory=dict)
    thread_sort: dict[tuple[int, int], int] = field(default_factory=dict)
    by_track: dict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=dict)
    other: dict[str, Any] = field(default_factory=dict)


def perfetto_ns(value: Any) -> int:
    """Perfetto's conversion of a JSON µs number to ns."""
    assert isinstance(value, (int, float)) and not isinstance(value, bool), value
    assert math.isfinite(value), value
    return int(float(value) * 1000.0)


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    assert isinstance(doc, dict), "top level must be an object"
    return doc


def validate(doc: dict[str, Any]) -> Summary:
    """Raise AssertionError with a precise message when the trace would import badly."""
    events = doc.get("traceEvents")
    assert isinstance(events, list), "traceEvents must be a list"
    # older Perfetto stops reading at the first top-level key it does not know
    assert next(iter(doc)) == "traceEvents", "traceEvents must be the first key"
    out = Summary(other=dict(doc.get("otherData") or {}))
    slices: dict[tuple[int, int], list[tuple[int, int, int, dict[str, Any]]]] = defaultdict(list)
    flow_ends: dict[int, dict[str, list[tuple[tuple[int, int], int]]]] = defaultdict(
        lambda: {"s": [], "f": []}
    )
    used_pids: set[int] = set()
    used_threads: set[tuple[int, int]] = set()
    for n, ev in enumerate(events):
        where = f"traceEvents[{n}]"
        assert isinstance(ev, dict), where
        ph = ev.get("ph")
        assert ph in PHASES, f"{where}: phase {ph!r}"
        pid = ev.get("pid")
        assert isinstance(pid, int) and not isinstance(pid, bool) and pid >= 0, f"{where}: pid"
        if ph == "M":
            name = ev.get("name")
            args = ev.get("args")
            assert isinstance(args, dict), f"{where}: metadata args"
            if name == "process_name":
                out.processes[pid] = args["name"]
            elif name == "process_sort_index":
                out.process_sort[pid] = args["sort_index"]
            elif name == "thread_name":
                out.tracks[(pid, ev["tid"])] = args["name"]
            elif name == "thread_sort_index":
                out.thread_sort[(pid, ev["tid"])] = args["sort_index"]
            else:
                raise AssertionError(f"{where}: unknown metadata {name!r}")
            continue
        ts = perfetto_ns(ev.get("ts"))
        # the exporter promises exact ns: Perfetto's truncation must not lose any
        assert ts == round(ev["ts"] * 1000), f"{where}: ts {ev['ts']!r} loses ns in Perfetto"
        assert ts >= 0, f"{where}: negative ts"
        assert isinstance(ev.get("name"), str), f"{where}: name"
        used_pids.add(pid)
        if ph == "C":
            args = ev.get("args")
            assert isinstance(args, dict) and args, f"{where}: counter args"
            for v in args.values():
                assert isinstance(v, (int, float)) and math.isfinite(v), f"{where}: counter {v!r}"
            out.counters += 1
            continue
        tid = ev.get("tid")
        assert isinstance(tid, int) and not isinstance(tid, bool), f"{where}: tid"
        used_threads.add((pid, tid))
        if ph == "X":
            dur = perfetto_ns(ev.get("dur"))
            assert dur == round(ev["dur"] * 1000), f"{where}: dur {ev['dur']!r} loses ns"
            assert dur >= 0, f"{where}: negative dur"
            slices[(pid, tid)].append((ts, ts + dur, n, ev))
            out.slices += 1
        elif ph == "i":
            out.instants += 1
        else:
            fid = ev.get("id")
            assert isinstance(fid, int) and 0 < fid < 2**53, f"{where}: flow id {fid!r}"
            if ph == "f":
                assert ev.get("bp") == "e", f"{where}: flow end must bind to its enclosing slice"
            flow_ends[fid][ph].append(((pid, tid), ts))

    for pid in used_pids:
        assert pid in out.processes, f"pid {pid} has no process_name"
        assert pid in out.process_sort, f"pid {pid} has no process_sort_index"
    for thread in used_threads:
        assert thread in out.tracks, f"thread {thread} has no thread_name"
        assert thread in out.thread_sort, f"thread {thread} has no thread_sort_index"
    tids = Counter(tid for _pid, tid in out.tracks)
    assert all(c == 1 for c in tids.values()), "a tid is reused across processes"

    # nesting per track: sorted by start, longer first; a stack of open slices
    parents: dict[tuple[int, int], list[int]] = {}
    starts: dict[tuple[int, int], list[int]] = {}
    for track, items in slices.items():
        items.sort(key=lambda s: (s[0], -(s[1] - s[0]), s[2]))
        stack: list[int] = []
        parent_of: list[int] = []
        for i, item in enumerate(items):
            start, end = item[0], item[1]
            while stack and items[stack[-1]][1] <= start:
                stack.pop()
            if stack:
                parent = items[stack[-1]]
                assert end <= parent[1], (
                    f"track {track} ({out.tracks.get(track)}): slice {item[3]['name']!r} "
                    f"[{start}, {end}) crosses {parent[3]['name']!r} [{parent[0]}, {parent[1]})"
                )
            parent_of.append(stack[-1] if stack else -1)
            stack.append(i)
        parents[track] = parent_of
        starts[track] = [s[0] for s in items]
        out.by_track[track] = [s[3] for s in items]

    def enclosing(track: tuple[int, int], ts: int) -> list[dict[str, Any]]:
        """Slices open at ts on a track, outermost first (Perfetto's stack at that instant).

        In a laminar track they are the open ancestors of the last slice starting at or
        before ts.
        """
        items = slices.get(track, [])
        i = bisect.bisect_right(starts.get(track, []), ts) - 1
        chain = []
        while i >= 0:
            start, end = items[i][0], items[i][1]
            if ts < end or start == end == ts:
                chain.append(items[i][3])
            i = parents[track][i]
        return chain[::-1]

    for fid, ends in flow_ends.items():
        assert len(ends["s"]) == 1 and len(ends["f"]) == 1, f"flow {fid}: ends {ends}"
        (s_track, s_ts), (f_track, f_ts) = ends["s"][0], ends["f"][0]
        assert s_ts <= f_ts, f"flow {fid} goes back in time"
        chain = enclosing(s_track, s_ts)
        open_tasks = enclosing(f_track, f_ts)
        assert chain, f"flow {fid}: start binds to no slice"
        assert open_tasks, f"flow {fid}: end binds to no slice"
        task = open_tasks[-1]
        assert task.get("cat") in DEVICE_CATS, f"flow {fid} ends on {task.get('cat')}"
        corr = task.get("args", {}).get("correlation")
        # the flow leaves the innermost slice open there: the launch itself, or a runtime
        # call nested inside it (sources that trace the runtime below the API call)
        launches = [
            ev
            for ev in chain
            if ev.get("cat") in LAUNCH_CATS and ev.get("args", {}).get("correlation") == corr
        ]
        assert launches, f"flow {fid} (correlation {corr}) leaves no launch of that correlation"
        assert chain.index(launches[-1]) >= len(chain) - 1 or all(
            ev.get("cat") in LAUNCH_CATS for ev in chain[chain.index(launches[-1]) :]
        ), f"flow {fid} leaves {chain[-1].get('name')!r}, not its launch"
        out.flows += 1
    return out
