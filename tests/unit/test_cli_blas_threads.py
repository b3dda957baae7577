"""One OpenBLAS thread for perfledger's own processes, never for the program ``record`` runs."""

from __future__ import annotations

import pytest

from tests.heap_probe import child_line

_PROBE = (
    "import os, sys\n"
    "if sys.argv[1] == 'numpy-first':\n"
    "    import numpy\n"
    "from perfledger.__main__ import main\n"
    "try:\n"
    "    main(sys.argv[2:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "print('BLAS', os.environ.get('OPENBLAS_NUM_THREADS'))\n"
)


def _blas_threads(*argv: str, env: dict[str, str] | None = None, first: str = "-") -> str:
    words = child_line(_PROBE, first, *argv, unset="OPENBLAS_NUM_THREADS", env=env, prefix="BLAS ")
    return words[0]


@pytest.mark.parametrize("command", ["analyze", "query", "timeline", "whatif", "diff", "runs"])
def test_analysing_commands_take_one_blas_thread(command: str) -> None:
    assert _blas_threads(command, "--help") == "1"


def test_record_leaves_the_programs_environment_alone() -> None:
    assert _blas_threads("record", "--help") == "None"


def test_the_users_choice_is_kept() -> None:
    assert _blas_threads("analyze", "--help", env={"OPENBLAS_NUM_THREADS": "3"}) == "3"


def test_nothing_is_set_once_numpy_is_loaded() -> None:
    # main() inside a program that loaded numpy: too late to matter, and not its to change
    assert _blas_threads("analyze", "--help", first="numpy-first") == "None"
