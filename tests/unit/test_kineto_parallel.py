"""A large trace decoded by worker processes gives the one-process import's tables, row for row.

Small chunks (``CHUNK_BYTES``) make the synthetic documents span many chunks; the size
threshold is lowered so that they go to the workers at all.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import math
import multiprocessing
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from rich.console import Console

from perfledger import import_pool
from perfledger.model.trace import Trace
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from perfledger.sources import gunzip, kineto, kineto_parallel, kineto_stream
from perfledger.sources.kineto import load_kineto
from tests import kineto_gen as gen
from tests.paths import data_file

WORKERS = 2


def _plain(table: pa.Table) -> list[dict[str, Any]]:
    return [
        {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for row in table.to_pylist()
    ]


def _assert_same(parallel: Trace, alone: Trace) -> None:
    assert parallel.events.schema == alone.events.schema
    assert _plain(parallel.events) == _plain(alone.events)
    assert parallel.counters.equals(alone.counters)
    assert parallel.meta == alone.meta
    assert parallel.loss == alone.loss


@dataclass
class Seen:
    """What the parallel read did: chunks sent to the workers, offsets read again here."""

    sent: int = 0
    again: list[int] = field(default_factory=list)
    sent_before_again: list[int] = field(default_factory=list)  # ``sent`` at each re-read
    # the size of each chunk's call as pickled for the pipe to the workers
    call_bytes: list[int] = field(default_factory=list)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    """Every trace goes to the workers, in chunks of about 4 kB."""
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 4096)
    seen = Seen()
    original = kineto_parallel.restart_at

    def read_again(splitter: Any, offset: int) -> Any:
        seen.again.append(offset)
        seen.sent_before_again.append(seen.sent)
        return original(splitter, offset)

    class CountingPool(ProcessPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            seen.sent += 1
            seen.call_bytes.append(len(pickle.dumps(args)))
            return super().submit(*args, **kwargs)

    monkeypatch.setattr(kineto_parallel, "restart_at", read_again)
    monkeypatch.setattr(import_pool, "ProcessPoolExecutor", CountingPool)
    yield seen


@pytest.fixture
def spill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system's temporary space, where the read's folders go: a folder of the test's."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _load_both(path: Path) -> tuple[Trace, Trace]:
    return load_kineto(path, workers=WORKERS), load_kineto(path)


def _ops(count: int) -> list[dict[str, Any]]:
    return [gen.cpu_op(f"op{i}", 1000 + 10 * i, 5, external_id=i) for i in range(count)]


def test_clean_documents_of_every_shape_are_read_by_the_workers(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _ops(2000)  # about 300 kB: the reader's first 64 kB leave most of it to the workers
    shapes = (
        ("a.json", "pretty", True),
        ("b.json", "compact", True),
        ("c.json.gz", "pretty", True),
        ("d.json.gz", "pretty", False),  # inflated by zlib: chunk by chunk, here
    )
    for name, style, isal in shapes:
        sent = small_chunks.sent
        path = gen.write_kineto(tmp_path / name, events, style=style, _after={"x": 1})
        with monkeypatch.context() as patch:
            if not isal:
                patch.setattr(gunzip, "_FAST", None)
            parallel, alone = _load_both(path)
        _assert_same(parallel, alone)
        assert parallel.events.num_rows == 2000
        assert parallel.meta["trace_keys"] == {"x": 1}
        assert small_chunks.sent - sent > 10
        calls = small_chunks.call_bytes[sent:]
        if name.endswith(".gz") and not (isal and gunzip.fast()):
            # inflated here chunk by chunk: the chunks' text goes to the workers
            assert min(calls) > kineto_stream.CHUNK_BYTES // 2
        else:  # the workers read their chunks from a file (a gzip one inflated into a file
            # first): only where they lie is sent
            assert max(calls) < 1000
    assert small_chunks.again == []


def test_a_separator_inside_a_string_is_read_again_in_this_process(
    tmp_path: Path, small_chunks: Seen
) -> None:
    # the name comes early in an event: a chunk ending in one of these is most likely cut
    # inside its name
    tricky = [gen.cpu_op('weird }, { "x', 30000 + i, 1, external_id=9000 + i) for i in range(300)]
    events = _ops(1000) + tricky + _ops(1000)
    path = gen.write_kineto(tmp_path / "t.json", events, style="compact")
    parallel, alone = _load_both(path)
    _assert_same(parallel, alone)
    assert parallel.events.num_rows == len(events)
    assert parallel.loss is None
    # each chunk cut inside a string is read again here from where it began, and the
    # workers take over again after it: past the tricky events they decode every chunk
    text = path.read_bytes()
    assert small_chunks.again
    for offset in small_chunks.again:
        assert text.index(b"weird") - 2 * 4096 < offset < text.rindex(b"weird")
        assert text[:offset].rstrip().endswith(b"}")
    after = small_chunks.sent - small_chunks.sent_before_again[-1]
    assert after >= (len(text) - text.rindex(b"weird")) // (2 * 4096) - 1 > 10


def test_a_gzip_trace_is_read_again_from_the_chunk_that_failed(
    tmp_path: Path, small_chunks: Seen
) -> None:
    tricky = [gen.cpu_op('weird }, { "x', 30000 + i, 1, external_id=9000 + i) for i in range(300)]
    events = _ops(1000) + tricky + _ops(1000)
    path = gen.write_kineto(tmp_path / "t.json.gz", events)
    calls: list[tuple[int, int]] = []
    parallel = load_kineto(path, workers=WORKERS, progress=lambda *call: calls.append(call))
    _assert_same(parallel, load_kineto(path))
    assert parallel.events.num_rows == len(events)
    assert small_chunks.again
    # the bar never moves back while the file is read again from an earlier chunk
    size = path.stat().st_size
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert calls[-1] == (size, size)


def test_a_trace_rewritten_during_the_read_is_read_from_the_file_first_opened(
    tmp_path: Path, small_chunks: Seen
) -> None:
    # the read goes back to a chunk that failed to decode: it must read the same file again,
    # not whatever now has its name
    first = _ops(1500) + [gen.cpu_op(5, 50000, 1, external_id=99999)] + _ops(1500)
    path = gen.write_kineto(tmp_path / "t.json", first)
    alone = load_kineto(path)
    other = gen.write_kineto(tmp_path / "other.json", _ops(3000)[::-1])
    replaced: list[int] = []

    def replace_once(done: int, total: int) -> None:
        if not replaced:
            os.replace(other, path)
            replaced.append(done)

    parallel = load_kineto(path, workers=WORKERS, progress=replace_once)
    assert replaced
    _assert_same(parallel, alone)
    assert parallel.events.num_rows == 3001  # the event with a number for its name is kept
    assert len(small_chunks.again) == 1
    # after the chunk with the malformed event, the workers read on
    assert small_chunks.sent - small_chunks.sent_before_again[0] > 10


def test_damage_in_the_middle_is_found_as_in_one_process(
    tmp_path: Path, small_chunks: Seen
) -> None:
    text = gen.document_text(_ops(2000), schemaVersion=1).encode()
    at = text.index(b'"op1000"')
    path = tmp_path / "damaged.json"
    path.write_bytes(text[:at] + b"}}}" + text[at:])
    parallel, alone = _load_both(path)
    _assert_same(parallel, alone)
    assert parallel.loss is not None and "the trace is damaged at byte" in parallel.loss
    assert parallel.events.num_rows == 1000
    assert len(small_chunks.again) == 1
    assert small_chunks.sent > 10
    # nothing is sent to the workers after the damage is found
    assert small_chunks.sent_before_again == [small_chunks.sent]


@pytest.mark.parametrize("zipped", [False, True])
def test_a_trace_cut_short_keeps_the_same_events(
    tmp_path: Path, small_chunks: Seen, zipped: bool
) -> None:
    text = gen.document_text(_ops(2000), schemaVersion=1).encode()
    if zipped:
        packed = gzip.compress(text, mtime=0)
        path = tmp_path / "cut.json.gz"
        path.write_bytes(packed[: len(packed) // 2])
    else:
        path = tmp_path / "cut.json"
        path.write_bytes(text[: text.index(b'"op1500"')])
    parallel, alone = _load_both(path)
    _assert_same(parallel, alone)
    assert parallel.loss is not None and "the rest of the trace is lost" in parallel.loss
    assert 0 < parallel.events.num_rows < 2000
    assert small_chunks.sent > 10
    assert small_chunks.again == []


@pytest.mark.parametrize(
    "name",
    [
        "mtia_inference.json.gz",  # MTIA device events
        "a100_alexnet.json.gz",
        "v100_ns_timestamps.json.gz",  # float µs with ns digits
        "a100_rank3_control.json.gz",
        "resnet50_gpu_2021.json.gz",  # an older PyTorch
    ],
)
def test_real_traces_give_the_same_tables(
    monkeypatch: pytest.MonkeyPatch, small_chunks: Seen, name: str
) -> None:
    path = data_file(f"kineto/{name}")
    with gzip.open(path) as raw:
        size = len(raw.read())
    chunk = max(16 << 10, size // 64)  # about 64 chunks whatever the size
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", chunk)
    parallel, alone = _load_both(path)
    _assert_same(parallel, alone)
    assert small_chunks.again == []
    # every chunk but those of the reader's first 64 kB and of the last stretch (a chunk is
    # cut at the last separator of 1-2 chunk sizes of text)
    assert small_chunks.sent >= (size - (64 << 10)) // (2 * chunk) - 1 > 0


def test_small_traces_and_one_worker_stay_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = gen.write_kineto(tmp_path / "t.json", _ops(10))
    started: list[int] = []

    def pool(*args: Any) -> Any:
        started.append(1)
        raise AssertionError("a pool was started")

    monkeypatch.setattr(kineto_parallel, "read_blocks", pool)
    load_kineto(path, workers=WORKERS)  # under PARALLEL_MIN_BYTES
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    load_kineto(path, workers=1)
    load_kineto(path, workers=0)
    assert started == []


def test_a_worker_killed_midway_is_answered_by_reading_in_this_process(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = gen.write_kineto(tmp_path / "t.json", _ops(6000))
    alone = load_kineto(path)
    raised: list[BaseException] = []
    original = kineto_parallel.read_blocks

    def watched(*args: Any) -> Any:
        try:
            return original(*args)
        except BaseException as exc:
            raised.append(exc)
            raise

    def kill_a_worker(done: int, total: int) -> None:
        workers = multiprocessing.active_children()
        if done > total // 3 and workers and not raised and small_chunks.sent:
            os.kill(workers[0].pid or 0, signal.SIGKILL)

    monkeypatch.setattr(kineto_parallel, "read_blocks", watched)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel = load_kineto(path, workers=WORKERS, progress=kill_a_worker)
        gc.collect()
    assert [type(e) for e in raised] == [kineto_parallel.WorkersUnavailable]
    _assert_same(parallel, alone)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_analyze_of_one_trace_decoded_by_workers_writes_the_same_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = data_file("kineto/v100_rank1_test.json.gz")
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 256 << 10)
    pools: list[int] = []
    original = kineto_parallel.read_blocks

    def counted(path: Path, workers: int, *args: Any) -> Any:
        pools.append(workers)
        return original(path, workers, *args)

    monkeypatch.setattr(kineto_parallel, "read_blocks", counted)
    quiet = Console(file=io.StringIO())
    build_profile([source], tmp_path / "alone", console=quiet, execution=Execution(workers=0))
    assert pools == []
    build_profile([source], tmp_path / "workers", console=quiet, execution=Execution(workers=2))
    assert pools == [2]
    for name in ("op_summary.csv", "kernel_details.csv", "step_trace.csv", "gaps.csv"):
        assert (tmp_path / "workers" / name).read_bytes() == (
            tmp_path / "alone" / name
        ).read_bytes(), name
    summaries = [
        json.loads((tmp_path / d / "summary.json").read_text()) for d in ("alone", "workers")
    ]
    for summary in summaries:
        summary.pop("profile", None)
        summary.pop("timings", None)
    assert summaries[0] == summaries[1]


@pytest.mark.parametrize("chunk_bytes", [4096, 16384])
@pytest.mark.parametrize("separator", [",\n  ", " " * 5000 + ",", "\n" + " " * 4095 + ", "])
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_cuts_found_without_reading_every_byte_are_those_of_the_whole_read(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk_bytes: int,
    separator: str,
    bom: bytes,
) -> None:
    """An uncompressed file's cuts (spans: only the end of each stretch and the start of
    the next read) are where reading every byte puts them (payloads), up to the same last
    stretch: names holding the separator's pattern (guesses, wrong alike), leading
    separators longer than what is read of a stretch's start, an element larger than a
    chunk."""
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", chunk_bytes)
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "op},{" * (i % 4),
            "pid": 1,
            "tid": 2,
            "ts": i,
            "dur": 1,
            "args": {"x": "} , {" * (i % 3)},
        }
        for i in range(2000)
    ]
    events[700]["name"] = "big" + "x" * (3 * chunk_bytes)
    body = separator.join(json.dumps(event) for event in events)
    path = tmp_path / "trace.json"
    path.write_bytes(bom + b'{"x": 1, "traceEvents": [' + body.encode() + b'], "y": 2}')
    data = path.read_bytes()

    def cuts(spans: bool) -> tuple[list[tuple[int, bytes]], int, bytes, list[int], dict[str, Any]]:
        result, splitter = kineto_stream.open_splitter(path)
        if spans:
            found = [
                (start, b"[" + data[first:stop] + b"]") for start, first, stop in splitter.spans()
            ]
        else:
            found = list(splitter.payloads())
        base, buf = splitter.base, splitter.buf
        rest = [len(chunk.events) for chunk in kineto_stream.finish(splitter)]
        return found, base, buf, rest, result.tail

    by_place, by_text = cuts(spans=True), cuts(spans=False)
    assert len(by_text[0]) > 10
    assert by_place == by_text


def test_a_file_the_workers_cannot_open_goes_to_them_through_the_pipes(
    tmp_path: Path,
    small_chunks: Seen,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where ``/proc/<pid>/fd`` is closed to the workers (a hardened container), they are sent
    the chunks' text instead: still read by the workers, not by this process alone."""
    path = gen.write_kineto(tmp_path / "t.json", _ops(6000), style="compact")
    alone = load_kineto(path)
    real = kineto_parallel.shared_file
    unopenable = tmp_path / "no_access" / "fd"  # as the workers find the main process's fd

    def closed(fd: int) -> kineto_parallel.OpenFile | None:
        found = real(fd)
        assert found is not None  # the file is shared here: the test closes it
        return kineto_parallel.OpenFile(str(unopenable), found.device, found.inode)

    raised: list[BaseException] = []
    original = kineto_parallel.read_blocks

    def watched(*args: Any) -> Any:
        try:
            return original(*args)
        except BaseException as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(kineto_parallel, "shared_file", closed)
    monkeypatch.setattr(kineto_parallel, "read_blocks", watched)
    with caplog.at_level("INFO", logger=kineto_parallel.__name__):
        parallel = load_kineto(path, workers=WORKERS)
    assert raised == []  # no fall back to the read in one process
    _assert_same(parallel, alone)
    assert parallel.events.num_rows == 6000
    # the first chunks went as places in the file; the read started again from the first
    # that could not be opened, and from there every chunk went as its text
    (switched,) = small_chunks.sent_before_again
    places = small_chunks.call_bytes[:switched]
    texts = small_chunks.call_bytes[switched:]
    assert places and max(places) < 1000
    assert len(texts) > 10 and min(texts) > kineto_stream.CHUNK_BYTES // 2
    assert small_chunks.again[0] < 100  # the first chunk, where the array begins
    (record,) = [r for r in caplog.records if "through the pipes" in r.getMessage()]
    assert str(path) in record.getMessage() and str(unopenable) in record.getMessage()


