"""perfledger: the time account of every step of an AI training or inference run."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
