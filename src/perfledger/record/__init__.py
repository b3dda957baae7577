"""``perfledger record``: profile a PyTorch program without changing its code.

The launcher (:mod:`perfledger.record.launcher`) runs the program as a child process with a
bootstrap on ``PYTHONPATH``; inside every Python worker that imports torch, the in-process driver
(:mod:`perfledger.record.inprocess`) cuts the run into steps and drives ``torch.profiler``. This
package's ``__init__`` stays free of heavy imports: it is imported inside the profiled program.
"""

from __future__ import annotations