@pytest.mark.skipif(not hasattr(kineto_parallel.fcntl, "F_GETPIPE_SZ"), reason="a Linux pipe")
def test_the_pipe_the_blocks_come_back_through_is_widened_as_far_as_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's result pipe is asked for 1 MB (what a process without privileges may have
    by default); asked for more than the system allows, it gets the system's most; a pool
    without CPython's result queue is left as it is."""
    fcntl = kineto_parallel.fcntl
    assert fcntl is not None
    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    with kineto_parallel._pool(1) as pool:
        fd = pool._result_queue._reader.fileno()  # type: ignore[attr-defined]
        # read back from the pipe itself (64 KB unless widened), not from what the code says
        assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == min(1 << 20, limit)
        shrunk = kineto_parallel.widen_result_pipe(pool, 128 * 1024)
        assert shrunk == fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == 128 * 1024
        # beyond pipe-max-size: granted to a privileged process, else the system's most
        widened = kineto_parallel.widen_result_pipe(pool, 1 << 24)
        assert widened == fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) >= limit
        # the system's most unknown: the pipe stays as it is (not shrunk), unless privileged
        before = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        monkeypatch.setattr(kineto_parallel, "_pipe_max_size", lambda: 0)
        kept = kineto_parallel.widen_result_pipe(pool, 1 << 24)
        assert kept == fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) >= before
        assert pool.submit(sum, [1, 2, 3]).result() == 6  # the pool works through it

    class Elsewhere:  # no _result_queue
        pass

    assert kineto_parallel.widen_result_pipe(Elsewhere()) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a.json", "a.json.gz"])
