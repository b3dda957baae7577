"""What the ledger keeps of a profile directory: read from its summary.json, meta.json and
step_trace.csv through :func:`perfledger.profiledir.load_profile` (figures are copied, never
recomputed from events)."""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from perfledger.errors import PerfledgerError
from perfledger.ledger.store import RunRecord
from perfledger.model.schema import SPAN_STEP
from perfledger.profiledir import load_profile
from perfledger.profiledir.layout import STEP_TRACE_CSV

DEVICE_SHARES: Final = (
    "compute",
    "communication",
    "memcpy",
    "memset",
    "idle_host_dispatch",
    "idle_sync",
    "idle_dataloader",
    "idle_launch_latency",
    "idle_other",
)
HOST_SHARES: Final = ("dataloader", "forward", "backward", "optimizer", "overhead")
# options of a recording worth a column of the baseline table (the rest stays in meta.json)
_KEY_OPTIONS: Final = (
    "level",
    "steps",
    "wait",
    "warmup",
    "active",
    "repeat",
    "skip_first",
    "record_shapes",
    "with_stack",
    "profile_memory",
    "with_flops",
)


def run_record(
    profile: Path,
    *,
    label: str | None = None,
    note: str | None = None,
    registered_ns: int | None = None,
    cwd: Path | None = None,
) -> RunRecord:
    """The ledger's record of a profile directory.

    Raises:
        PerfledgerError: the directory is not a readable profile.
    """
    stored = load_profile(profile)
    summary, meta = stored.summary, stored.meta
    walls, shares = _step_figures(stored.path / STEP_TRACE_CSV)
    findings = summary.get("findings") or []
    top = findings[0] if findings and isinstance(findings[0], Mapping) else {}
    git = meta.get("git") if isinstance(meta.get("git"), Mapping) else None
    if git is None:
        git = _git(cwd or Path(str(meta.get("working_dir") or Path.cwd())))
    command = meta.get("command") or meta.get("command_line") or []
    return RunRecord(
        label=label or _str(meta.get("label")) or profile.resolve().name,
        registered_ns=registered_ns if registered_ns is not None else time.time_ns(),
        profile_created_ns=_int(meta.get("created_ns")),
        note=note,
        kind="record" if "recorder" in meta else "analyze",
        command=tuple(str(part) for part in command) if isinstance(command, list) else (),
        options=_key_options(meta),
        git_commit=_str(git.get("commit")) if git else None,
        git_branch=_str(git.get("branch")) if git else None,
        git_dirty=bool(git.get("dirty")) if git and git.get("dirty") is not None else None,
        device=_device(meta, summary),
        source_kind=_source_kind(summary),
        profile_path=os.fspath(profile.resolve()),
        ranks=len(summary["ranks"]) if isinstance(summary.get("ranks"), list) else None,
        step_count=_int(summary.get("step_count")),
        step_median_ms=_float(summary.get("step_time_ms")),
        step_p90_ms=(
            round(float(np.percentile(walls, 90)), 3)
            if walls.size and (_int(summary.get("step_count")) or 0) > 0
            else None
        ),
        utilization_pct=_utilization(summary),
        accounting=shares,
        top_finding=_str(top.get("id")),
        top_finding_title=_str(top.get("title")),
        top_finding_ms=_float(top.get("severity_ms")),
    )


def _step_figures(path: Path) -> tuple[np.ndarray[Any, np.dtype[np.float64]], dict[str, float]]:
    """Step walls in ms (one per rank and step) and each category's share of the steps in %.

    The same definitions as ``perfledger diff``: the step rows of step_trace.csv, span rows
    left out; shares are sum(category) / sum(wall).
    """
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("step") != str(SPAN_STEP)]
    except OSError as error:
        raise PerfledgerError(f"{path}: cannot read ({error})") from error
    try:
        walls_by_step: dict[tuple[str, str], int] = {}
        for row in rows:
            key = (row["rank"], row["step"])
            walls_by_step[key] = max(walls_by_step.get(key, 0), int(row["wall_ns"]))
        total = sum(int(r["wall_ns"]) for r in rows)
        names: Sequence[str] = DEVICE_SHARES if rows and "compute_ns" in rows[0] else HOST_SHARES
        shares = {
            name: round(100.0 * sum(int(r[f"{name}_ns"]) for r in rows) / total, 2)
            for name in names
            if total > 0
        }
    except (KeyError, ValueError) as error:
        raise PerfledgerError(f"{path}: unexpected content ({error})") from error
    walls = np.array([w for _, w in sorted(walls_by_step.items())], dtype=np.float64) / 1e6
    return walls, shares


def _key_options(meta: Mapping[str, Any]) -> dict[str, Any]:
    options = meta.get("options")
    if not isinstance(options, Mapping):
        return {}
    return {k: options[k] for k in _KEY_OPTIONS if k in options and options[k] is not None}


def _device(meta: Mapping[str, Any], summary: Mapping[str, Any]) -> str | None:
    names: list[str] = []
    devices = meta.get("devices")
    if isinstance(devices, list):
        names += [str(d["name"]) for d in devices if isinstance(d, Mapping) and d.get("name")]
    ranks = meta.get("ranks")
    if isinstance(ranks, Mapping):
        for rank in ranks.values():
            properties = rank.get("device_properties") if isinstance(rank, Mapping) else None
            if isinstance(properties, Mapping) and properties.get("name"):
                names.append(str(properties["name"]))
            elif isinstance(properties, list):
                names += [
                    str(d["name"]) for d in properties if isinstance(d, Mapping) and d.get("name")
                ]
    distinct = sorted(set(names))
    if distinct:
        return ", ".join(distinct)
    if summary.get("host") and not summary.get("devices"):
        return "cpu"
    return None


def _utilization(summary: Mapping[str, Any]) -> float | None:
    """Device busy time over the devices' span, all devices together, in %."""
    devices = summary.get("devices")
    if not isinstance(devices, list) or not devices:
        return None
    busy = sum(float(d.get("busy_ms") or 0) for d in devices if isinstance(d, Mapping))
    span = sum(float(d.get("span_ms") or 0) for d in devices if isinstance(d, Mapping))
    return round(100.0 * busy / span, 2) if span > 0 else None


def _source_kind(summary: Mapping[str, Any]) -> str | None:
    source = summary.get("source")
    if isinstance(source, Mapping) and source.get("kind") is not None:
        kind = source["kind"]
        return "+".join(map(str, kind)) if isinstance(kind, list) else str(kind)
    return None


def _git(directory: Path) -> dict[str, Any] | None:
    from perfledger.record.metadata import git_revision

    return git_revision(directory) if directory.is_dir() else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
