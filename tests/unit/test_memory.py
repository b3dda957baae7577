"""The pool the analysis allocates Arrow buffers from, and its restoration."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfledger.memory import release_freed_memory, returning_pool


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
