"""How a recorded trace names the clock it was stamped with: ranks of one clock share it, and
their clocks are not aligned apart (:mod:`perfledger.analysis.cluster.arrivals`). No imports:
the recorder's in-process driver reads it at the start of every profiled program."""

from __future__ import annotations

from typing import Final

# The trace's top-level key: {"boot_id": <the Linux boot id>, "host": <host name>}, written by
# perfledger record (perfledger.record.inprocess.clock_identity).
CLOCK_KEY: Final = "perfledger_clock"
