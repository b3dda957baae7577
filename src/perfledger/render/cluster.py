"""cluster_summary.json, cluster_step_trace.csv and cluster_communication_matrix.csv: the
cluster pass's fields, laid out.

Writers only: every figure is a field of :class:`perfledger.model.cluster.ClusterReport`
(ns converted to ms, rounded to the µs) or a finding of the advisor's cluster rules.

``cluster_summary.json`` keys: ``format_version``, ``tool_version``, ``ranks``, ``compared``
("steps": the annotated step windows; "span": each device's whole span when the traces have no
step), ``per_rank`` (per rank: windows, steps, step_time_ms and each category in ms, means per
window), ``slow_ranks`` (rank ids, most suspect first), ``slow_rank_evidence``,
``load_balance`` (per category: spread_pct, mean/min/max ms and the min/max ranks),
``collectives`` (aligned count, arrival spread, per-rank arrivals, the most skewed, the names
that could not be aligned), ``links`` (per rank and transport link, when the source gives
them), ``communication_matrix`` (when the source gives one: ``pairs``, per communication
group, source and destination (numbered within the group, with the profiled rank each is when
known) and transport, bytes, ms, GB/s and the share of the transport's median bandwidth;
``slow_links``, the pairs under 80 % of it), ``findings`` (the ``slow_rank`` and
``load_imbalance`` findings, as in summary.json).

cluster_communication_matrix.csv (only when the source gives a matrix): ``group, src_rank,
dst_rank, src_global_rank, dst_global_rank, transport, steps, transit_bytes, transit_ns, gbps,
vs_transport_median_pct``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from perfledger.files import write_json
from perfledger.model import schema
from perfledger.model.cluster import ClusterReport, RankAccount
from perfledger.version import __version__

CLUSTER_FINDINGS: Final = ("slow_rank", "load_imbalance")
_MS_DECIMALS: Final = 3


def _ms(ns: float) -> float:
    return round(ns / 1e6, _MS_DECIMALS)


def _per_rank(a: RankAccount) -> dict[str, Any]:
    return {
        "rank": a.rank,
        "windows": a.windows,
        "steps": a.steps,
        "step_time_ms": _ms(a.per_window("wall")),
        "compute_ms": _ms(a.per_window("compute")),
        "communication_ms": _ms(a.per_window("communication")),
        "overlapped_communication_ms": _ms(a.per_window("overlapped_communication")),
        "memcpy_ms": _ms(a.per_window("memcpy")),
        "memset_ms": _ms(a.per_window("memset")),
        "idle_ms": _ms(a.per_window("idle")),
        "outside_communication_ms": _ms(a.outside_communication_ns / a.windows)
        if a.windows
        else 0.0,
    }


def cluster_summary_document(
    report: ClusterReport, findings: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The cluster_summary.json document (see the module doc)."""
    alignment = report.collectives
    return {
        "format_version": schema.FORMAT_VERSION,
        "tool_version": __version__,
        "ranks": list(report.ranks),
        "compared": report.basis,
        # per rank, how far its clock runs ahead of the first rank's, found from the ends of
        # the collectives matched across ranks (0 for every rank when none matched)
        "clock_offsets_ns": {str(r): int(report.clock_offsets_ns.get(r, 0)) for r in report.ranks},
        "per_rank": [_per_rank(a) for a in report.per_rank],
        "slow_ranks": [s.rank for s in report.slow_ranks],
        "slow_rank_evidence": [s.evidence() for s in report.slow_ranks],
        "load_balance": [
            {
                "category": s.category,
                "spread_pct": round(s.spread_pct, 2),
                "mean_ms": _ms(s.mean_ns),
                "min_ms": _ms(s.min_ns),
                "min_rank": s.min_rank,
                "max_ms": _ms(s.max_ns),
                "max_rank": s.max_rank,
            }
            for s in report.balance
        ],
        "collectives": {
            "aligned": alignment.aligned,
            "arrival_spread_median_ms": _ms(alignment.median_spread_ns),
            "arrival_spread_max_ms": _ms(alignment.max_spread_ns),
            "by_rank": [
                {
                    "rank": a.rank,
                    "collectives": a.collectives,
                    "last_arrivals": a.last_arrivals,
                    "waited_ms": _ms(a.waited_ns),
                    "library_wait_ms": _ms(a.library_wait_ns) if a.library_wait_ns >= 0 else None,
                }
                for a in alignment.arrivals
            ],
            "most_skewed": [
                {
                    "name": c.name,
                    "occurrence": c.occurrence,
                    "step": c.step,
                    "start_ns": c.first_start_ns,
                    "arrival_spread_ms": _ms(c.arrival_spread_ns),
                    "first_rank": c.first_rank,
                    "last_rank": c.last_rank,
                }
                for c in alignment.worst
            ],
            "unaligned_names": list(alignment.unaligned_names),
        },
        "links": [
            {
                "rank": row["rank"],
                "link": row["link"],
                "collectives": row["collectives"],
                "transit_bytes": row["transit_bytes"],
                "transit_ms": _ms(row["transit_ns"]),
                "gbps": round(row["gbps"], 3) if row["gbps"] == row["gbps"] else None,
            }
            for row in report.links.to_pylist()
        ],
        "communication_matrix": _matrix(report) if report.matrix.num_rows else None,
        "findings": [dict(f) for f in findings if f.get("id") in CLUSTER_FINDINGS],
    }


def _pair(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "group": row["group"],
        "src_rank": row["src_rank"],
        "dst_rank": row["dst_rank"],
        "src_global_rank": row["src_global_rank"],
        "dst_global_rank": row["dst_global_rank"],
        "transport": row["transport"],
        "steps": row["steps"],
        "transit_bytes": row["transit_bytes"],
        "transit_ms": _ms(row["transit_ns"]),
        "gbps": _finite(row["gbps"]),
        "vs_transport_median_pct": _finite(row["vs_transport_median_pct"]),
    }


def _finite(value: float) -> float | None:
    return round(value, 3) if value == value else None


def _matrix(report: ClusterReport) -> dict[str, Any]:
    return {
        "pairs": [_pair(row) for row in report.matrix.to_pylist()],
        "slow_links": [_pair(row) for row in report.slow_links.to_pylist()],
    }


def write_cluster_outputs(
    directory: Path, report: ClusterReport, findings: Sequence[Mapping[str, Any]]
) -> list[Path]:
    """Write cluster_summary.json, cluster_step_trace.csv (and the matrix) into ``directory``."""
    from perfledger.render import csvs

    summary = directory / "cluster_summary.json"
    write_json(summary, cluster_summary_document(report, findings))
    steps = directory / "cluster_step_trace.csv"
    csvs.write_csv(report.steps, steps)
    written = [summary, steps]
    if report.matrix.num_rows:
        matrix = directory / "cluster_communication_matrix.csv"
        csvs.write_csv(report.matrix, matrix)
        written.append(matrix)
    return written
