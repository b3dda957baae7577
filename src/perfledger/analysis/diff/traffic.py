"""Memory copies and communication of two runs, compared: the profile's totals per step window."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from perfledger.analysis import opclass
from perfledger.analysis.diff.noise import NO_CHANGE, Change, DiffOptions, compare
from perfledger.analysis.diff.operators import OpRow, op_row
from perfledger.analysis.diff.tables import RunTables, column_values, windows

# copy directions in the order the tables list them; any other direction follows, sorted
DIRECTION_ORDER: Final[tuple[str, ...]] = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "unknown")


@dataclass(frozen=True)
class TransferDiff:
    """One copy direction per step: count, bytes, time; bandwidth over the whole profile."""

    direction: str
    count: Change
    bytes: Change
    time_ms: Change
    gbps: Change


@dataclass(frozen=True)
class CommunicationDiff:
    """Communication time per step: total, exposed (not under compute), and per operation."""

    total_ms: Change
    exposed_ms: Change
    overlapped_ms: Change
    operations: tuple[OpRow, ...]


def transfers_diff(base: RunTables, current: RunTables) -> tuple[TransferDiff, ...]:
    """Each copy direction either run has: count, bytes and time per step, bandwidth."""
    wb, wc = windows(base), windows(current)

    def by_direction(table: pa.Table) -> dict[str, dict[str, Any]]:
        return {str(r["direction"]): r for r in table.to_pylist()}

    rb, rc = by_direction(base.transfers), by_direction(current.transfers)
    directions = [d for d in DIRECTION_ORDER if d in rb or d in rc]
    directions += sorted((set(rb) | set(rc)) - set(DIRECTION_ORDER))
    empty = {"count": 0, "bytes": 0, "time_ns": 0, "gbps": None}
    result = []
    for direction in directions:
        b, c = rb.get(direction, empty), rc.get(direction, empty)
        result.append(
            TransferDiff(
                direction=direction,
                count=compare(float(b["count"]) / wb, float(c["count"]) / wc),
                bytes=compare(float(b["bytes"] or 0) / wb, float(c["bytes"] or 0) / wc),
                time_ms=compare(float(b["time_ns"]) / 1e6 / wb, float(c["time_ns"]) / 1e6 / wc),
                gbps=compare(_finite(b["gbps"]), _finite(c["gbps"])),
            )
        )
    return tuple(result)


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def communication_diff(
    base: RunTables, current: RunTables, options: DiffOptions
) -> CommunicationDiff:
    """Total, exposed and overlapped communication per step, and the operations that moved."""
    wb, wc = windows(base), windows(current)

    def totals(table: pa.Table, column: str) -> float:
        return float(column_values(table, column).sum()) / 1e6 if table.num_rows else 0.0

    def per_name(table: pa.Table) -> dict[tuple[str, str], tuple[float, float]]:
        result: dict[tuple[str, str], tuple[float, float]] = {}
        for row in table.to_pylist():
            key = (str(row["name"]), "comm")
            t, n = result.get(key, (0.0, 0.0))
            result[key] = (t + float(row["total_ns"]), n + float(row["count"]))
        return result

    has = base.communication.num_rows > 0 or current.communication.num_rows > 0
    names_b, names_c = per_name(base.communication), per_name(current.communication)
    rows = [
        op_row(
            key,
            opclass.COMMUNICATION,
            names_b.get(key, (0.0, 0.0)),
            names_c.get(key, (0.0, 0.0)),
            (wb, wc),
        )
        for key in sorted(set(names_b) | set(names_c))
    ]
    rows.sort(key=lambda r: (-abs(r.delta_ms), r.name))

    def change(column: str) -> Change:
        if not has:
            return NO_CHANGE
        return compare(
            totals(base.communication, column) / wb, totals(current.communication, column) / wc
        )

    return CommunicationDiff(
        total_ms=change("total_ns"),
        exposed_ms=change("exposed_ns"),
        overlapped_ms=change("overlapped_ns"),
        operations=tuple(rows[: options.top_movers]),
    )
