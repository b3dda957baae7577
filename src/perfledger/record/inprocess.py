"""The in-process driver: cuts a Python program into steps and drives ``torch.profiler`` over them.

It runs inside the profiled program (started by the bootstrap's ``sitecustomize`` or by the Python
API), so it imports only the standard library, and torch only once the program has imported it.

Steps come, in order of precedence, from explicit marks (:func:`mark_step`, ``prof.step()``),
from ``Optimizer.step`` (a training step ends when the outermost step of the first optimizer
returns; the next begins right after), or from DataLoader batches (a new step begins when a batch
is fetched from an iterator that already gave one in the current step and no backward pass ran).
Every step's wall time is appended to a JSON-lines step log as it ends, whether it is profiled or
not; the profiler itself runs only over the ``--skip``/``--steps`` window, through torch's own
schedule, so the trace carries torch's ``ProfilerStep#N`` annotations (N counts from 0).

The trace is written as the window goes, a chunk of ``flush_steps`` recorded steps at a time, to
its own file (``trace-<pid>-<n>.json``, through a partial name): a program that is killed or
calls ``os._exit`` keeps every chunk it finished. The launcher joins the chunks into one trace.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

from perfledger.model.clock import CLOCK_KEY
from perfledger.record import lifeline
from perfledger.record.device_steps import DeviceSteps
from perfledger.record.schedule import (
    ACTION_NONE,
    ACTION_RECORD,
    ACTION_SAVE,
    ACTION_WARMUP,
    ENV_OPTIONS,
    LEVELS,
    RECORDED_ACTIONS,
    DriverOptions,
    planned_action,
    window_ends,
)
from perfledger.record.stderr import stderr_into

ENV_STAGING: Final = "PERFLEDGER_STAGING"
__all__ = [
    "ACTION_NONE",
    "ACTION_RECORD",
    "ACTION_SAVE",
    "ACTION_WARMUP",
    "ENV_OPTIONS",
    "ENV_STAGING",
    "LEVELS",
    "RECORDED_ACTIONS",
    "DriverOptions",
    "StepDriver",
    "mark_step",
    "planned_action",
    "window_ends",
]

STEP_LOG_PREFIX: Final = "steps-"
STEP_LOG_SUFFIX: Final = ".jsonl"
TRACE_PREFIX: Final = "rank"
TRACE_SUFFIX: Final = ".json"
CHUNK_PREFIX: Final = "trace-"  # trace-<pid>-<n>.json: the n-th chunk of a process's trace
# profiler-<pid>.log: what the profiler library printed during its transitions (Kineto's
# "USDT: profiler_start" and "STAGE:" lines), kept out of the program's terminal.
PROFILER_LOG_PREFIX: Final = "profiler-"
PROFILER_LOG_SUFFIX: Final = ".log"


class StepLog:
    """An append-only JSON-lines file, one record per line.

    Each record is written by a single ``write`` call on an ``O_APPEND`` descriptor, so a process
    killed at any point leaves every earlier record whole (at worst the last line is cut, and the
    reader drops it).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record."""
        if self._fd is None:
            return
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        os.write(self._fd, line.encode())

    def close(self) -> None:
        """Close the file; later appends are dropped."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def distributed_info() -> dict[str, Any]:
    """Rank, local rank, world size and backend, from torch.distributed or the launcher's env."""
    info: dict[str, Any] = {}
    for key, var in (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE")):
        value = os.environ.get(var, "")
        info[key] = int(value) if value.isdigit() else None
    dist = _loaded_module("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            info["rank"] = int(dist.get_rank())
            info["world_size"] = int(dist.get_world_size())
            info["backend"] = str(dist.get_backend())
    except Exception:  # a half-initialised process group: the environment is all we know
        pass
    return info


def torch_info() -> dict[str, Any]:
    """Torch, CUDA/HIP versions and the properties of the devices this process initialised."""
    torch = _loaded_module("torch")
    if torch is None:
        return {}
    info: dict[str, Any] = {
        "torch": str(torch.__version__),
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "num_threads": int(torch.get_num_threads()),
        "devices": [],
    }
    try:
        # Querying properties would create a CUDA context in a process that has none: only
        # describe devices the program already initialised.
        if torch.cuda.is_initialized():
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                info["devices"].append(
                    {
                        "index": index,
                        "name": props.name,
                        "total_memory": int(props.total_memory),
                        "capability": f"{props.major}.{props.minor}",
                        "multi_processor_count": int(props.multi_processor_count),
                    }
                )
    except Exception as error:  # a broken driver must not cost the trace
        info["devices_error"] = str(error)
    return info


def describe_exception(kind: type[BaseException], value: BaseException | None) -> str:
    """``exception Kind: message`` as a step log's end reason (bounded length)."""
    message = str(value) if value is not None else ""
    return (f"exception {kind.__name__}" + (f": {message}" if message else ""))[:500]


def clock_identity() -> str | None:
    """This machine's clock as the traces it records name it (:data:`CLOCK_KEY`): its Linux
    boot id, the same for every process of one boot and different on every other machine or
    boot, and the host's name; None where there is no boot id."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    return json.dumps({"boot_id": boot, "host": socket.gethostname()}) if boot else None


def _loaded_module(name: str) -> Any:
    """The module if the program has imported it, else None (never imports it ourselves)."""
    return sys.modules.get(name)


class StepDriver:
    """Cuts one process's run into steps, logs every step and profiles the planned window.

    Args:
        staging: the directory receiving the step log and the trace.
        options: the profiled window and level.
        manual: only explicit marks cut steps (the Python API); otherwise optimizer steps and
            DataLoader batches do too, until the first explicit mark.
        profiler_factory: makes the (unstarted) scheduled profiler from the options and the
            trace-ready callback; ``torch.profiler`` by default.
    """

    def __init__(
        self,
        staging: Path,
        options: DriverOptions,
        *,
        manual: bool = False,
        profiler_factory: Callable[[DriverOptions, Callable[[Any], None]], Any] | None = None,
    ) -> None:
        self.staging = staging
        self.options = options
        self._profiler_factory = profiler_factory or make_torch_profiler
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._started = False
        self._finished = False
        self._manual = manual
        self._training = False
        self._optimizer_key: int | None = None
        self._fetched: set[int] = set()
        self._backward_seen = False
        self._step = 0
        self._action = ACTION_NONE
        self._step_start_ns = 0
        self._profiler: Any = None
        self._log: StepLog | None = None
        self._pending_signal: int | None = None
        self._end_reason = "exit"
        self._previous_excepthook = sys.excepthook
        self._signals: list[tuple[int, Any]] = []
        self._device = DeviceSteps()
        self._clock = clock_identity()
        self.trace_files: list[Path] = []

    # -- step signals ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether the first step has begun."""
        return self._started

    @property
    def step(self) -> int:
        """The number of the step running now."""
        return self._step

    def note_backward(self) -> None:
        """A backward pass ran: the current step is a training step, batches do not cut it."""
        self._backward_seen = True

    def on_batch(self, iterator_id: int) -> None:
        """A DataLoader iterator is about to fetch a batch."""
        if self._manual or self._training or self._finished:
            return
        with self._locked():
            if self._finished:
                return
            if not self._started:
                self._begin()
            elif iterator_id in self._fetched and not self._backward_seen:
                self._cut()
            self._fetched.add(iterator_id)

    def on_optimizer_step(self, optimizer: object) -> None:
        """An outermost ``Optimizer.step`` returned."""
        if self._manual or self._finished:
            return
        key = id(optimizer)
        if self._optimizer_key is None:
            # The first optimizer to step defines the step; others (a GAN's second one) run
            # inside it.
            self._optimizer_key = key
            self._training = True
        elif key != self._optimizer_key:
            return
        with self._locked():
            self._boundary()

    def mark_step(self) -> None:
        """An explicit step boundary: ends the running step and begins the next."""
        if self._finished:
            return
        self._manual = True
        with self._locked():
            self._boundary()

    def start(self) -> None:
        """Begin step 0 now (the Python API's ``__enter__``)."""
        with self._locked():
            if not self._started and not self._finished:
                self._begin()

    def finish(self, reason: str | None = None) -> None:
        """Stop the profiler, write the trace if steps were being recorded, close the log.

        Idempotent; called at exit, on an uncaught exception and on SIGTERM/SIGINT.
        """
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._finish_locked(reason or self._end_reason)

    # -- internals ------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            yield
        pending, self._pending_signal = self._pending_signal, None
        if pending is not None:
            # Raised again rather than handled here: this may not be the main thread, and only
            # the main thread may raise KeyboardInterrupt for the program.
            signal.raise_signal(pending)

    def _boundary(self) -> None:
        # A hook may have waited for the lock while another thread finished the driver.
        if self._finished:
            return
        if self._started:
            self._cut()
        else:
            self._begin()

    def _begin(self) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        self._log = StepLog(self.staging / f"{STEP_LOG_PREFIX}{self._pid}{STEP_LOG_SUFFIX}")
        self._log.append(
            {
                "event": "start",
                "pid": self._pid,
                "ppid": os.getppid(),
                "argv": list(sys.argv),
                "executable": sys.executable,
                "options": asdict(self.options),
                "time_ns": time.time_ns(),
                **distributed_info(),
            }
        )
        self._started = True
        self._install_exit_handlers()
        self._profiler = self._make_profiler()
        if self._profiler is not None:
            self._call_profiler(self._profiler.start)
            self._stamp_clock()
        self._step = 0
        self._action = self._planned(0)
        self._step_start_ns = time.time_ns()
        self._device.begin(0)

    def _planned(self, step: int) -> str:
        if self._profiler is None:
            return ACTION_NONE
        options = self.options
        return planned_action(
            step, options.skip, options.steps, options.flush_steps, interleave=options.interleave
        )

    def _cut(self) -> None:
        # The step ends before the profiler's bookkeeping and the next begins after it, so a
        # step's logged time is the program's own, not the profiler's start or export.
        end_ns = time.time_ns()
        self._device.end(self._step)
        assert self._log is not None
        self._log.append(
            {
                "event": "step",
                "step": self._step,
                "start_ns": self._step_start_ns,
                "end_ns": end_ns,
                "action": self._action,
            }
        )
        profiler = self._profiler
        if profiler is not None:
            self._call_profiler(profiler.step)
            self._stamp_clock()
            options = self.options
            if window_ends(self._step, options.skip, options.steps, interleave=options.interleave):
                # The window is over and the trace written: close the step annotation torch
                # opened and stop driving the profiler at all.
                self._call_profiler(profiler.stop)
                self._profiler = None
        self._step += 1
        self._action = self._planned(self._step)
        self._fetched.clear()
        self._backward_seen = False
        self._step_start_ns = time.time_ns()
        self._device.begin(self._step)
        self._log_device_steps()

    def _finish_locked(self, reason: str) -> None:
        if self._finished:
            return
        self._finished = True
        if not self._started:
            return
        end_ns = time.time_ns()
        if self._profiler is not None:
            self._call_profiler(self._profiler.stop)
            self._profiler = None
        self._log_device_steps()
        assert self._log is not None
        self._log.append(
            {
                "event": "end",
                "reason": reason,
                "step": self._step,
                "start_ns": self._step_start_ns,
                "end_ns": end_ns,
                "action": self._action,
                "time_ns": time.time_ns(),
                "torch": torch_info(),
                **distributed_info(),
            }
        )
        self._log.close()
        self._remove_exit_handlers()
        if reason == "exit" and _loaded_module("torch.distributed") is not None:
            _let_collective_threads_settle()

    def _stamp_clock(self) -> None:
        """Name this machine's clock in the trace being recorded (torch keeps a trace's
        metadata for one profiling cycle: stamped at every step)."""
        if self._profiler is None or self._clock is None:
            return
        try:
            self._profiler.add_metadata_json(CLOCK_KEY, self._clock)
        except Exception:  # a torch without trace metadata: traces without the clock
            self._clock = None

    def _log_device_steps(self) -> None:
        """Log the device times of the steps whose events have completed."""
        assert self._log is not None
        for step, device_ns in self._device.completed():
            self._log.append({"event": "device_step", "step": step, "device_ns": device_ns})

    def _make_profiler(self) -> Any:
        return self._profiler_factory(self.options, self._export_trace)

    def _call_profiler(self, action: Callable[[], object]) -> None:
        """Run one profiler transition; a profiler failure ends profiling, never the program."""
        global _USER_SCOPE_ONLY
        _USER_SCOPE_ONLY = self.options.level == "light"
        try:
            with warnings.catch_warnings(), stderr_into(self._profiler_log()):
                # Each chunk is a profiling cycle of its own, which is what torch warns about.
                warnings.filterwarnings("ignore", "Warning: Profiler clears events", UserWarning)
                action()
        except Exception as error:
            if self._log is not None:
                self._log.append({"event": "profiler_error", "error": repr(error)[:2000]})
            self._profiler = None
        finally:
            _USER_SCOPE_ONLY = False

    def _profiler_log(self) -> Path:
        return self.staging / f"{PROFILER_LOG_PREFIX}{self._pid}{PROFILER_LOG_SUFFIX}"

    def _export_trace(self, profiler: Any) -> None:
        rank = distributed_info().get("rank") or 0
        name = f"{CHUNK_PREFIX}{self._pid}-{len(self.trace_files):05d}{TRACE_SUFFIX}"
        target = self.staging / name
        partial = self.staging / f".{name}.partial"
        started = time.time_ns()
        profiler.export_chrome_trace(str(partial))
        os.replace(partial, target)
        self.trace_files.append(target)
        if self._log is not None:
            self._log.append(
                {
                    "event": "trace",
                    "file": name,
                    # The chunk holds the steps up to this one (the open one at the end).
                    "last_step": self._step,
                    "rank": rank,
                    "export_ns": time.time_ns() - started,
                    "torch": torch_info(),
                    **distributed_info(),
                }
            )

    def _install_exit_handlers(self) -> None:
        atexit.register(self.finish)
        self._previous_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        if threading.current_thread() is not threading.main_thread():
            return
        # Take over only the default dispositions: a program with its own handlers keeps them
        # (and exits through atexit, which finishes the trace too).
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_signal)
            self._signals.append((signal.SIGTERM, signal.SIG_DFL))
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_signal)
            self._signals.append((signal.SIGINT, signal.default_int_handler))

    def _remove_exit_handlers(self) -> None:
        atexit.unregister(self.finish)
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_excepthook
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._signals:
                if signal.getsignal(signum) == self._on_signal:
                    signal.signal(signum, previous)
        self._signals.clear()

    def _excepthook(
        self, kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
    ) -> None:
        self._end_reason = describe_exception(kind, value)
        self._previous_excepthook(kind, value, tb)

    def _on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        if os.getpid() == self._pid and self._lock.locked():
            # A step boundary is half done: let it finish, then act on the signal.
            self._pending_signal = signum
            return
        self._deliver(signum)

    def _deliver(self, signum: int) -> None:
        if signum == signal.SIGINT:
            # Python's own behaviour: KeyboardInterrupt; atexit then writes the trace and the
            # interpreter reports death by SIGINT.
            raise KeyboardInterrupt
        if os.getpid() == self._pid:
            self.finish(f"signal {signal.Signals(signum).name}")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


