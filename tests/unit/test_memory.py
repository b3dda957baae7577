"""The pool the analysis allocates Arrow buffers from, and its restoration."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfledger import memory
from perfledger.memory import (
    arrow_maps,
    drop_mapped_pages,
    dropping_mapped_pages,
    release_freed_memory,
    returning_pool,
    tables_within,
)


def test_tables_made_inside_come_from_the_c_heap_and_go_back_to_it() -> None:
    system = pa.system_memory_pool()
    outside = pa.default_memory_pool()
    held = system.bytes_allocated()
    numbers = pa.array(range(1_000_000), pa.int64())
    with returning_pool():
        assert pa.default_memory_pool().backend_name == "system"
        doubled = pc.multiply(numbers, 2)  # a new 8 MB buffer from the default pool
        assert system.bytes_allocated() >= held + 8_000_000
    # the previous pool is the default again; the buffer made inside stays readable
    assert pa.default_memory_pool().backend_name == outside.backend_name
    assert doubled[999_999].as_py() == 1_999_998
    del doubled
    release_freed_memory()
    assert system.bytes_allocated() == held


def test_the_previous_pool_comes_back_after_an_error() -> None:
    outside = pa.default_memory_pool().backend_name
    with pytest.raises(RuntimeError), returning_pool():
        raise RuntimeError("the analysis failed")
    assert pa.default_memory_pool().backend_name == outside


def test_blocks_of_several_threads_keep_the_c_heap_until_the_last_one_ends() -> None:
    outside = pa.default_memory_pool().backend_name
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, str] = {}

    def first() -> None:
        with returning_pool():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with returning_pool():
            second_in.set()
            first_out.wait(5)
            # the first block has ended: this one still allocates from the C heap
            seen["inside"] = pa.default_memory_pool().backend_name

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen["inside"] == "system"
    assert pa.default_memory_pool().backend_name == outside


def _resident_kb(path: Path) -> int:
    """The resident kB of this process's maps of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    smaps = Path("/proc/self/smaps").read_text(errors="surrogateescape")  # paths: any bytes
    for line in smaps.splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            inside = line.rstrip().removesuffix(" (deleted)").endswith(str(path))
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("folder", [b"plain", b"caf\xe9"], ids=["utf8", "latin1"])
def test_pages_read_of_a_mapped_table_leave_the_process_and_read_back_the_same(
    tmp_path: Path, folder: bytes
) -> None:
    # a folder whose name is not UTF-8 (a legacy Latin-1 path) appears as such in the maps
    texts = pa.array([f"{i:07d}" * 40 for i in range(50_000)])  # 14 MB of text
    (tmp_path / os.fsdecode(folder)).mkdir()
    path = tmp_path / os.fsdecode(folder) / "texts.arrow"
    # Python's file and map objects: Arrow's take only UTF-8 paths
    with path.open("wb") as sink, pa.ipc.new_file(sink, pa.schema([("t", texts.type)])) as w:
        w.write_table(pa.table({"t": texts}))
    with path.open("rb") as file:
        view = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
    mapped = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(view))).read_all()
    assert pc.sum(pc.utf8_length(mapped["t"])).as_py() == 50_000 * 280  # every page read
    assert _resident_kb(path) >= 13_000
    drop_mapped_pages(mapped)
    assert _resident_kb(path) < 1_000
    assert mapped["t"].equals(pa.chunked_array([texts]))  # the same bytes, read again
    assert _resident_kb(path) >= 13_000


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
def test_a_table_read_whole_inside_the_block_keeps_no_page_after_it(tmp_path: Path) -> None:
    texts = pa.array([f"{i:07d}" * 40 for i in range(50_000)])
    path = tmp_path / "texts.arrow"
    with (
        pa.OSFile(str(path), "wb") as sink,
        pa.ipc.new_file(sink, pa.schema([("t", texts.type)])) as w,
    ):
        w.write_table(pa.table({"t": texts}))
    with pa.memory_map(str(path), "r") as source:
        mapped = pa.ipc.open_file(source).read_all()
    with dropping_mapped_pages(mapped, every_s=0.001):
        for _ in range(3):  # read while pages are let go under the reader
            assert mapped["t"].equals(pa.chunked_array([texts]))
    assert _resident_kb(path) < 1_000


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
def test_the_pages_of_several_tables_leave_at_once(tmp_path: Path) -> None:
    texts = pa.array([f"{i:07d}" * 40 for i in range(50_000)])
    paths = [tmp_path / "one.arrow", tmp_path / "other.arrow"]
    tables = []
    for path in paths:
        with (
            pa.OSFile(str(path), "wb") as sink,
            pa.ipc.new_file(sink, pa.schema([("t", texts.type)])) as w,
        ):
            w.write_table(pa.table({"t": texts}))
        with pa.memory_map(str(path), "r") as source:
            tables.append(pa.ipc.open_file(source).read_all())
    for table in tables:
        assert table["t"].equals(pa.chunked_array([texts]))
    assert all(_resident_kb(path) >= 13_000 for path in paths)
    with dropping_mapped_pages(tables[0], None, tables[1], every_s=0.001):
        assert tables[1]["t"].equals(pa.chunked_array([texts]))
    assert all(_resident_kb(path) < 1_000 for path in paths)
    for table in tables:
        assert table["t"].equals(pa.chunked_array([texts]))
    drop_mapped_pages(*tables)
    assert all(_resident_kb(path) < 1_000 for path in paths)
    # the tables a result holds, found in it
    held = {"first": (tables[0], [1, "text"]), "second": {"deep": tables[1]}}
    assert {id(t) for t in tables_within(held)} == {id(t) for t in tables}
    assert tables_within(held, depth=1) == []
    for table in tables:
        assert table["t"].equals(pa.chunked_array([texts]))
    assert all(_resident_kb(path) >= 13_000 for path in paths)
    drop_mapped_pages(*tables_within(held))
    assert all(_resident_kb(path) < 1_000 for path in paths)


