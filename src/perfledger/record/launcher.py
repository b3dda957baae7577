"""The launcher: run a program under the profiler, sample its host, then analyse what it left.

The program runs as a child process with our bootstrap first on ``PYTHONPATH``, so every Python
worker it starts (``python script.py``, ``python -m``, torchrun's workers) arms the step driver
when it imports torch. The child stays in our process group, so a Ctrl-C at the terminal reaches
it exactly as it would without us; signals sent to the launcher alone (``kill``) are forwarded.
When the program ends, in any way, the staged traces are analysed into the profile directory
and the program's own exit code is returned.

The program does not outlive the launcher (see :mod:`perfledger.record.lifeline`): a launcher
killed with ``kill -9`` takes the program with it, and the staging folder it leaves is removed
by the next recording into the same folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.markup import escape

from perfledger.errors import PerfledgerError
from perfledger.pages import ordinary_pages
from perfledger.profiledir import StoredProfile
from perfledger.profiledir.writer import check_target
from perfledger.record import inprocess
from perfledger.record.bootstrap import BOOTSTRAP_DIR
from perfledger.record.counters import HostSampler, HostSamples, counters_table
from perfledger.record.inprocess import TRACE_PREFIX, TRACE_SUFFIX
from perfledger.record.leftovers import claim, keep, remove_dead_recordings, staging_name
from perfledger.record.lifeline import ENV_LAUNCHER, identity, parent_death_signal
from perfledger.record.metadata import run_meta
from perfledger.record.staging import (
    ProcessRecord,
    finish_traces,
    incomplete_recorded_step,
    keep_profiler_log,
    read_staging,
    step_times_table,
)

# Signals a user or a scheduler sends to stop or poke a job: passed on to the program.
FORWARDED_SIGNALS: Final = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
EXIT_COMMAND_NOT_FOUND: Final = 127
EXIT_COMMAND_NOT_EXECUTABLE: Final = 126


@dataclass(frozen=True)
class RecordOptions:
    """The options of ``perfledger record`` (see docs/record.md)."""

    output: Path | None = None
    label: str | None = None
    skip: int = 2
    steps: int = 5
    level: str = "default"
    host_interval_s: float = 0.05
    force: bool = False
    flush_steps: int = 1
    # each recorded step followed by an unprofiled one: the overhead compares like with like
    interleave: bool = False

    def driver_options(self) -> inprocess.DriverOptions:
        """The in-process part; PerfledgerError for bad values."""
        try:
            return inprocess.DriverOptions(
                skip=self.skip,
                steps=self.steps,
                level=self.level,
                flush_steps=self.flush_steps,
                interleave=self.interleave,
            )
        except ValueError as error:
            raise PerfledgerError(f"record: {error}") from error


@dataclass(frozen=True)
class RecordResult:
    """How a recording ended.

    Attributes:
        exit_code: the program's exit code (128 + N when it died of signal N).
        profile: the profile directory written, or None.
        kept_staging: the raw traces and step logs, kept when they could not be analysed.
        processes: the profiled processes, from their step logs.
        stored: the profile as written (its documents in memory), or None.
    """

    exit_code: int
    profile: Path | None
    kept_staging: Path | None
    processes: tuple[ProcessRecord, ...]
    stored: StoredProfile | None = None


def child_environment(
    environ: Mapping[str, str], staging: Path, options: inprocess.DriverOptions
) -> dict[str, str]:
    """The program's environment: ours plus the bootstrap, the driver's settings and who the
    launcher is (the program's processes end when it does)."""
    env = dict(environ)
    python_path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP_DIR), python_path) if p)
    env[inprocess.ENV_STAGING] = str(staging)
    env[inprocess.ENV_OPTIONS] = options.to_json()
    env["PERFLEDGER_HOME"] = str(Path(__file__).resolve().parents[2])
    launcher = identity(os.getpid())
    if launcher is not None:
        env[ENV_LAUNCHER] = launcher
    return env


def exit_code_of(returncode: int) -> int:
    """A shell's exit code for a child's return code (death by signal N gives 128 + N)."""
    return returncode if returncode >= 0 else 128 - returncode


