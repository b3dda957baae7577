"""A pass run on a second thread beside the caller's own.

Most of an analysis pass's time on a large trace is spent in numpy and Arrow kernels, which
let go of the GIL: two independent passes on two threads overlap on two cores. The caller
takes the pass's result where it needs it (``Future.result``: the pass's error, if any,
raised there); leaving the block waits for the pass in every case, so nothing outlives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def beside(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Iterator[Future[R]]:
    """``function(*args, **kwargs)`` started on a thread of its own for the block's length."""
    with ThreadPoolExecutor(1, thread_name_prefix="beside") as pool:
        yield pool.submit(function, *args, **kwargs)
