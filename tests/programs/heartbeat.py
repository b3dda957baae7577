"""A program that never ends by itself, for the tests of what outlives ``perfledger record``.

``heartbeat.py PID_FILE [--child]`` writes its pid to PID_FILE (whole, through a temporary
name) and sleeps until killed; with ``--child`` it first starts a Python child that does the
same with ``PID_FILE.child`` (a grandchild of the launcher, as torchrun's workers are).
It imports no torch: it is quick to start.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pid_file", type=Path)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        subprocess.Popen([sys.executable, __file__, f"{args.pid_file}.child"])
    partial = args.pid_file.with_name(args.pid_file.name + ".partial")
    partial.write_text(str(os.getpid()))
    partial.replace(args.pid_file)
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