def test_workers_started_by_the_command_line_decode_the_trace_and_stop_with_the_import(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    path = gen.write_kineto(tmp_path / name, _ops(2000))
    if name.endswith(".gz"):  # not read ahead: the import inflates it, then takes the workers
        assert not kineto_parallel.read_ahead(path, WORKERS)
    monkeypatch.setattr(import_pool, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: WORKERS)
    import_pool.prestart_for(
        ["analyze", str(path), "-o", str(tmp_path / "p")], kineto_parallel.__name__
    )
    started = import_pool._started
    assert started is not None and started[1] == WORKERS
    processes = list(started[0]._processes.values())
    assert len(processes) == WORKERS
    sent = small_chunks.sent  # the warm-up calls that started the workers
    parallel, alone = _load_both(path)
    _assert_same(parallel, alone)
    assert small_chunks.sent - sent > 10
    # taken by the import, which shut it down: no worker left
    assert import_pool._started is None
    assert processes and not any(p.is_alive() for p in processes)


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "{trace}", "--workers", "2"],
        ["analyze", "{trace}", "--dask", "local"],
        ["analyze", "{trace}", "{trace}"],
        ["analyze", "{small}.gz"],  # ten times 50 bytes: under the 1024
        ["analyze", "{trace}.txt"],
        ["diff", "{trace}"],
        ["analyze", "{small}"],
    ],
)
def test_the_command_line_starts_no_workers_where_the_import_would_not_take_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes(b" " * 2048)
    (tmp_path / "t.json.txt").write_bytes(b" " * 2048)
    small = tmp_path / "s.json"
    small.write_bytes(b" " * 10)
    (tmp_path / "s.json.gz").write_bytes(b" " * 50)
    monkeypatch.setattr(import_pool, "PARALLEL_MIN_BYTES", 1024)
    started: list[int] = []
    monkeypatch.setattr(import_pool, "prestart", lambda workers, preload: started.append(workers))
    import_pool.prestart_for([a.format(trace=trace, small=small) for a in argv], "x")
    assert started == []
    # a large trace, and a gzip one counted at ten times its size (120 bytes: 1200)
    (tmp_path / "z.json.gz").write_bytes(b" " * 120)
    for large in (trace, tmp_path / "z.json.gz"):
        started.clear()
        import_pool.prestart_for(["analyze", str(large), "-o", str(tmp_path / "p")], "x")
        assert started == [os.cpu_count()] or (os.cpu_count() or 1) < 2


