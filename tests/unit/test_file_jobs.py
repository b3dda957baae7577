"""Files shared out among threads: each written once, the largest first, a failure or the
profile's abandonment stopping the others between two files."""

from __future__ import annotations

import threading
import time

import pytest

from perfledger.errors import PerfledgerError
from perfledger.run.file_jobs import FileJobs


def test_each_file_is_written_once_the_largest_first() -> None:
    files = FileJobs(threading.Event())
    order: list[str] = []
    for size, name in [(5, "b"), (50, "a"), (5, "c"), (0, "d"), (7, "e")]:
        files.add(size, "csv", lambda name=name: order.append(name))
    files.work()
    assert order == ["a", "e", "b", "c", "d"]  # equal sizes in the order added
    files.work()  # nothing left
    assert order == ["a", "e", "b", "c", "d"]


def test_two_threads_share_the_files_and_each_is_written_once() -> None:
    files = FileJobs(threading.Event())
    written: list[int] = []
    lock = threading.Lock()
    # the first file holds its thread until the other thread has written the rest
    rest_done = threading.Event()

    def write(index: int) -> None:
        if index == 0:
            assert rest_done.wait(10)
        with lock:
            written.append(index)
            if len(written) == 9:
                rest_done.set()

    for index in range(10):
        files.add(100 - index, "tables", lambda index=index: write(index))
    helper = threading.Thread(target=files.work)
    helper.start()
    files.work()
    helper.join()
    assert sorted(written) == list(range(10))
    assert written[-1] == 0  # the largest, begun first, ended last: the other took the rest


def test_a_failed_file_stops_the_other_threads_between_files() -> None:
    files = FileJobs(threading.Event())
    begun = threading.Event()
    failed = threading.Event()
    written: list[str] = []

    def slow() -> None:
        begun.set()
        assert failed.wait(10)
        written.append("slow")  # the file being written is finished

    def failing() -> None:
        assert begun.wait(10)
        try:
            raise OSError("disk full")
        finally:
            failed.set()

    files.add(30, "csv", slow)
    files.add(20, "csv", failing)
    files.add(10, "csv", lambda: written.append("never"))
    helper = threading.Thread(target=files.work)
    helper.start()
    with pytest.raises(OSError, match="disk full"):
        files.work()
    helper.join()
    assert written == ["slow"]


def test_an_abandoned_profile_begins_no_other_file() -> None:
    stop = threading.Event()
    files = FileJobs(stop)
    written: list[str] = []
    files.add(2, "csv", lambda: (written.append("first"), stop.set()))
    files.add(1, "csv", lambda: written.append("second"))
    with pytest.raises(PerfledgerError, match="abandoned"):
        files.work()
    assert written == ["first"]


def test_the_span_of_a_kind_runs_from_its_first_file_begun_to_its_last_written() -> None:
    files = FileJobs(threading.Event())
    files.add(3, "csv", lambda: time.sleep(0.05))
    files.add(2, "tables", lambda: time.sleep(0.05))
    files.add(1, "csv", lambda: time.sleep(0.05))
    began = time.perf_counter()
    files.work()
    ended = time.perf_counter()
    # the two csv files and the table between them: the csv span holds all three
    assert 0.15 <= files.span_s("csv") <= ended - began
    assert 0.05 <= files.span_s("tables") < files.span_s("csv")  # within it, not the whole
    assert files.span_s("tables", since=began) >= 0.10  # the table ended second
    assert files.span_s("none") == 0.0
