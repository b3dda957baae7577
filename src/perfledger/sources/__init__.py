"""Importers: one module per trace format, each producing a :class:`Trace` of canonical tables."""

from __future__ import annotations