def test_workers_started_for_nothing_are_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    assert import_pool.prestart(1, "json")
    pool = import_pool._started[0] if import_pool._started else None
    assert pool is not None
    pool.submit(os.getpid).result()  # started, its module loaded
    processes = list(pool._processes.values())
    import_pool.discard()
    assert import_pool._started is None
    deadline = time.monotonic() + 60  # ended: they hold no work (reaped a moment after)
    while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes and not any(p.is_alive() for p in processes)


_FORKED_OR_SPAWNED = """
import json, signal, sys, threading
import colorsys
from perfledger import import_pool

signal.signal(signal.SIGTERM, lambda *_: None)  # the command line's own handler
colorsys.MARK = 7  # what this process did to the module before the workers started
# a module whose loading starts a thread
sys.path.insert(0, sys.argv[1])
with open(sys.argv[1] + "/threaded_load.py", "w") as module:
    module.write("import threading\\n")
    module.write("threading.Thread(target=threading.Event().wait, daemon=True).start()\\n")
seen = []
for preload, running in (("colorsys", False), ("threaded_load", False), ("colorsys", True)):
    if running:  # another thread of this process: its locks would be inherited
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
    assert import_pool.prestart(1, preload)
    pool = import_pool.take(1)
    mark = pool.submit(eval, "getattr(__import__('colorsys'), 'MARK', None)").result()
    default = pool.submit(eval, "__import__('signal').getsignal(15) == 0")  # SIG_DFL
    seen.append([pool._mp_context.get_start_method(), mark, default.result()])
    pool.shutdown()
print(json.dumps(seen))
"""


