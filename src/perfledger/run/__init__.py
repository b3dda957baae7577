"""Orchestration: from inputs to a written profile directory.

- :mod:`perfledger.run.pipeline` — import, analyse, diagnose and write a profile;
- :mod:`perfledger.run.tasks` — one rank as one independent task, and its small result;
- :mod:`perfledger.run.execution` — where rank tasks run: this process, a process pool, Dask;
- :mod:`perfledger.run.diff_inputs` — the runs ``perfledger diff`` compares, read or analysed.
"""
