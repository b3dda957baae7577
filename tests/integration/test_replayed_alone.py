"""``replayed_alone`` counts the ranks whose collectives match none of another rank's, not the
ranks without collectives: those have nothing to match and are replayed alone as they should
be. Here rank 0 of tests/data/kineto/sampled_2ranks (its collectives) beside its rank 1 with
only the host's events left (no device task, so no collective)."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path
from typing import Any

from rich.console import Console

from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from tests.paths import DATA

SAMPLED = DATA / "kineto" / "sampled_2ranks"
HOST_CATEGORIES = {"cpu_op", "user_annotation", None}


def _host_only_rank(target: Path) -> None:
    document: dict[str, Any] = json.loads(
        gzip.decompress((SAMPLED / "rank-1.json.gz").read_bytes())
    )
    events = document["traceEvents"]
    document["traceEvents"] = [e for e in events if e.get("cat") in HOST_CATEGORIES]
    assert len(document["traceEvents"]) < len(events)  # the device's tasks are gone
    target.write_text(json.dumps(document))


def _replayed_alone(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in summary["quality"]["checks"] if c["id"] == "replayed_alone"]


def test_a_rank_without_collectives_is_not_counted_as_replayed_alone(tmp_path: Path) -> None:
    traces = tmp_path / "ranks"
    traces.mkdir()
    shutil.copy(SAMPLED / "rank-0.json.gz", traces / "rank-0.json.gz")
    _host_only_rank(traces / "rank-1.json")
    built = build_profile(
        [traces],
        tmp_path / "profile",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=0),
    )
    ranks = {int(r) for r in built.analysis.events["rank"].to_pylist()}
    assert ranks == {0, 1}  # the host-only rank is analysed
    (check,) = _replayed_alone(built.summary)
    # rank 0 has collectives and none is matched (rank 1 has none): counted; rank 1 not
    assert check["count"] == 1
    assert check["message"].startswith("rank 0: ")
    assert "rank 1" not in check["message"]
