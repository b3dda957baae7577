"""Run by every Python process of a program started by ``perfledger record``.

It arms the step driver (cheap: nothing heavy is imported; torch is watched, not imported) and
then runs the ``sitecustomize`` that would have run without us, if there is one, so the
program's environment is unchanged.
"""

from __future__ import annotations

import os
import sys


def _chain_to_next_sitecustomize() -> None:
    """Import the next ``sitecustomize`` on the path, as if this one were not there."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    this_module = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # type: ignore[import-not-found]  # noqa: F401 - the next one
    except ImportError as error:
        if error.name != "sitecustomize":
            raise
        if this_module is not None:
            sys.modules["sitecustomize"] = this_module


def _arm() -> None:
    if not os.environ.get("PERFLEDGER_STAGING"):
        return
    try:
        from perfledger.record import inprocess
    except ImportError:
        home = os.environ.get("PERFLEDGER_HOME")
        if not home:
            raise
        # The program runs another interpreter than perfledger's: reach our package anyway
        # (the driver needs only the standard library and the program's own torch).
        sys.path.append(home)
        from perfledger.record import inprocess
    inprocess.configure_from_env()


try:
    _arm()
except Exception as _error:  # never stop the program for the profiler's sake
    print(f"perfledger: this process is not profiled: {_error}", file=sys.stderr)

_chain_to_next_sitecustomize()
