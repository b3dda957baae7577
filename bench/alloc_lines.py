"""Where one ``perfledger analyze`` makes its large numpy arrays: MB by line of perfledger.

``python bench/alloc_lines.py TRACE [--min-mb 8] [--top 30]`` builds ``alloc_hook.c`` (a numpy
memory handler, with the C compiler Python was built with) into bench/out, installs it on the
thread that runs the command, and runs ``perfledger analyze TRACE`` in this process (into a
temporary folder, removed after). Every array buffer of ``--min-mb`` MB or more made on that
thread (the analysing thread: the import's layout, the analysis passes, the step graph and
replay, the advisor's own thread work, the report; not the worker processes nor the threads
beside it) is counted by the line that made it (for the helpers of analysis/columns.py, also
the line that called them). Prints the total, then the lines by MB made, with the count of
arrays. The figures are bytes asked for, not pages: arrays made of pages just freed count as
much as fresh ones. Run it on two trees (``PYTHONPATH=<tree>/src``) to compare a change.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_WORKDIR  # noqa: E402

_SOURCE = Path(__file__).resolve().parent / "alloc_hook.c"


def _built() -> object:
    """The hook module, built into bench/out when its source is newer than the build."""
    import numpy as np
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    folder = DEFAULT_WORKDIR / "alloc_hook"
    target = folder / f"alloc_hook{sysconfig.get_config_var('EXT_SUFFIX')}"
    if not target.exists() or target.stat().st_mtime < _SOURCE.stat().st_mtime:
        extension = Extension(
            "alloc_hook",
            [str(_SOURCE)],
            include_dirs=[np.get_include()],
            extra_compile_args=["-O2"],
        )
        command = build_ext(Distribution({"ext_modules": [extension]}))
        command.build_lib = str(folder)
        command.build_temp = str(folder / "build")
        command.ensure_finalized()
        command.run()
    spec = importlib.util.spec_from_file_location("alloc_hook", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _place(file: str, function: str, line: int) -> str:
    return f"{file.split('/perfledger/')[-1]}:{line} {function}"


def main(argv: list[str] | None = None) -> int:
    """Command line of the allocation census."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--min-mb", type=float, default=8.0)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    hook = _built()
    hook.install(int(args.min_mb * (1 << 20)))  # type: ignore[attr-defined]
    import perfledger.__main__ as cli

    work = Path(tempfile.mkdtemp(prefix="alloc_lines-"))
    try:
        code = cli.main(["analyze", str(args.trace), "-o", str(work / "p"), "--no-ledger"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        raise SystemExit(f"analyze failed with exit code {code}")
    by_line: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for file, function, line, size, caller, called_in, caller_line in hook.records():  # type: ignore[attr-defined]
        place = _place(file, function, line)
        if caller is not None:
            place += " <- " + _place(caller, called_in, caller_line)
        by_line[place][0] += 1
        by_line[place][1] += size
    total = sum(size for _, size in by_line.values())
    print(
        f"arrays of {args.min_mb:g} MB or more on the analysing thread: "
        f"{sum(n for n, _ in by_line.values())}, {total / 2**20:,.0f} MB"
    )
    ranked = sorted(by_line.items(), key=lambda item: -item[1][1])
    for place, (n, size) in ranked[: args.top]:
        print(f"{size / 2**20:8,.0f} MB {n:5d}  {place}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
