"""Host counters sampled from outside the program: CPU and memory of its process tree, per core.

The sampler is a thread of the launcher (or of the Python API's process), so the program pays
nothing but the /proc reads. Each sample reads one ``stat`` and ``statm`` per process of the tree
and ``/proc/stat`` once; the tree itself is re-listed only every ``tree_refresh_s``, because
listing means reading every process on the machine.

Counters (rows of :data:`perfledger.model.schema.COUNTERS_SCHEMA`, ``ts_ns`` in Unix epoch ns
like the traces):

- track ``process_tree``: ``cpu_percent`` (100 = one core busy), ``rss_bytes`` — the program's
  whole tree, reported under rank 0;
- track ``cpu_cores``: ``cpu0`` … ``cpuN`` busy percent of each core of the host, rank 0;
- track ``rank_process``: ``cpu_percent``, ``rss_bytes`` of each rank's worker process and its
  children (data-loader workers), under that rank;
- track ``gpu<i>``: ``utilization_percent``, ``memory_used_bytes`` from NVML when available, rank 0.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import psutil
import pyarrow as pa

from perfledger.model.schema import COUNTERS_SCHEMA, TRACK_CORES, TRACK_RANK, TRACK_TREE

CPU_PERCENT: Final = "cpu_percent"
RSS_BYTES: Final = "rss_bytes"
GPU_UTILIZATION: Final = "utilization_percent"
GPU_MEMORY: Final = "memory_used_bytes"


@dataclass
class HostSamples:
    """Column lists filled by the sampler: one entry per (sample, process), per (sample, core)."""

    process_ts: list[int] = field(default_factory=list)
    process_pid: list[int] = field(default_factory=list)
    process_parent: list[int] = field(default_factory=list)
    process_cpu: list[float] = field(default_factory=list)
    process_rss: list[int] = field(default_factory=list)
    core_ts: list[int] = field(default_factory=list)
    core_index: list[int] = field(default_factory=list)
    core_busy: list[float] = field(default_factory=list)
    gpu_ts: list[int] = field(default_factory=list)
    gpu_index: list[int] = field(default_factory=list)
    gpu_utilization: list[float] = field(default_factory=list)
    gpu_memory: list[int] = field(default_factory=list)
    sample_count: int = 0
    sample_cpu_ns: int = 0  # CPU time the sampling thread used: the sampler's own cost


class HostSampler:
    """Samples the process tree under ``root_pid`` every ``interval_s`` in a daemon thread.

    Use as a context manager, or :meth:`start` then :meth:`stop` (which returns the samples).
    """

    def __init__(
        self, root_pid: int, interval_s: float = 0.05, *, tree_refresh_s: float = 1.0
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"sampling interval must be > 0 (got {interval_s})")
        self.root_pid = root_pid
        self.interval_s = interval_s
        self.tree_refresh_s = tree_refresh_s
        self.samples = HostSamples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perfledger-host", daemon=True)
        self._procfs = _ProcFs() if _ProcFs.available() else None
        self._tree: dict[int, int] = {}  # pid -> parent pid, every process of the tree
        self._last_cpu: dict[int, tuple[int, float]] = {}  # pid -> (cpu ns, monotonic s)
        self._last_cores: list[tuple[int, int]] = []  # per core: (busy ticks, total ticks)
        self._last_tree_s = -1e18
        self._nvml: Any = None
        self._gpu_handles: list[Any] = []

    def __enter__(self) -> HostSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Begin sampling."""
        self._open_nvml()
        self._thread.start()

    def stop(self) -> HostSamples:
        """Take a last sample, stop the thread and return everything sampled."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        self._close_nvml()
        return self.samples

    def _run(self) -> None:
        # Sample at fixed ticks (not sleep-after-work) so the interval holds under load.
        next_tick = time.monotonic()
        while True:
            self.sample()
            next_tick += self.interval_s
            delay = next_tick - time.monotonic()
            if delay < 0:  # overloaded host: skip the missed ticks rather than burst
                next_tick = time.monotonic()
                delay = 0.0
            if self._stop.wait(delay):
                self.sample()
                return

    def sample(self) -> None:
        """Take one sample of the tree, the cores and the GPUs."""
        begin = time.thread_time_ns()
        now_ns = time.time_ns()
        now_s = time.monotonic()
        if now_s - self._last_tree_s >= self.tree_refresh_s:
            self._tree = self._list_tree()
            self._last_tree_s = now_s
        samples = self.samples
        for pid, parent in list(self._tree.items()):
            reading = self._read_process(pid)
            if reading is None:  # ended
                del self._tree[pid]
                self._last_cpu.pop(pid, None)
                continue
            cpu_ns, rss = reading
            previous = self._last_cpu.get(pid)
            self._last_cpu[pid] = (cpu_ns, now_s)
            if previous is None or now_s <= previous[1]:
                continue  # a rate needs two readings
            samples.process_ts.append(now_ns)
            samples.process_pid.append(pid)
            samples.process_parent.append(parent)
            samples.process_cpu.append((cpu_ns - previous[0]) / 1e7 / (now_s - previous[1]))
            samples.process_rss.append(rss)
        self._sample_cores(now_ns)
        self._sample_gpus(now_ns)
        samples.sample_count += 1
        samples.sample_cpu_ns += time.thread_time_ns() - begin

    def _list_tree(self) -> dict[int, int]:
        if self._procfs is not None:
            parents = self._procfs.parents()
        else:
            parents = {
                process.pid: process.info["ppid"] or 0 for process in psutil.process_iter(["ppid"])
            }
        return {pid: parents.get(pid, 0) for pid in descendants(self.root_pid, parents)}

    def _read_process(self, pid: int) -> tuple[int, int] | None:
        if self._procfs is not None:
            return self._procfs.process(pid)
        try:
            process = psutil.Process(pid)
            with process.oneshot():
                times = process.cpu_times()
                rss = process.memory_info().rss
        except psutil.Error:
            return None
        return int((times.user + times.system) * 1e9), int(rss)

    def _sample_cores(self, now_ns: int) -> None:
        if self._procfs is not None:
            cores = self._procfs.cores()
        else:
            cores = [
                (
                    int((t.user + t.nice + t.system + t.irq + t.softirq + t.steal) * 100),
                    int(sum(t) * 100),
                )
                for t in psutil.cpu_times(percpu=True)
            ]
        if len(cores) == len(self._last_cores):
            for index, ((busy, total), (busy0, total0)) in enumerate(
                zip(cores, self._last_cores, strict=True)
            ):
                if total > total0:
                    self.samples.core_ts.append(now_ns)
                    self.samples.core_index.append(index)
                    self.samples.core_busy.append(100.0 * (busy - busy0) / (total - total0))
        self._last_cores = cores

    def _open_nvml(self) -> None:
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._gpu_handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._nvml = pynvml
        except Exception:  # no pynvml, no driver, no GPU: no GPU counters
            self._nvml = None
            self._gpu_handles = []

    def _close_nvml(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None

    def _sample_gpus(self, now_ns: int) -> None:
        if self._nvml is None:
            return
        for index, handle in enumerate(self._gpu_handles):
            try:
                utilization = self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle).used
            except Exception:
                continue
            self.samples.gpu_ts.append(now_ns)
            self.samples.gpu_index.append(index)
            self.samples.gpu_utilization.append(float(utilization))
            self.samples.gpu_memory.append(int(memory))


class _ProcFs:
    """Direct reads of Linux /proc: one ``read`` per process per sample, ~10 µs each.

    psutil costs ~45 µs for the same figures; at 20 samples a second over a tree of workers
    the difference is the sampler's whole cost.
    """

    def __init__(self) -> None:
        self._tick_ns = 1e9 / os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")

    @staticmethod
    def available() -> bool:
        return os.path.exists("/proc/self/stat") and os.path.exists("/proc/stat")

    @staticmethod
    def _read(path: str) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            return os.read(fd, 1 << 16)
        except OSError:
            return None
        finally:
            os.close(fd)

    @staticmethod
    def _stat_fields(data: bytes) -> list[bytes]:
        # The command name (field 2) is in parentheses and may hold spaces: split after it.
        return data[data.rindex(b")") + 2 :].split()

    def process(self, pid: int) -> tuple[int, int] | None:
        """(user + system CPU time in ns, RSS in bytes) of a live process, else None."""
        data = self._read(f"/proc/{pid}/stat")
        if not data:
            return None
        fields = self._stat_fields(data)
        if fields[0] in (b"Z", b"X"):  # zombie or dead: exited, not yet reaped
            return None
        cpu_ticks = int(fields[11]) + int(fields[12])
        return int(cpu_ticks * self._tick_ns), int(fields[21]) * self._page

    def parents(self) -> dict[int, int]:
        """pid -> parent pid of every process on the host."""
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                data = self._read(f"/proc/{entry}/stat")
                if data:
                    parents[int(entry)] = int(self._stat_fields(data)[1])
        return parents

    def cores(self) -> list[tuple[int, int]]:
        """Per core: (busy ticks, total ticks) since boot."""
        data = self._read("/proc/stat") or b""
        cores = []
        for line in data.split(b"\n"):
            if line.startswith(b"cpu") and line[3:4].isdigit():
                ticks = [int(v) for v in line.split()[1:]]
                # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time
                # is already counted in user, idle and iowait are not busy.
                total = sum(ticks[:8])
                cores.append((total - ticks[3] - ticks[4], total))
        return cores


def descendants(pid: int, parents: Mapping[int, int]) -> set[int]:
    """``pid`` and every process whose parent chain reaches it."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found = {pid}
    frontier = [pid]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def counters_table(samples: HostSamples, rank_pids: Mapping[int, int] | None = None) -> pa.Table:
    """The samples as a COUNTERS_SCHEMA table, sorted by (rank, track, name, ts_ns).

    Args:
        samples: what the sampler collected.
        rank_pids: rank -> pid of that rank's worker; its tree's counters go under the rank.
    """
    import numpy as np

    ts = np.asarray(samples.process_ts, dtype=np.int64)
    pid = np.asarray(samples.process_pid, dtype=np.int64)
    cpu = np.asarray(samples.process_cpu, dtype=np.float64)
    rss = np.asarray(samples.process_rss, dtype=np.float64)
    parts: list[pa.Table] = []

    def add(rank: int, track: str, name: str, when: Any, value: Any) -> None:
        if len(when) == 0:
            return
        parts.append(
            pa.table(
                {
                    "rank": pa.array(np.full(len(when), rank, dtype=np.int32)),
                    "track": pa.array([track] * len(when), pa.string()),
                    "name": pa.array([name] * len(when), pa.string()),
                    "ts_ns": pa.array(np.asarray(when, dtype=np.int64)),
                    "value": pa.array(np.asarray(value, dtype=np.float64)),
                },
                schema=COUNTERS_SCHEMA,
            )
        )

    def tree_sums(mask: Any) -> tuple[Any, Any, Any]:
        when, inverse = np.unique(ts[mask], return_inverse=True)
        return (
            when,
            np.bincount(inverse, weights=cpu[mask], minlength=len(when)),
            np.bincount(inverse, weights=rss[mask], minlength=len(when)),
        )

    if len(ts):
        when, cpu_sum, rss_sum = tree_sums(np.ones(len(ts), dtype=bool))
        add(0, TRACK_TREE, CPU_PERCENT, when, cpu_sum)
        add(0, TRACK_TREE, RSS_BYTES, when, rss_sum)
        parents = dict(zip(samples.process_pid, samples.process_parent, strict=True))
        for rank, worker in sorted((rank_pids or {}).items()):
            mask = np.isin(pid, sorted(descendants(worker, parents)))
            if mask.any():
                when, cpu_sum, rss_sum = tree_sums(mask)
                add(rank, TRACK_RANK, CPU_PERCENT, when, cpu_sum)
                add(rank, TRACK_RANK, RSS_BYTES, when, rss_sum)
    core = np.asarray(samples.core_index, dtype=np.int64)
    for index in np.unique(core):
        mask = core == index
        add(
            0,
            TRACK_CORES,
            f"cpu{index}",
            np.asarray(samples.core_ts, dtype=np.int64)[mask],
            np.asarray(samples.core_busy)[mask],
        )
    gpu = np.asarray(samples.gpu_index, dtype=np.int64)
    for index in np.unique(gpu):
        mask = gpu == index
        when = np.asarray(samples.gpu_ts, dtype=np.int64)[mask]
        add(0, f"gpu{index}", GPU_UTILIZATION, when, np.asarray(samples.gpu_utilization)[mask])
        add(0, f"gpu{index}", GPU_MEMORY, when, np.asarray(samples.gpu_memory)[mask])
    if not parts:
        return COUNTERS_SCHEMA.empty_table()
    return pa.concat_tables(parts).sort_by(
        [
            ("rank", "ascending"),
            ("track", "ascending"),
            ("name", "ascending"),
            ("ts_ns", "ascending"),
        ]
    )
