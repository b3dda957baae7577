"""The directory ``perfledger record`` puts first on the program's ``PYTHONPATH``.

It holds a ``sitecustomize`` module, run by every Python interpreter the program starts.
"""

from __future__ import annotations

from pathlib import Path

BOOTSTRAP_DIR = Path(__file__).resolve().parent