def test_a_table_in_the_heap_is_left_as_it_is() -> None:
    numbers = pa.array(np.arange(2_000_000, dtype=np.int64))
    table = pa.table({"n": numbers, "d": pa.array(["a", "b"] * 1_000_000).dictionary_encode()})
    drop_mapped_pages(table)
    assert np.array_equal(np.asarray(table["n"]), np.arange(2_000_000))
    assert table["d"].to_pylist()[:3] == ["a", "b", "a"]


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
def test_maps_read_once_let_go_of_each_table_in_turn(tmp_path: Path) -> None:
    # a pass that lets go column after column reads the maps once: each call lets go of
    # its table's pages only, and a file mapped after the maps were read is not in them
    texts = pa.array([f"{i:07d}" * 40 for i in range(50_000)])
    paths = [tmp_path / f"{name}.arrow" for name in ("one", "other", "later")]
    for path in paths:
        with (
            pa.OSFile(str(path), "wb") as sink,
            pa.ipc.new_file(sink, pa.schema([("t", texts.type)])) as w,
        ):
            w.write_table(pa.table({"t": texts}))

    def mapped(path: Path) -> pa.Table:
        with pa.memory_map(str(path), "r") as source:
            table = pa.ipc.open_file(source).read_all()
        assert table["t"].equals(pa.chunked_array([texts]))
        return table

    one, other = mapped(paths[0]), mapped(paths[1])
    maps = arrow_maps()
    assert maps is not None
    later = mapped(paths[2])
    assert all(_resident_kb(path) >= 13_000 for path in paths)
    drop_mapped_pages(one, maps=maps)
    assert _resident_kb(paths[0]) < 1_000
    assert _resident_kb(paths[1]) >= 13_000
    drop_mapped_pages(other, later, maps=maps)
    assert _resident_kb(paths[1]) < 1_000
    assert _resident_kb(paths[2]) >= 13_000  # not among the maps read before it was mapped
    for table in (one, other, later):
        assert table["t"].equals(pa.chunked_array([texts]))


