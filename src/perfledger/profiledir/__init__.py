"""The profile directory: its layout, its writer and its one reader.

- :mod:`~perfledger.profiledir.layout` — the names of its files and folders;
- :mod:`~perfledger.profiledir.writer` — the staging folder renamed into place, raw copies,
  canonical tables;
- :mod:`~perfledger.profiledir.artefacts` — every artefact laid out from one analysis;
- :mod:`~perfledger.profiledir.reader` — :func:`load_profile`, used by every command that reads
  a profile.
"""

from __future__ import annotations

from perfledger.profiledir.reader import StoredProfile, is_profile, load_profile

__all__ = ["StoredProfile", "is_profile", "load_profile"]
