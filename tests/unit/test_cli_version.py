"""``perfledger --version``: the parser's own answer, without the subcommands' imports."""

from __future__ import annotations

import subprocess
import sys

from perfledger.version import __version__
from tests.cli import perfledger


def test_version_is_printed_and_exits_0() -> None:
    result = perfledger("--version")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"perfledger {__version__}\n",
        "",
    )


def test_version_is_what_the_parser_says_and_imports_no_subcommand() -> None:
    probe = (
        "import contextlib, io, sys\n"
        "from perfledger.__main__ import build_parser, main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['--version'])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('perfledger.cli', 'pyarrow'))))\n"
        "parsed = io.StringIO()\n"
        "try:\n"
        "    with contextlib.redirect_stdout(parsed):\n"
        "        build_parser().parse_args(['--version'])\n"
        "except SystemExit as exit_:\n"
        "    assert exit_.code == 0\n"
        "print(code, out.getvalue() == parsed.getvalue())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    imported, answer = result.stdout.splitlines()
    assert imported == "[]"  # neither a subcommand's module nor Arrow
    assert answer == "0 True"