def test_the_prestarted_workers_are_forked_with_the_module_loaded_where_they_can_be(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FORKED_OR_SPAWNED, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    forked = sys.platform.startswith("linux")
    # forked: the module as this process left it; spawned: loaded afresh, as where loading
    # the module started a thread or another thread runs. Either way the worker ends on
    # SIGTERM rather than running the command line's handler
    spawned = ["spawn", None, True]
    expected = [["fork", 7, True] if forked else spawned, spawned, spawned]
    assert json.loads(done.stdout) == expected


def _read_ahead_finished() -> kineto_parallel._Ahead:
    ahead = kineto_parallel._ahead
    assert ahead is not None
    ahead.done.exception(timeout=120)  # ended, however
    return ahead


def test_a_read_started_ahead_is_the_one_the_import_takes(
    tmp_path: Path, small_chunks: Seen
) -> None:
    path = gen.write_kineto(tmp_path / "a.json", _ops(2000))
    alone = load_kineto(path)
    assert kineto_parallel.read_ahead(path, WORKERS)
    _read_ahead_finished()
    sent = small_chunks.sent
    assert sent > 10  # the workers read the trace before anyone asked for it
    reported: list[tuple[int, int]] = []
    parallel = load_kineto(path, workers=WORKERS, progress=lambda *p: reported.append(p))
    _assert_same(parallel, alone)
    assert small_chunks.sent == sent  # taken as it was: not read again
    assert kineto_parallel._ahead is None
    assert reported[-1] == (path.stat().st_size,) * 2


def test_a_read_ahead_of_a_file_since_replaced_or_with_other_workers_is_not_taken(
    tmp_path: Path, small_chunks: Seen
) -> None:
    path = gen.write_kineto(tmp_path / "a.json", _ops(2000))
    assert kineto_parallel.read_ahead(path, WORKERS)
    stale = _read_ahead_finished()
    # another file under the name (same size: the inode tells them apart)
    other = gen.write_kineto(tmp_path / "b.json", [{**e, "dur": 6} for e in _ops(2000)])
    assert other.stat().st_size == path.stat().st_size
    os.replace(other, path)
    sent = small_chunks.sent
    parallel = load_kineto(path, workers=WORKERS)
    _assert_same(parallel, load_kineto(path))
    assert set(parallel.events.column("dur_ns").to_pylist()) == {6000}
    assert small_chunks.sent - sent > 10 and not stale.thread.is_alive()
    # the same file, read with another number of workers
    assert kineto_parallel.read_ahead(path, WORKERS)
    stale = _read_ahead_finished()
    sent = small_chunks.sent
    _assert_same(load_kineto(path, workers=WORKERS + 1), load_kineto(path))
    assert small_chunks.sent - sent > 10 and kineto_parallel._ahead is None


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads each read of a file ran on, from now on."""
    threads: list[str] = []
    read = kineto_parallel._read

    def counted(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return read(*args)

    monkeypatch.setattr(kineto_parallel, "_read", counted)
    return threads


def test_a_read_ahead_raises_what_the_read_would_have(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"traceEvents": 7}' + b" " * 100_000)
    with pytest.raises(kineto.TraceFormatError) as alone:
        load_kineto(path, workers=WORKERS)
    reads = _reads(monkeypatch)
    assert kineto_parallel.read_ahead(path, WORKERS)
    with pytest.raises(kineto.TraceFormatError) as ahead:
        load_kineto(path, workers=WORKERS)
    assert reads == ["kineto-read-ahead"]  # the read ahead's error, not a read of its own
    assert str(ahead.value) == str(alone.value)
    assert not kineto_parallel.read_ahead(tmp_path / "missing.json", WORKERS)


def test_a_read_ahead_that_lost_its_workers_is_answered_by_reading_in_this_process(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = gen.write_kineto(tmp_path / "a.json", _ops(2000))
    alone = load_kineto(path)
    partial: list[Any] = []

    class Partial:
        """What a read holds when its workers die (its blocks so far)."""

    def died(*args: Any) -> Any:
        held = Partial()
        partial.append(weakref.ref(held))
        raise kineto_parallel.WorkersUnavailable("a worker was killed")

    monkeypatch.setattr(kineto_parallel, "_read", died)
    assert kineto_parallel.read_ahead(path, WORKERS)
    gc.disable()  # as while a trace loads: the read's leftovers go without the collector
    try:
        with pytest.raises(kineto_parallel.WorkersUnavailable) as failed:
            kineto_parallel.read_blocks(path, WORKERS)
        assert partial[0]() is None  # let go, though its error is still held
        del failed
        assert kineto_parallel.read_ahead(path, WORKERS)
        _assert_same(load_kineto(path, workers=WORKERS), alone)  # the import's own fallback
        assert kineto_parallel._ahead is None
    finally:
        gc.enable()


def test_no_thread_for_a_read_ahead_leaves_the_read_to_the_import(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = gen.write_kineto(tmp_path / "a.json", _ops(2000))

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refused)
        assert not kineto_parallel.read_ahead(path, WORKERS)
    assert kineto_parallel._ahead is None
    kineto_parallel.discard_read_ahead()  # nothing to stop
    reads = _reads(monkeypatch)
    _assert_same(load_kineto(path, workers=WORKERS), load_kineto(path))
    assert reads == ["MainThread"]


def test_a_read_ahead_nobody_takes_is_stopped_with_its_workers_and_files(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch, spill: Path
) -> None:
    path = gen.write_kineto(tmp_path / "a.json", _ops(20_000))
    assert kineto_parallel.read_ahead(path, WORKERS)
    ahead = kineto_parallel._ahead
    assert ahead is not None
    deadline = time.monotonic() + 60
    while small_chunks.sent < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not ahead.done.done()  # stopped midway, not after its end
    kineto_parallel.discard_read_ahead()
    assert kineto_parallel._ahead is None and not ahead.thread.is_alive()
    assert isinstance(ahead.done.exception(), kineto_parallel._Abandoned)
    assert list(spill.iterdir()) == []  # its block files' folder removed
    kineto_parallel.discard_read_ahead()  # nothing left to stop


def test_the_wait_for_a_read_ahead_passes_its_progress_on_and_an_interrupt_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"[]")
    finish = threading.Event()

    def read(path: Path, workers: int, progress: Any, stop: threading.Event) -> Any:
        progress(10, 100)
        while not finish.is_set():
            if stop.is_set():
                raise kineto_parallel._Abandoned
            time.sleep(0.005)
        return "read"

    monkeypatch.setattr(kineto_parallel, "_read", read)
    monkeypatch.setattr(kineto_parallel, "_PROGRESS_EVERY_S", 0.01)
    reported: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        reported.append((done, total))
        if len(reported) == 3:
            finish.set()

    assert kineto_parallel.read_ahead(path, WORKERS)
    assert kineto_parallel.read_blocks(path, WORKERS, progress) == "read"
    assert reported[:3] == [(10, 100)] * 3
    finish.clear()

    def interrupted(done: int, total: int) -> None:
        raise KeyboardInterrupt

    assert kineto_parallel.read_ahead(path, WORKERS)
    ahead = kineto_parallel._ahead
    assert ahead is not None
    with pytest.raises(KeyboardInterrupt):
        kineto_parallel.read_blocks(path, WORKERS, interrupted)
    assert ahead.stop.is_set() and not ahead.thread.is_alive()


def test_the_command_line_reads_ahead_and_stops_the_read_when_the_run_ends_early(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfledger.__main__ import main

    path = gen.write_kineto(tmp_path / "a.json", _ops(20_000))
    monkeypatch.setattr(import_pool, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: WORKERS)
    taken: list[kineto_parallel._Ahead] = []
    original = kineto_parallel.read_ahead

    def started(trace: str, workers: int) -> bool:
        assert original(trace, workers)
        assert kineto_parallel._ahead is not None
        taken.append(kineto_parallel._ahead)
        return True

    reads: list[str] = []
    read = kineto_parallel._read

    def counted(path: Path, workers: int, progress: Any, stop: Any = None) -> Any:
        reads.append(threading.current_thread().name)
        if len(reads) > 1:  # a long read: still going when the run ends
            stop.wait(60)
        return read(path, workers, progress, stop)

    monkeypatch.setattr(kineto_parallel, "read_ahead", started)
    monkeypatch.setattr(kineto_parallel, "_read", counted)
    taken_profile = tmp_path / "p"
    assert main(["analyze", str(path), "-o", str(taken_profile), "--no-ledger"]) == 0
    # the trace read once, ahead, and that read taken
    assert reads == ["kineto-read-ahead"] and len(taken) == 1 and taken[0].done.result()
    assert (taken_profile / "summary.json").is_file()
    # the profile exists now: refused without --force, the read ahead stopped on the way out
    assert main(["analyze", str(path), "-o", str(taken_profile), "--no-ledger"]) == 2
    assert len(taken) == 2 and not taken[1].thread.is_alive()
    assert isinstance(taken[1].done.exception(), kineto_parallel._Abandoned)
    assert kineto_parallel._ahead is None and import_pool._started is None


@pytest.mark.skipif(not gunzip.fast(), reason="ISA-L has no wheel for this platform: zlib reads")
def test_a_gzip_trace_is_inflated_into_a_file_the_workers_read_and_removed_after(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch, spill: Path
) -> None:
    text = gen.document_text(_ops(2000), schemaVersion=1).encode()
    at = text.index(b'"op1000"')
    inflated: list[tuple[Path, int]] = []
    inflate_to = gunzip.inflate_to

    def seen(source: Path, target: Path, progress: Any = None) -> bool:
        done = inflate_to(source, target, progress)
        inflated.append((target, target.stat().st_size))
        return done

    monkeypatch.setattr(gunzip, "inflate_to", seen)
    # intact, and intact gzip of a damaged text: the damage is named as a one-process read
    # of the gzip file names it
    for name, data in (("clean", text), ("damaged", text[:at] + b"}}}" + text[at:])):
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(gzip.compress(data, mtime=0))
        sent = small_chunks.sent
        parallel, alone = _load_both(path)
        _assert_same(parallel, alone)
        assert inflated[-1][0].name == "inflated.json" and inflated[-1][1] == len(data)
        assert max(small_chunks.call_bytes[sent:]) < 1000  # the workers read the file
        assert list(spill.iterdir()) == []  # the inflated text went with the read
    assert alone.loss is not None and "the trace is damaged at byte" in alone.loss


def test_a_gzip_trace_without_room_for_its_text_goes_to_the_workers_through_the_pipes(
    tmp_path: Path, small_chunks: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = gen.document_text(_ops(2000), schemaVersion=1).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text, mtime=0))
    assert gunzip.inflated_size(path) == len(text)
    room = 3 * path.stat().st_size  # the blocks' files, not twice the text
    usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda where: usage(where)._replace(free=room))
    inflated: list[Path] = []
    monkeypatch.setattr(gunzip, "inflate_to", lambda *args: inflated.append(args[1]) or True)
    parallel, alone = _load_both(path)
    _assert_same(parallel, alone)
    assert inflated == []
    assert min(small_chunks.call_bytes) > kineto_stream.CHUNK_BYTES // 2
