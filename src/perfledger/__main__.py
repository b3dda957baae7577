"""The ``perfledger`` command: one subcommand per module under :mod:`perfledger.cli`."""

from __future__ import annotations

import _thread
import argparse
import contextlib
import errno
import gc
import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from perfledger import import_pool
from perfledger.errors import PerfledgerError
from perfledger.heap import keep_freed_heap
from perfledger.interrupts import interrupts_held
from perfledger.pages import ORDINARY_PAGES_ENVIRONMENT
from perfledger.render.shown import escaped
from perfledger.version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    from perfledger.cli import analyze, diff, query, record, runs, timeline, whatif

    parser = argparse.ArgumentParser(
        prog="perfledger",
        description="Where do the milliseconds of a training or inference step go?",
    )
    parser.add_argument("--version", action="version", version=f"perfledger {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (record, analyze, query, timeline, diff, runs, whatif):
        module.add_parser(subparsers)
    return parser


# numpy's OpenBLAS starts a thread per core as it loads, and they spin a tenth of a second
# of CPU each before they sleep. Nothing here multiplies matrices: one BLAS thread, set
# before numpy loads, here and in the processes started from here (the import's workers),
# unless the user chose otherwise. Not for ``record``, whose child is the user's program,
# nor where numpy is loaded already (``main`` called inside another program).
_BLAS_THREADS: Final = {"OPENBLAS_NUM_THREADS": "1"}
_OWN_ENVIRONMENT: Final = "record"
_ONE_HEAP: Final = {"ARROW_DEFAULT_MEMORY_POOL": "system"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # answered before the subcommands' modules (numpy, Arrow, DuckDB ...) are imported:
        # what the parser's --version prints, in a tenth of the time
        print(f"perfledger {__version__}")
        return 0
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["analyze"]:
        # before the process starts any thread: the one heap holds for the threads
        # (perfledger.heap), the pool of the import's workers' among them
        keep_freed_heap()
        # Arrow's buffers from that heap too, here and in the workers, from their start
        # (perfledger.memory.holding_freed_memory), unless the user chose a pool
        for name, value in _ONE_HEAP.items():
            os.environ.setdefault(name, value)
    if arguments[:1] != [_OWN_ENVIRONMENT] and "numpy" not in sys.modules:
        # and numpy's large arrays on ordinary pages, not huge ones (perfledger.pages: several
        # times cheaper to take fresh here)
        for name, value in {**_BLAS_THREADS, **ORDINARY_PAGES_ENVIRONMENT}.items():
            os.environ.setdefault(name, value)
    _remember_missing_modules()
    try:
        with _signals_as_interrupts(), _lost_interrupts_raised_again():
            try:
                code = _command(arguments, argv)
            finally:
                # a second Ctrl-C or a SIGTERM while they stop is held, then answered as the
                # command's: the read's block files go with it
                with interrupts_held():
                    _stop_workers()
    except BrokenPipeError:
        return _reader_gone()
    except PerfledgerError as error:
        print(f"perfledger: error: {escaped(error)}", file=sys.stderr)
        return error.exit_code
    except OSError as error:
        message = _file_error(error)
        if message is None:
            return _internal_error(error)
        print(f"perfledger: error: {escaped(message)}", file=sys.stderr)
        return 2
    except Terminated:
        print("perfledger: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("perfledger: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug of ours: one line, the traceback on request
        return _internal_error(error)
    finally:
        _stop_workers()  # stopped above already, unless that was cut short
    return code


def _command(arguments: list[str], argv: Sequence[str] | None) -> int:
    """The command line's own work: load, parse, run; its exit code."""
    with interrupts_held():
        # the import's workers of one large trace start now, and read it while this process
        # loads its own libraries (stopped by the caller if the run does not take them)
        started = import_pool.prestart_for(arguments, _DECODER)
        if started is not None:
            _decoder().read_ahead(*started)
        # the subcommands' modules load here
        parser = build_parser()
    # what the imports made lives as long as the process: kept out of the collector's full
    # passes, which would walk it every time (and hold every thread meanwhile)
    gc.freeze()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    # the command line of the process (not main() called with arguments by a program that
    # goes on): the process ends with the command
    args.process_ends = argv is None
    code: int = args.run(args)
    sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    return code


# The module that reads one large Kineto trace with worker processes.
_DECODER: Final = "perfledger.sources.kineto_parallel"


def _decoder() -> Any:
    return importlib.import_module(_DECODER)


def _stop_workers() -> None:
    """Stop the trace's read started ahead and the import's workers, where nobody took them."""
    if _DECODER in sys.modules:
        _decoder().discard_read_ahead()
    import_pool.discard()


# Modules Arrow looks for on each conversion of a Python value (a scalar given to a compute
# function), that a failed import does not remember: each attempt searches the import path
# again (about 0.3 ms; hundreds of times in the analysis of a large trace).
_LOOKED_UP_ON_EACH_CALL: Final = ("dateutil",)


def _remember_missing_modules() -> None:
    """Make the imports of :data:`_LOOKED_UP_ON_EACH_CALL` that are not installed fail at
    once (None in sys.modules: the import system's own mark of a module known missing)."""
    for name in _LOOKED_UP_ON_EACH_CALL:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = None  # type: ignore[assignment]


class Terminated(KeyboardInterrupt):
    """SIGTERM received: the command stops as on Ctrl-C (its staging folders and temporary
    files removed, its workers stopped), then exits with 143."""


# The signals the command received while it ran, in order (:func:`_signals_as_interrupts`).
_received: list[int] = []


def _interrupted(signum: int, frame: object) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


def _terminated(signum: int, frame: object) -> None:
    _received.append(signum)
    raise Terminated


def _interrupt(signum: int) -> KeyboardInterrupt:
    """The exception that stops the command on ``signum``."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


# The handlers that raise the command's interrupts, and the ones each takes the place of
# (Python's own for Ctrl-C, the default for SIGTERM): a signal ignored stays ignored.
_RAISING: Final[dict[int, Callable[[int, Any], Any]]] = {
    signal.SIGINT: _interrupted,
    signal.SIGTERM: _terminated,
}
_REPLACED: Final[dict[int, Any]] = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
}


@contextlib.contextmanager
def _signals_as_interrupts() -> Iterator[None]:
    """Ctrl-C raised as KeyboardInterrupt and SIGTERM as :class:`Terminated` in the main
    thread while the command runs (where nothing else handles them), each noted; the previous
    handlers back afterwards.

    An error that follows a signal is the signal's: a library may answer the interrupt raised
    inside it with an error of its own (DuckDB's "Query interrupted" for a query cut short),
    which the command would otherwise report as an internal error of its own. A command that
    ends after a signal whose exception was lost (:func:`_lost_interrupts_raised_again`: given
    again too late, its handler gone) ends as the signal's too."""
    _received.clear()
    previous: dict[int, Any] = {}
    with contextlib.suppress(ValueError):  # not the main thread: the signals stay as they were
        for signum, handler in _RAISING.items():
            if signal.getsignal(signum) == _REPLACED[signum]:
                previous[signum] = signal.signal(signum, handler)
    try:
        yield
    except Exception:
        if _received:
            raise _interrupt(_received[0]) from None
        raise
    else:
        if _received:
            raise _interrupt(_received[0])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _lost_interrupts_raised_again() -> Iterator[None]:
    """Ctrl-C or SIGTERM whose exception was lost where its handler ran delivered again, to
    be raised where the command goes on.

    Python runs a signal's handler wherever the main thread is at that moment; inside a weakref
    callback or a finalizer (an import's module lock let go, an object's ``__del__``) the
    exception the handler raises cannot propagate: Python prints it as ignored, and the
    command would go on to its end as if never stopped. The signal is given again from another
    thread (given from here, its handler would run at once, inside this hook: lost again),
    once this thread has left the hook; lost again, it comes back here. Other lost exceptions
    are reported as before."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        kind = unraisable.exc_type
        if isinstance(kind, type) and issubclass(kind, KeyboardInterrupt):
            signum = signal.SIGTERM if issubclass(kind, Terminated) else signal.SIGINT
            if signal.getsignal(signum) is _RAISING[signum]:
                try:
                    # not threading.Thread: its start waits, and the handler would run there
                    _thread.start_new_thread(_thread.interrupt_main, (signum,))
                    return
                except RuntimeError:  # no thread to be had: said as before
                    pass
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:  # not one set meanwhile
            sys.unraisablehook = previous


# A file that cannot be read or written for reasons of the machine, not of perfledger.
_MACHINE_ERRNOS: Final = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.EFBIG,
        errno.EIO,
        errno.ENAMETOOLONG,
        errno.ELOOP,
    }
)


def _file_error(error: OSError) -> str | None:
    """The one-line message for a file the machine would not let us read or write."""
    if error.errno not in _MACHINE_ERRNOS:
        return None
    reason = error.strerror or os.strerror(error.errno or 0)
    return f"{error.filename}: {reason}" if error.filename else reason


def _reader_gone() -> int:
    """The reader of our output went away (``perfledger ... | head``): stop quietly.

    Whatever is still buffered for stdout goes to the null device, so that the interpreter's
    own flush at exit does not fail a second time.
    """
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    finally:
        os.close(null)
    return 1


def _internal_error(error: BaseException) -> int:
    if os.environ.get("PERFLEDGER_DEBUG"):
        raise error
    text = escaped(" ".join(str(error).split())[:500])
    print(
        f"perfledger: internal error: {type(error).__name__}: {text} "
        "(set PERFLEDGER_DEBUG=1 to see where)",
        file=sys.stderr,
    )
    return 3


if __name__ == "__main__":
    sys.exit(main())