# -- torch glue -------------------------------------------------------------------------------

# How long the exit path yields the GIL to torch's collective worker threads (see below).
EXIT_SETTLE_S: Final = 0.1


def _let_collective_threads_settle() -> None:
    """Give gloo's worker threads the GIL once more before the interpreter finalises.

    A collective issued during ``backward`` captures torch's thread-local state, which holds a
    Python object (the ``contextvars`` context the autograd engine stashes). The gloo worker
    thread drops its last reference to the finished work, and must take the GIL to release
    that object; if the interpreter starts finalising meanwhile, CPython ends the thread inside
    a ``noexcept`` destructor and the process aborts ("terminate called without an active
    exception"). Sleeping here, with the GIL released, lets such a thread finish first.
    """
    import gc

    time.sleep(EXIT_SETTLE_S)
    gc.collect()
    time.sleep(EXIT_SETTLE_S)


_USER_SCOPE_ONLY = False


def _torch_schedule(options: DriverOptions, step: int) -> Any:
    from torch.profiler import ProfilerAction

    action = planned_action(
        step, options.skip, options.steps, options.flush_steps, interleave=options.interleave
    )
    return {
        ACTION_NONE: ProfilerAction.NONE,
        ACTION_WARMUP: ProfilerAction.WARMUP,
        ACTION_RECORD: ProfilerAction.RECORD,
        ACTION_SAVE: ProfilerAction.RECORD_AND_SAVE,
    }[action]


