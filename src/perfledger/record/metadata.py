"""Run metadata for meta.json: command, environment, versions, devices, ranks, git revision.

Only an allow-list of environment variables is kept: the environment of a training job holds
tokens and passwords, and meta.json travels with the profile.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import psutil

from perfledger.record.staging import OverheadEstimate, ProcessRecord, profiler_overhead
from perfledger.vcs import git_revision
from perfledger.version import __version__

# Variables that change how a program performs, kept in meta.json by name or by prefix.
ENVIRONMENT_NAMES: Final = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "ASCEND_RT_VISIBLE_DEVICES",
        "CUDA_LAUNCH_BLOCKING",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "KMP_AFFINITY",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "PYTORCH_CUDA_ALLOC_CONF",
        "CUBLAS_WORKSPACE_CONFIG",
        "TORCHINDUCTOR_CACHE_DIR",
        "VIRTUAL_ENV",
        "CONDA_DEFAULT_ENV",
        "SLURM_JOB_ID",
        "SLURM_NTASKS",
    }
)
ENVIRONMENT_PREFIXES: Final = ("NCCL_", "GLOO_", "HCCL_", "TORCH_", "PYTORCH_", "XLA_")
# Prefixed variables that may still carry credentials.
ENVIRONMENT_SECRET_WORDS: Final = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")


def environment_summary(environ: Mapping[str, str]) -> dict[str, Any]:
    """Host, interpreter and the performance-relevant environment variables."""
    variables = {
        name: value
        for name, value in sorted(environ.items())
        if (name in ENVIRONMENT_NAMES or name.startswith(ENVIRONMENT_PREFIXES))
        and not any(word in name for word in ENVIRONMENT_SECRET_WORDS)
    }
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "variables": variables,
    }


def program_directory(command: Sequence[str], cwd: Path) -> Path:
    """The directory of the program's script when the command names one, else ``cwd``."""
    for word in command[1:]:
        if word.endswith(".py") and (cwd / word).is_file():
            return (cwd / word).resolve().parent
    return cwd


def overhead_document(overhead: OverheadEstimate | None) -> dict[str, Any] | None:
    """meta.json's ``record.profiler_overhead``: the recorder's estimate of its cost."""
    if overhead is None:
        return None
    return {
        "profiled_step_ms": round(overhead.profiled_ms, 3),
        "unprofiled_step_ms": round(overhead.unprofiled_ms, 3),
        "profiled_steps": overhead.profiled_steps,
        "unprofiled_steps": overhead.unprofiled_steps,
        "overhead_pct": round(overhead.overhead_pct, 2),
        "noise_pct": None if overhead.noise_pct is None else round(overhead.noise_pct, 2),
        "compared": (
            "each profiled step with the unprofiled step after it"
            if overhead.paired
            else "the unprofiled steps nearest the profiled window"
        ),
        "timed": overhead.timed,
    }


def run_meta(
    *,
    command: Sequence[str],
    cwd: Path,
    environ: Mapping[str, str],
    options: Mapping[str, Any],
    label: str | None,
    processes: Sequence[ProcessRecord],
    exit_code: int,
    started_ns: int,
    ended_ns: int,
    sampler: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything meta.json records about a recorded run."""
    torch: dict[str, Any] = next((p.fact("torch") for p in processes if p.fact("torch")), {})
    ranks = sorted({p.rank for p in processes})
    world = next((p.fact("world_size") for p in processes if p.fact("world_size")), None)
    backend = next((p.fact("backend") for p in processes if p.fact("backend")), None)
    all_steps = [step for p in processes for step in p.steps]
    overhead = profiler_overhead(all_steps, interleaved=bool(options.get("interleave")))
    return {
        "recorder": f"perfledger {__version__}",
        "command": list(command),
        "working_dir": str(cwd),
        "label": label,
        "options": dict(options),
        "clock_base": "unix_epoch_ns",
        "environment": environment_summary(environ),
        "python_executable": sys.executable,
        "torch": {key: value for key, value in torch.items() if key != "devices"},
        "devices": torch.get("devices", []),
        "distributed": {"ranks": ranks, "world_size": world or len(ranks), "backend": backend},
        "git": git_revision(program_directory(command, cwd)),
        "record": {
            "exit_code": exit_code,
            "started_ns": started_ns,
            "ended_ns": ended_ns,
            "processes": [
                {
                    "rank": p.rank,
                    "pid": p.pid,
                    "argv": p.start.get("argv"),
                    "end": p.end_reason,
                    "steps": len(p.steps),
                    "profiled_steps": sum(s.profiled for s in p.steps),
                    "traces": [t.name for t in p.traces],
                    "trace_export_ms": round(p.fact("export_ns") / 1e6, 1)
                    if p.fact("export_ns")
                    else None,
                    "profiler_errors": list(p.errors),
                }
                for p in processes
            ],
            "step_count": len(all_steps),
            "profiler_overhead": overhead_document(overhead),
            "host_sampler": dict(sampler or {}),
        },
    }