def program_ending(returncode: int) -> str:
    """How the program ended, in words: its exit code, or the signal that killed it."""
    if returncode >= 0:
        return f"program exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"program killed by {name} (exit code {exit_code_of(returncode)})"


def record(
    command: Sequence[str],
    options: RecordOptions,
    *,
    console: Console | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> RecordResult:
    """Run ``command`` under the profiler and analyse it into a profile directory.

    Raises:
        PerfledgerError: no command, bad options, an existing output without ``force``, or a
            command that cannot be started (exit code 127/126).
    """
    console = console or Console()
    if not command:
        raise PerfledgerError(
            "record: no program given: put it after --, e.g. perfledger record -- python train.py"
        )
    if options.host_interval_s <= 0:
        raise PerfledgerError(
            f"record: --host-interval must be > 0 (got {options.host_interval_s})"
        )
    if os.name != "posix":
        raise PerfledgerError("record: only POSIX systems are supported")
    driver_options = options.driver_options()
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    output = options.output or Path(time.strftime("prof_%Y%m%d_%H%M%S"))
    output = output if output.is_absolute() else cwd / output
    # Refused before the program runs, not after an hour of training.
    check_target(output, force=options.force)
    output.parent.mkdir(parents=True, exist_ok=True)
    dead = remove_dead_recordings(output.parent)
    if dead:
        _say(console, f"removed the staging folders of recordings that died: {_names(dead)}")
    staging = staging_name(output, os.getpid())
    if staging.exists():  # an older process of our pid left it
        shutil.rmtree(staging)
    try:
        # a Ctrl-C from the folder's making to its claim leaves no folder behind (one without
        # its owner file is never removed)
        staging.mkdir(parents=True)
        claim(staging)
        _say(
            console,
            f"{' '.join(command)}  (skip {driver_options.skip}, "
            f"steps {driver_options.steps or 'all'}"
            f"{', interleaved' if driver_options.interleave else ''}, "
            f"level {driver_options.level})",
            "[bold]perfledger record[/]: ",
        )
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    started_ns = time.time_ns()
    try:
        returncode, samples = _run_program(
            command,
            child_environment(environ, staging, driver_options),
            cwd,
            options.host_interval_s,
        )
    except PerfledgerError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    exit_code = exit_code_of(returncode)
    ended_ns = time.time_ns()
    return analyse_staging(
        command=command,
        options=options,
        environ=environ,
        cwd=cwd,
        staging=staging,
        output=output,
        exit_code=exit_code,
        started_ns=started_ns,
        ended_ns=ended_ns,
        samples=samples,
        console=console,
        ending=program_ending(returncode),
    )


def analyse_staging(
    *,
    command: Sequence[str],
    options: RecordOptions,
    environ: Mapping[str, str],
    cwd: Path,
    staging: Path,
    output: Path,
    exit_code: int,
    started_ns: int,
    ended_ns: int,
    samples: HostSamples,
    console: Console,
    program_ended: bool = True,
    ending: str | None = None,
) -> RecordResult:
    """Turn a staging directory into the profile ``output``; remove it unless analysis failed.

    Used by the launcher after the program ended (``ending``: how, in words), and by the Python
    API at the end of its block (``program_ended=False``).
    """
    processes = read_staging(staging)
    steps = sum(len(p.steps) for p in processes)
    profiled = sum(s.profiled for p in processes for s in p.steps)
    kept = sum(p.kept_steps for p in processes)
    abrupt = any(p.end is None for p in processes)
    ended = ", ".join(sorted({f"rank {p.rank}: {_end_in_words(p)}" for p in processes}))
    _say(
        console,
        (f"{ending or f'program exited with code {exit_code}'}: " if program_ended else "")
        + f"{steps} steps, {profiled} profiled"
        + (f", {kept} kept" if kept != profiled or abrupt else "")
        + (f" ({ended})" if ended and program_ended else ""),
    )
    try:
        processes = _finish_traces(processes)
    except PerfledgerError as error:
        _say(console, str(error), "[red]analysis failed[/]: ")
        _keep(staging)
        _say(console, f"raw traces and step logs kept in {staging}")
        return RecordResult(exit_code or error.exit_code, None, staging, processes)
    traces = [trace for process in processes for trace in process.traces]
    if not traces:
        shutil.rmtree(staging, ignore_errors=True)
        if not processes and program_ended and exit_code:
            why = (
                f"the program failed to start or exited before its first step (exit code "
                f"{exit_code}; its own messages above say why)"
            )
        elif not processes:
            why = (
                "no step mark was found: the program "
                + (f"ended (exit code {exit_code}) " if program_ended else "block ended ")
                + "without a step (steps come from Optimizer.step, DataLoader batches or "
                "perfledger.mark_step(), in a Python process that imports torch)"
            )
        elif profiled:
            why = (
                "steps were recorded but no trace was written (the program was killed before "
                "its first profiled steps were written out)"
            )
        else:
            why = (
                f"the program ended after {steps} step{'s' if steps != 1 else ''}, before the "
                f"first profiled one (--skip {options.skip})"
                + (f"; exit code {exit_code}" if program_ended and exit_code else "")
            )
        _say(console, f"{why}; nothing written", "[yellow]no step was profiled[/]: ")
        return RecordResult(exit_code, None, None, processes)

    sampler_cpu = samples.sample_cpu_ns / max(samples.sample_count, 1)
    meta = run_meta(
        command=command,
        cwd=cwd,
        environ=environ,
        options={
            **asdict(options.driver_options()),
            "host_interval_s": options.host_interval_s,
        },
        label=options.label,
        processes=processes,
        exit_code=exit_code,
        started_ns=started_ns,
        ended_ns=ended_ns,
        sampler={
            "interval_s": options.host_interval_s,
            "samples": samples.sample_count,
            "mean_sample_cpu_us": round(sampler_cpu / 1e3, 1),
        },
    )
    counters = counters_table(samples, {p.rank: p.pid for p in processes})
    try:
        stored = _build_profile(
            traces,
            output,
            force=options.force,
            meta=meta,
            counters=counters,
            step_times=step_times_table(processes),
            console=console,
        )
    except PerfledgerError as error:
        _say(console, str(error), "[red]analysis failed[/]: ")
        _keep(staging)
        _say(console, f"raw traces and step logs kept in {staging}")
        return RecordResult(exit_code or error.exit_code, None, staging, processes)
    except KeyboardInterrupt:
        _keep(staging)
        _say(console, f"analysis interrupted: raw traces kept in {staging}")
        return RecordResult(exit_code or 130, None, staging, processes)
    except Exception:
        _keep(staging)
        _say(console, f"raw traces kept in {staging}", "[red]analysis failed[/]: ")
        raise
    keep_profiler_log(staging, stored.path)
    shutil.rmtree(staging, ignore_errors=True)
    _say(console, f"profile: {stored.path}")
    return RecordResult(exit_code, stored.path, None, processes, stored)


def _say(console: Console, text: str, styled_prefix: str = "") -> None:
    """Print one status line: ``text`` comes from the program (paths, exception messages) and
    is never read as markup, nor wrapped (paths stay copyable)."""
    console.print(styled_prefix + escape(text), highlight=False, soft_wrap=True)


def _finish_traces(processes: Sequence[ProcessRecord]) -> tuple[ProcessRecord, ...]:
    """Join each process's trace chunks into ``rank<R>.json.gz`` (``rank<R>-<pid>.json.gz``
    when an earlier process took that rank); the processes with their finished traces."""
    finished: list[ProcessRecord] = []
    taken: set[str] = set()
    for process in processes:
        chunks = [chunk for chunk in process.traces if chunk.exists()]
        if not chunks:
            finished.append(replace(process, traces=()))
            continue
        name = f"{TRACE_PREFIX}{process.rank}{TRACE_SUFFIX}.gz"
        if name in taken:  # two processes claim the same rank
            name = f"{TRACE_PREFIX}{process.rank}-{process.pid}{TRACE_SUFFIX}.gz"
        taken.add(name)
        trace = finish_traces(
            chunks,
            process.log.with_name(name),
            incomplete_step=incomplete_recorded_step(process),
        )
        finished.append(replace(process, traces=(trace,)))
    return tuple(finished)


def _keep(staging: Path) -> None:
    # Left for the user to look into: the next recording must not take it for a dead one's.
    with suppress(OSError):
        keep(staging)


def _end_in_words(process: ProcessRecord) -> str:
    # No end record: the process ran no exit handler at all.
    return _shorten(process.end_reason) if process.end else "killed or os._exit"


def _names(paths: Sequence[Path]) -> str:
    return ", ".join(path.name for path in paths)


def _shorten(text: str, limit: int = 100) -> str:
    first_line = text.splitlines()[0] if text else text
    return first_line if len(first_line) <= limit else first_line[: limit - 3] + "..."


def _build_profile(traces: Sequence[Path], output: Path, **kwargs: Any) -> StoredProfile:
    try:
        from perfledger.run.pipeline import build_profile
    except ImportError as error:
        raise PerfledgerError(f"the analysis pipeline is not available ({error})") from error
    # the program's environment is not ours to change: numpy's pages set in this process
    ordinary_pages()
    return build_profile(traces, output, **kwargs).stored


def _run_program(
    command: Sequence[str], env: Mapping[str, str], cwd: Path, host_interval_s: float
) -> tuple[int, HostSamples]:
    """Start the program, sample its host and pass signals on until it ends."""
    waiter = _SignalWaiter()
    # The kernel kills the program when the launcher dies; armed from this (the main) thread,
    # which lives as long as the launcher.
    die_with_launcher = parent_death_signal()

    def in_child() -> None:
        waiter.unblock_in_child()
        die_with_launcher()

    with waiter.blocking():
        try:
            child = subprocess.Popen(list(command), env=dict(env), cwd=cwd, preexec_fn=in_child)
        except FileNotFoundError as error:
            raise PerfledgerError(
                f"record: cannot run {command[0]!r}: command not found", EXIT_COMMAND_NOT_FOUND
            ) from error
        except PermissionError as error:
            raise PerfledgerError(
                f"record: cannot run {command[0]!r}: permission denied",
                EXIT_COMMAND_NOT_EXECUTABLE,
            ) from error
        # Started after the fork, so the sampling thread inherits the blocked signals and
        # never runs a handler.
        sampler = HostSampler(child.pid, host_interval_s)
        sampler.start()
        try:
            returncode = waiter.wait(child, forward=lambda signum: _forward(child, signum))
        finally:
            samples = sampler.stop()
    return returncode, samples


def _forward(child: subprocess.Popen[bytes], signum: int) -> None:
    if child.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(child.pid, signum)


class _SignalWaiter:
    """Waits for the child while taking the forwarded signals synchronously.

    The signals are blocked in the launcher and read with ``sigtimedwait``, which tells who sent
    them: a signal the terminal sent (Ctrl-C, Ctrl-\\) went to the whole foreground process group,
    the program included, and is not sent again; one sent to the launcher alone is forwarded.
    Where ``sigtimedwait`` is missing, Python handlers forward every signal.
    """

    # si_code > 0 means the kernel generated the signal (SI_KERNEL: a terminal's Ctrl-C);
    # kill(2), tgkill(2) and sigqueue(3) give SI_USER (0) or negative codes.
    def __init__(self) -> None:
        self._synchronous = hasattr(signal, "sigtimedwait") and sys.platform.startswith("linux")
        self._waited = {*FORWARDED_SIGNALS, signal.SIGCHLD}

    @contextmanager
    def blocking(self) -> Iterator[None]:
        if not self._synchronous:
            yield
            return
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, self._waited)
        try:
            yield
        finally:
            # The program has ended: signals sent meanwhile were meant for it, drop them
            # rather than interrupt the analysis that follows.
            while signal.sigtimedwait(self._waited, 0) is not None:
                pass
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def unblock_in_child(self) -> None:
        if self._synchronous:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self._waited)

    def wait(self, child: subprocess.Popen[bytes], forward: Callable[[int], None]) -> int:
        if not self._synchronous:
            return self._wait_with_handlers(child, forward)
        while True:
            info = signal.sigtimedwait(self._waited, 1.0)
            returncode = child.poll()
            if returncode is not None:
                return returncode
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code <= 0:
                forward(info.si_signo)

    @staticmethod
    def _wait_with_handlers(child: subprocess.Popen[bytes], forward: Callable[[int], None]) -> int:
        previous = {signum: signal.getsignal(signum) for signum in FORWARDED_SIGNALS}
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, lambda received, _frame: forward(received))
        try:
            return child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