def profiler_settings(level: str) -> dict[str, Any]:
    """``torch.profiler.profile`` keyword arguments of a level (activities excepted)."""
    from torch._C._profiler import _ExperimentalConfig

    if level == "full":
        return {
            "record_shapes": True,
            "with_flops": True,
            "with_stack": True,
            "profile_memory": True,
            "experimental_config": _ExperimentalConfig(verbose=True),
        }
    settings: dict[str, Any] = {}
    if level == "default":
        settings.update(record_shapes=True, with_flops=True)
    # We only ever export the trace: skip building torch's Python event objects at stop
    # (an option since torch 2.12).
    with contextlib.suppress(TypeError):
        settings["experimental_config"] = _ExperimentalConfig(trace_only=True)
    return settings


def make_torch_profiler(options: DriverOptions, on_trace_ready: Callable[[Any], None]) -> Any:
    """A scheduled ``torch.profiler.profile`` for ``options`` (not started)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    if options.level == "light":
        _install_scope_filter()
    return profile(
        activities=activities,
        schedule=functools.partial(_torch_schedule, options),
        on_trace_ready=on_trace_ready,
        **profiler_settings(options.level),
    )


def _install_scope_filter() -> None:
    """Let the light level record user annotations only (steps, data loader, optimizer).

    torch.profiler has no option for it, but its enable call takes the record-function scopes to
    observe; operators are left out while device activities (CUPTI) are still collected.
    """
    from torch._C._profiler import RecordScope

    autograd_profiler: Any = importlib.import_module("torch.autograd.profiler")
    original = autograd_profiler._enable_profiler
    if getattr(original, "_perfledger_scope_filter", False):
        return

    @functools.wraps(original)
    def enable_profiler(config: Any, activities: Any, scopes: Any = None) -> Any:
        if _USER_SCOPE_ONLY:
            scopes = {RecordScope.USER_SCOPE}
        if scopes is None:
            return original(config, activities)
        return original(config, activities, scopes)

    enable_profiler._perfledger_scope_filter = True  # type: ignore[attr-defined]
    autograd_profiler._enable_profiler = enable_profiler


# -- process-wide hooks (used under ``perfledger record``) ----------------------------------

_DRIVER: StepDriver | None = None
_CONFIG: tuple[Path, DriverOptions] | None = None
_OPTIMIZER_DEPTH = threading.local()


def current_driver() -> StepDriver | None:
    """The driver of this process, created at the first step signal when recording."""
    global _DRIVER
    if _DRIVER is None and _CONFIG is not None:
        _DRIVER = StepDriver(*_CONFIG)
    return _DRIVER


def set_driver(driver: StepDriver | None) -> StepDriver | None:
    """Make ``driver`` receive :func:`mark_step` (the Python API); return the previous one."""
    global _DRIVER
    previous, _DRIVER = _DRIVER, driver
    return previous


def recording() -> bool:
    """Whether this process runs under ``perfledger record``."""
    return _CONFIG is not None


def mark_step() -> None:
    """End the running step and begin the next; a no-op when nothing is profiling."""
    driver = current_driver()
    if driver is not None:
        driver.mark_step()


def _on_batch(iterator: object) -> None:
    driver = _DRIVER if _DRIVER is not None else current_driver()
    if driver is not None:
        driver.on_batch(id(iterator))


def _on_backward() -> None:
    if _DRIVER is not None:
        _DRIVER.note_backward()


def _on_optimizer_step(optimizer: object) -> None:
    driver = _DRIVER if _DRIVER is not None else current_driver()
    if driver is not None:
        driver.on_optimizer_step(optimizer)


def install_torch_hooks(torch: Any) -> None:
    """Watch DataLoader batches, backward passes and optimizer steps (idempotent)."""
    dataloader: Any = importlib.import_module("torch.utils.data.dataloader")
    iterator_class: Any = dataloader._BaseDataLoaderIter
    if getattr(iterator_class.__next__, "_perfledger_hook", False):
        return
    original_next = iterator_class.__next__

    @functools.wraps(original_next)
    def next_batch(self: object) -> Any:
        _on_batch(self)
        return original_next(self)

    next_batch._perfledger_hook = True  # type: ignore[attr-defined]
    iterator_class.__next__ = next_batch

    original_backward = torch.autograd.backward

    @functools.wraps(original_backward)
    def backward(*args: Any, **kwargs: Any) -> Any:
        _on_backward()
        return original_backward(*args, **kwargs)

    torch.autograd.backward = backward

    optimizer_class = torch.optim.Optimizer
    original_hook_step = optimizer_class.profile_hook_step

    def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
        hooked = original_hook_step(func)

        @functools.wraps(hooked)
        def step(*args: Any, **kwargs: Any) -> Any:
            # Depth keeps a wrapping optimizer (ZeroRedundancyOptimizer over an inner one)
            # from ending the step when its inner step returns.
            depth = getattr(_OPTIMIZER_DEPTH, "value", 0)
            _OPTIMIZER_DEPTH.value = depth + 1
            try:
                result = hooked(*args, **kwargs)
            finally:
                _OPTIMIZER_DEPTH.value = depth
            if depth == 0 and args:
                _on_optimizer_step(args[0])
            return result

        return step

    optimizer_class.profile_hook_step = staticmethod(profile_hook_step)


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Installs the torch hooks right after ``import torch`` finishes, without importing it."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_hook(module: types.ModuleType) -> None:
            exec_module(module)
            try:
                install_torch_hooks(module)
            except Exception as error:  # never break the program for the profiler's sake
                print(f"perfledger: cannot watch steps in this process: {error}", file=sys.stderr)

        setattr(loader, "exec_module", exec_then_hook)  # noqa: B010 - this spec's loader only
        return spec


def _forget_in_child() -> None:
    # A forked child (a DataLoader worker) shares the parent's profiler state but is not a
    # worker of the program: it must never cut steps or write a trace.
    global _DRIVER, _CONFIG
    _DRIVER = None
    _CONFIG = None


def configure_from_env(environ: dict[str, str] | None = None) -> bool:
    """Arm the driver from the environment the launcher set; True when recording.

    Called by the bootstrap at interpreter start: cheap, imports nothing heavy.
    """
    global _CONFIG
    env = os.environ if environ is None else environ
    staging = env.get(ENV_STAGING)
    if not staging:
        return False
    text = env.get(ENV_OPTIONS)
    options = DriverOptions.from_json(text) if text else DriverOptions()
    _CONFIG = (Path(staging), options)
    launcher = env.get(lifeline.ENV_LAUNCHER)
    if launcher:
        lifeline.watch_launcher(launcher)
    os.register_at_fork(after_in_child=_forget_in_child)
    torch = sys.modules.get("torch")
    if torch is not None:
        install_torch_hooks(torch)
    elif not any(isinstance(finder, _TorchImportWatcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TorchImportWatcher())
    return True
