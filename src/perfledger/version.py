"""The version of perfledger (one place; the package, summary.json and meta.json read it)."""

from __future__ import annotations

__version__ = "0.1.0"
