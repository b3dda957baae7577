"""Many ranks: each rank an independent task (local process pool or Dask), then the cluster pass.

- :mod:`perfledger.cluster.tasks` — the per-rank task function and its small result;
- :mod:`perfledger.cluster.execution` — where tasks run: this process, a process pool, Dask;
- :mod:`perfledger.cluster.merge` — profile-wide tables from per-rank pieces;
- :mod:`perfledger.cluster.collectives` — collectives aligned across ranks, arrival skew, links;
- :mod:`perfledger.cluster.balance` — the cluster pass: per-rank accounts, load balance, slow
  ranks.
"""

from __future__ import annotations
