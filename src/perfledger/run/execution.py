"""Where rank tasks run: this process, a local process pool, or a Dask cluster — same function.

The local pool is :class:`concurrent.futures.ProcessPoolExecutor` with spawned workers (a
forked child would inherit the parent's DuckDB and Arrow threads mid-flight). Dask is
``dask.distributed`` (the optional ``[cluster]`` extra): ``--dask ADDRESS`` connects to a
running scheduler, ``--dask local`` starts a LocalCluster of ``--workers`` processes for the
run. Either way the workers call :func:`perfledger.run.tasks.run_rank_task`, write their
tables where the parent can read them (the profile's staging folder: on a real cluster it
must be on a file system every worker shares with the parent) and send back small results.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Final

from perfledger.errors import PerfledgerError
from perfledger.orphans import exit_with_parent
from perfledger.run.tasks import (
    RankFailure,
    RankResult,
    RankTask,
    TaskProgress,
    run_rank_task,
)

LOCAL_DASK: Final = "local"
Progress = Callable[[int, int], None]
Outcome = RankResult | RankFailure


@dataclass(frozen=True)
class Execution:
    """How to run the rank tasks.

    Attributes:
        workers: local worker processes (0: run the tasks one after the other in this
            process; None: one per CPU core, at most one per task). With ``dask="local"``,
            the LocalCluster's worker count.
        dask: a Dask scheduler address (``tcp://host:8786``), ``"local"`` for a LocalCluster
            started for the run, or None for the local process pool.
    """

    workers: int | None = None
    dask: str | None = None

    def chunk_workers(self) -> int:
        """The local workers that decode one large trace chunk by chunk (0: this process)."""
        if self.workers is not None:
            return self.workers
        return os.cpu_count() or 1

    def worker_count(self, tasks: int) -> int:
        """The local workers used for ``tasks`` tasks."""
        if self.workers is not None:
            return max(0, min(self.workers, max(tasks, 1)))
        return max(1, min(os.cpu_count() or 1, tasks))


class Runner:
    """Runs batches of rank tasks on one executor kept open between batches."""

    def __init__(
        self,
        submit: Callable[[Sequence[RankTask], Progress | None], list[Outcome]],
        description: str,
    ) -> None:
        self._submit = submit
        self.description = description

    def run(
        self, tasks: Sequence[RankTask], progress: Progress | None = None
    ) -> tuple[list[RankResult], list[RankFailure]]:
        """Run every task: the results and the failures (ranks whose trace could not be
        read), each in task order."""
        outcomes = sorted(self._submit(tasks, progress), key=lambda o: o.index)
        return (
            [o for o in outcomes if isinstance(o, RankResult)],
            [o for o in outcomes if isinstance(o, RankFailure)],
        )


@contextlib.contextmanager
def open_runner(
    execution: Execution, task_count: int, report: TaskProgress | None = None
) -> Iterator[Runner]:
    """A :class:`Runner` for ``execution``, closed (pool or cluster shut down) on exit.

    ``report``: where tasks run in this process report their import and phases.
    """
    workers = execution.worker_count(task_count)
    if execution.dask is not None:
        with _dask_client(execution.dask, workers) as (client, description):
            yield Runner(lambda tasks, progress: _run_dask(client, tasks, progress), description)
    elif workers == 0:
        yield Runner(lambda tasks, progress: _run_inline(tasks, progress, report), "this process")
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=exit_with_parent,
            initargs=(os.getpid(),),
        ) as pool:
            yield Runner(
                lambda tasks, progress: _run_pool(pool, tasks, progress),
                f"process pool of {workers} worker{'s' if workers > 1 else ''}",
            )


def _run_inline(
    tasks: Sequence[RankTask], progress: Progress | None, report: TaskProgress | None
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for task in tasks:
        outcomes.append(run_rank_task(task, report))
        if progress is not None:
            progress(len(outcomes), len(tasks))
    return outcomes


def _run_pool(
    pool: ProcessPoolExecutor, tasks: Sequence[RankTask], progress: Progress | None
) -> list[Outcome]:
    futures = {pool.submit(run_rank_task, task): task for task in tasks}
    outcomes: list[Outcome] = []
    for future in as_completed(futures):
        try:
            outcomes.append(future.result())
        except BrokenProcessPool as error:
            raise PerfledgerError(
                f"{futures[future].path}: a worker process died while analysing it (out of "
                "memory? try fewer --workers)"
            ) from error
        if progress is not None:
            progress(len(outcomes), len(tasks))
    return outcomes


@contextlib.contextmanager
def _dask_client(address: str, workers: int) -> Iterator[tuple[Any, str]]:
    distributed = _distributed()
    if address == LOCAL_DASK:
        count = max(workers, 1)
        with (
            distributed.LocalCluster(
                n_workers=count,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            yield client, f"Dask LocalCluster of {count} worker{'s' if count > 1 else ''}"
        return
    try:
        client = distributed.Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as error:
        raise PerfledgerError(f"--dask {address}: cannot reach the scheduler ({error})") from error
    with client:
        yield client, f"Dask cluster at {address}"


def _distributed() -> Any:
    """The ``distributed`` module (untyped: held as Any), or a one-line error when missing."""
    try:
        return importlib.import_module("distributed")
    except ImportError as error:
        raise PerfledgerError(
            "--dask needs dask.distributed: pip install 'perfledger[cluster]'"
        ) from error


def _run_dask(client: Any, tasks: Sequence[RankTask], progress: Progress | None) -> list[Outcome]:
    # pure=False: a task writes files; two runs of one task must both run.
    futures = client.map(run_rank_task, list(tasks), pure=False)
    outcomes: list[Outcome] = []
    for future in _distributed().as_completed(futures):
        outcomes.append(future.result())
        if progress is not None:
            progress(len(outcomes), len(tasks))
    return outcomes