def test_the_maps_chosen_are_the_read_only_maps_of_arrow_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lines as /proc/self/maps writes them: only read-only maps whose path ends in .arrow
    # (a removed file's too) are chosen, in address order
    lines = [
        "7f0000003000-7f0000004000 r--p 00000000 fd:01 12 /work/p/events.arrow (deleted)",
        "55d1c0000000-55d1c0021000 rw-p 00000000 00:00 0                          [heap]",
        "7f0000001000-7f0000002000 r--s 00001000 fd:01 11 /work/p/a b/events-text.arrow",
        "7f0000005000-7f0000006000 rw-p 00000000 fd:01 13 /work/p/written.arrow",
        "7f0000007000-7f0000008000 r-xp 00000000 fd:01 14 /usr/lib/libarrow.so.2600",
        "7f0000009000-7f000000a000 r--p 00000000 fd:01 15 /work/p/events.arrow.tmp",
        "7f000000b000-7f000000c000 r--p 00000000 00:00 0 ",
        "7f000000d000-7f000000e000 r--p 00002000 fd:01 16 /work/arrow",
        "7f000000f000-7f0000010000 r--p 00000000 fd:01 17 /work/p/x.arrow",
    ]
    maps_file = tmp_path / "maps"
    maps_file.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(memory, "_MAPS", maps_file)
    assert memory._arrow_maps() == [
        (0x7F0000001000, 0x7F0000002000),
        (0x7F0000003000, 0x7F0000004000),
        (0x7F000000F000, 0x7F0000010000),
    ]


# In a child process (the heap's settings and its resident pages are the whole process's):
# 256 MB freed inside the block stays resident through release_freed_memory, and goes back to
# the system once the block ends; without the block the hand-back is at once.
_HOLDING_CHILD = """
import sys
from perfledger.heap import keep_freed_heap
keep_freed_heap()
import numpy as np
import pyarrow as pa
from perfledger.memory import holding_freed_memory, release_freed_memory
def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 // 2**20
def freed_then_released():
    block = np.ones(32 << 20)  # 256 MB, every page touched
    del block
    release_freed_memory()
    return resident_mb()
before = resident_mb()
if sys.argv[1] in ("hold", "keep"):
    with holding_freed_memory(release=sys.argv[1] == "hold"):
        pool = pa.default_memory_pool().backend_name
        inside = freed_then_released()
    print(pool, inside - before, resident_mb() - before)
elif sys.argv[1] == "threads":
    import threading
    entered, leave = threading.Event(), threading.Event()
    def other():
        with holding_freed_memory():
            entered.set()
            leave.wait(30)
    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(30)
    with holding_freed_memory():
        pass
    inside = freed_then_released()
    leave.set()
    thread.join(30)
    print("-", inside - before, resident_mb() - before)
else:
    print("-", freed_then_released() - before, resident_mb() - before)
"""


def _holding_child(mode: str) -> tuple[str, int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _HOLDING_CHILD, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1]), int(out[2])


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_freed_memory_is_held_inside_the_block_and_handed_back_after_it() -> None:
    pool, inside, after = _holding_child("hold")
    assert pool == "system"  # Arrow's buffers from the C heap meanwhile
    assert inside >= 200  # the 256 MB freed stay resident for the next phase
    assert after < 50  # handed back when the block ends
    _, released, _ = _holding_child("release")
    assert released < 50  # outside the block: handed back at once


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_a_process_that_ends_with_the_block_keeps_its_freed_memory_to_the_end() -> None:
    pool, inside, after = _holding_child("keep")
    assert inside >= 200
    assert after >= 200  # nothing handed back: the system takes it all at the exit


def test_a_block_another_thread_is_in_keeps_the_memory_held() -> None:
    pool, inside, after = _holding_child("threads")
    assert inside >= 200  # this thread's block ended; the other thread's still holds
    assert after < 50  # handed back when the last block ends


def test_values_let_go_beside_are_freed_on_their_own_thread(tmp_path: Path) -> None:
    # a map of a removed file, as a trace's blocks hold them: unmapped where it is freed
    path = tmp_path / "block"
    path.write_bytes(b"x" * mmap.PAGESIZE * 4)
    with open(path, "rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    path.unlink()
    freed_on: list[str] = []

    class Holder:
        def __init__(self, value: object) -> None:
            self.value = value

        def __del__(self) -> None:
            freed_on.append(threading.current_thread().name)

    held: list[object] = [Holder(np.frombuffer(mapped, np.uint8))]
    del mapped
    thread = memory.let_go_beside(held)
    thread.join(10)
    assert not thread.is_alive()
    assert held == []
    assert freed_on == [thread.name]
    assert freed_on != [threading.current_thread().name]
