"""The Python API: ``perfledger.profile(...)`` and ``perfledger.mark_step()``.

    with perfledger.profile("prof_bs64", steps=5) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

The block's steps are cut by ``prof.step()`` (or ``perfledger.mark_step()``); at the end of the
block the profile directory is written exactly as ``perfledger record`` writes it. Under
``perfledger record`` the block records nothing itself: ``prof.step()`` marks the recorder's
steps, and the recorder writes the one profile.
"""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING

from perfledger.errors import PerfledgerError
from perfledger.record import inprocess

if TYPE_CHECKING:
    from rich.console import Console

    from perfledger.record.counters import HostSampler
    from perfledger.record.launcher import RecordOptions

# Only the standard library is imported with this module: ``perfledger.mark_step()`` runs inside
# the profiled program. The launcher side (pyarrow, rich, psutil) is imported by profile().


def mark_step() -> None:
    """End the running step and begin the next (a no-op when nothing is profiling)."""
    inprocess.mark_step()


class Profile:
    """A recording of part of this process; use :func:`profile` to make one.

    Attributes:
        path: the profile directory, once the block has ended and the analysis succeeded.
    """

    def __init__(self, output: Path | None, options: RecordOptions, console: Console) -> None:
        self.options = options
        self.output = output
        self.path: Path | None = None
        self._console = console
        self._driver: inprocess.StepDriver | None = None
        self._previous: inprocess.StepDriver | None = None
        self._sampler: HostSampler | None = None
        self._staging: Path | None = None
        self._started_ns = 0

    def __enter__(self) -> Profile:
        if inprocess.recording():
            return self  # perfledger record drives the profiler; prof.step() marks its steps
        output = self.output or Path(time.strftime("prof_%Y%m%d_%H%M%S"))
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world > 1:  # every rank writes its own profile
            output = output.with_name(f"{output.name}_rank{os.environ.get('RANK', '0')}")
        self.output = output.resolve()
        if self.output.exists() and not self.options.force:
            raise PerfledgerError(
                f"{self.output} already exists: choose another output, or pass force=True"
            )
        from perfledger.record.leftovers import claim, remove_dead_recordings, staging_name

        remove_dead_recordings(self.output.parent)
        self._staging = staging_name(self.output, os.getpid())
        self._driver = inprocess.StepDriver(
            self._staging, self.options.driver_options(), manual=True
        )
        self._previous = inprocess.set_driver(self._driver)
        from perfledger.record.counters import HostSampler

        self._sampler = HostSampler(os.getpid(), self.options.host_interval_s)
        self._sampler.start()
        self._started_ns = time.time_ns()
        self._driver.start()
        claim(self._staging)
        return self

    def step(self) -> None:
        """End the running step and begin the next."""
        if self._driver is not None:
            self._driver.mark_step()
        else:
            inprocess.mark_step()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        if self._driver is None or self._sampler is None or self._staging is None:
            return
        reason = "exit" if kind is None else inprocess.describe_exception(kind, value)
        self._driver.finish(reason)
        inprocess.set_driver(self._previous)
        samples = self._sampler.stop()
        self._driver = None
        if not self._staging.exists():
            return  # not a single step began
        from perfledger.record.launcher import analyse_staging

        try:
            result = analyse_staging(
                command=list(sys.argv),
                options=self.options,
                environ=os.environ,
                cwd=Path.cwd(),
                staging=self._staging,
                output=self.output or Path(),
                exit_code=0 if kind is None else 1,
                started_ns=self._started_ns,
                ended_ns=time.time_ns(),
                samples=samples,
                console=self._console,
                program_ended=False,
            )
        except PerfledgerError:
            if kind is None:
                raise
            return  # the block's own exception matters more than the analysis'
        self.path = result.profile


def profile(
    output: str | os.PathLike[str] | None = None,
    *,
    steps: int = 5,
    skip: int = 1,
    level: str = "default",
    label: str | None = None,
    force: bool = False,
    host_interval_ms: float = 50.0,
    interleave: bool = False,
    console: Console | None = None,
) -> Profile:
    """Profile the steps of a ``with`` block and write the profile directory ``output``.

    Args:
        output: the profile directory (default ``prof_YYYYmmdd_HHMMSS``); with several ranks
            (``WORLD_SIZE`` > 1) each rank writes ``<output>_rank<R>``.
        steps: steps recorded after the skipped ones (0: every step until the block ends).
        skip: steps run before recording starts; the last of them warms the profiler up.
        level: ``light``, ``default`` or ``full`` (see docs/record.md).
        label: a label kept in meta.json.
        force: replace an existing profile directory.
        host_interval_ms: host counter sampling period.
        interleave: follow each recorded step by an unprofiled step and a warm-up step
            (docs/record.md); by default the steps are recorded back to back.
        console: where the summary is printed (stdout by default).

    Raises:
        PerfledgerError: bad options, or ``output`` exists and ``force`` is not set.
    """
    from rich.console import Console

    from perfledger.record.launcher import RecordOptions

    options = RecordOptions(
        output=Path(output) if output is not None else None,
        label=label,
        skip=skip,
        steps=steps,
        level=level,
        host_interval_s=host_interval_ms / 1000.0,
        force=force,
        interleave=interleave,
    )
    options.driver_options()  # validate now, not at the end of the block
    if options.host_interval_s <= 0:
        raise PerfledgerError(f"profile: host_interval_ms must be > 0 (got {host_interval_ms})")
    return Profile(options.output, options, console or Console())
