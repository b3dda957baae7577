"""CPU seconds of the advisor's rules and of the operator tables on one trace, each version of
the code in its own child process, alternating.

The rank task's advisor phase runs the rank rules (``diagnose_rank``) on a profile the
analysis passes already made; the operator tables (``link_device_tasks``, ``op_summary``,
``kernel_details`` ...) are made by those passes. Each child imports TRACE once, analyses it
as the rank task does, then times in CPU seconds of its own process:
  - the operator tables: ``link_device_tasks`` and ``kernel_details`` on their own, and
    ``profile_of_rank`` (every table of the profile);
  - the rules, ``--repeat`` times over a fresh ``AdvisorContext`` each (no replay: the fixes'
    gains are the step replay's business, timed elsewhere), each rule on its own in the order
    ``diagnose`` runs them (what the context derives is charged to the first rule reading it),
    and the peak RSS above the level before the rules (polled every 5 ms);
  - the findings' digest, so that the versions can be checked to give the same findings.
The smallest of the repeats is kept. Versions are source trees (``--tree NAME=DIR``, DIR holding
``src/perfledger``, e.g. made by ``git archive``); the rounds alternate them.

Usage: python bench/advisor_cpu.py TRACE --tree before=/tmp/a --tree after=/tmp/b
       [--rounds 2] [--repeat 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import dataclasses, hashlib, json, sys, threading, time
from pathlib import Path
import psutil
from perfledger.analysis import ops
from perfledger.analysis.advisor import RULES, diagnose
from perfledger.analysis.advisor.ranks import PROFILE_RULES
from perfledger.analysis.profile import analyze_rank, profile_of_rank
from perfledger.memory import release_freed_memory
from perfledger.sources.kineto import load_kineto

def cpu_of(call):
    began = time.process_time()
    result = call()
    return time.process_time() - began, result

def peak_above(call):
    process = psutil.Process()
    release_freed_memory()
    base = process.memory_info().rss
    peak = base
    done = threading.Event()
    def poll():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process.memory_info().rss)
            done.wait(0.005)
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        result = call()
    finally:
        done.set()
        poller.join()
    return peak - base, result

if __name__ == "__main__":
    trace_path, workers, repeat = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    trace = load_kineto(trace_path, workers=workers)
    rank = analyze_rank(trace)
    figures = {}
    events = rank.events
    figures["link_device_tasks_s"], links = cpu_of(lambda: ops.link_device_tasks(events))
    figures["kernel_details_s"], _ = cpu_of(lambda: ops.kernel_details(events, links))
    del links
    figures["profile_of_rank_s"], profile = cpu_of(lambda: profile_of_rank(rank))
    release_freed_memory()
    spent = {}
    def timed(rule):
        def check(ctx, params):
            elapsed, outcome = cpu_of(lambda: rule.check(ctx, params))
            spent[rule.id] = spent.get(rule.id, 0.0) + elapsed
            return outcome
        return dataclasses.replace(rule, check=check)
    rules = [timed(r) for r in RULES if r.id not in PROFILE_RULES]
    best = None
    for _ in range(repeat):
        spent.clear()
        run = lambda: diagnose(profile, rules=rules, replays=None)
        peak, (elapsed, report) = peak_above(lambda: cpu_of(run))
        release_freed_memory()
        if best is None or elapsed < best[0]:
            best = (elapsed, dict(spent), peak, report)
    elapsed, spent, peak, report = best
    figures["rules_s"] = elapsed
    figures["rules_peak_mb"] = peak / 2**20
    figures["per_rule_s"] = spent
    digest = json.dumps(
        [[f.id, f.title, f.severity_ms, f.severity_pct, f.evidence] for f in report.findings]
        + [[s.rule, s.reason] for s in report.skipped],
        sort_keys=True, default=str,
    )
    figures["findings_sha"] = hashlib.sha256(digest.encode()).hexdigest()[:12]
    print(json.dumps(figures))
"""


def _child(tree: Path, trace: Path, workers: int, repeat: int) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    argv = [sys.executable, "-c", _CHILD, str(trace), str(workers), str(repeat)]
    child = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        raise SystemExit(f"the run of {tree} failed: {child.stderr[-3000:]}")
    figures: dict[str, object] = json.loads(child.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    trees = [(n, Path(d)) for n, _, d in (t.partition("=") for t in args.tree)]
    for round_ in range(1, args.rounds + 1):
        for name, tree in trees:
            figures = _child(tree, args.trace, args.workers, args.repeat)
            per_rule = figures.pop("per_rule_s")
            assert isinstance(per_rule, dict)
            rules = "  ".join(
                f"{rule}={seconds:.2f}"
                for rule, seconds in sorted(per_rule.items(), key=lambda kv: -kv[1])
            )
            print(
                f"round {round_} {name}: rules {figures['rules_s']:.2f} s CPU, "
                f"peak +{figures['rules_peak_mb']:.0f} MB; link_device_tasks "
                f"{figures['link_device_tasks_s']:.2f} s, kernel_details "
                f"{figures['kernel_details_s']:.2f} s, profile_of_rank "
                f"{figures['profile_of_rank_s']:.2f} s; findings {figures['findings_sha']}\n"
                f"    {rules}",
                flush=True,
            )


if __name__ == "__main__":
    main()
