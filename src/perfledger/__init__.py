"""perfledger: the time account of every step of an AI training or inference run."""

from __future__ import annotations

from typing import Any

from perfledger.version import __version__

__all__ = ["__version__", "mark_step", "profile"]


def __getattr__(name: str) -> Any:
    # Imported on first use: ``import perfledger`` inside a profiled program must stay cheap and
    # must not import torch, pyarrow or rich.
    if name == "mark_step":
        from perfledger.record.inprocess import mark_step

        return mark_step
    if name == "profile":
        from perfledger.record.api import profile

        return profile
    raise AttributeError(f"module 'perfledger' has no attribute {name!r}")
