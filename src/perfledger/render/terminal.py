"""The terminal summary: the time account per rank and device, top operators, transfers, gaps.

Formats fields of the analysis results and of the summary document; computes nothing but the
share of a window a figure takes. Strings from traces are printed as plain text, never as
markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfledger.analysis.figures import representative_steps
from perfledger.model.accounts import IDLE_CAUSES, HostWindowAccount, WindowAccount
from perfledger.model.gaps import GapReport
from perfledger.model.schema import SPAN_STEP
from perfledger.model.whatif import WAIT
from perfledger.render.shown import escaped, shown

TOP_OPERATORS: Final = 10
_CAUSE_TITLES: Final = {
    "host_dispatch": "host dispatch",
    "sync": "sync",
    "dataloader": "dataloader",
    "launch_latency": "launch latency",
    "other": "other",
}


TOP_FINDINGS = 5
# The steps a time account lists: every one up to this many, else the first and the
# representative ones (median, slowest, fastest), the whole span always; step_trace.csv
# holds every step's row.
MAX_STEP_ROWS: Final = 12
# The host table holds two partitions of the same window side by side.
HOST_NESTING: Final = (
    "each row splits the wall time twice: dataloader + forward + backward + optimizer = wall "
    "(phases), and dataloader + operators + overhead = wall (operators run inside the phases; "
    "overhead: Python and framework time outside any operator). span: the whole trace, the "
    "time between profiled steps included (the profiler's stops and exports)"
)


def print_summary(
    console: Console,
    summary: Mapping[str, Any],
    *,
    windows: Sequence[WindowAccount] = (),
    host_windows: Sequence[HostWindowAccount] = (),
    op_statistic: pa.Table | None = None,
    transfers: pa.Table | None = None,
    gaps: GapReport | None = None,
    paths: Sequence[Path] = (),
    top_operators: int = TOP_OPERATORS,
    top_findings: int = TOP_FINDINGS,
) -> None:
    """Print the profile's summary to ``console``.

    Args:
        console: where to print.
        summary: the summary.json document (headline: source, steps, step time, loss).
        windows: device accounts (step rows and the span rows, step -1).
        host_windows: host-only accounts.
        op_statistic: ``analysis.ops.op_statistic`` result, sorted by total.
        transfers: ``analysis.transfers.transfers`` result.
        gaps: ``analysis.gaps.gap_report`` result.
        paths: the files written, listed last.
        top_operators: how many operators to list.
        top_findings: how many of the summary's findings (already sorted) to list.
    """
    quality = summary.get("quality") or {}
    if quality.get("confidence") not in (None, "high"):
        console.print(_quality_lines(quality))
    console.print(_headline(summary))
    for key, accounts in _by_rank_device(windows).items():
        console.print(_device_table(key, accounts, console.width))
        console.print(_idle_table(key, accounts, console.width))
    for rank, host_accounts in _by_rank_host(host_windows).items():
        console.print(_host_table(rank, host_accounts, console.width))
    if op_statistic is not None and op_statistic.num_rows:
        console.print(_operator_table(op_statistic, top_operators, console.width))
    if transfers is not None and transfers.num_rows:
        console.print(_transfer_table(transfers, console.width))
    if gaps is not None and gaps.count:
        console.print(_gap_table(gaps, console.width))
    path_line = _critical_path_line(summary.get("critical_path"))
    if path_line is not None:
        console.print(path_line)
    findings = [f for f in summary.get("findings") or () if isinstance(f, Mapping)]
    if findings:
        console.print(_findings_table(findings[:top_findings]))
        if len(findings) > top_findings:
            console.print(_also_line(findings[top_findings:]))
        console.print(_next_line(paths[0] if paths else None))
    elif summary.get("step_count"):
        console.print(Text("no finding: no rule's threshold is crossed", style="bold"))
    skipped = _skipped_line(summary.get("advisor_skipped"))
    if skipped is not None:
        console.print(skipped)
    unread = summary.get("unread_input", summary.get("loss"))
    if unread:
        console.print(Text.assemble(("trace incomplete: ", "bold yellow"), escaped(unread)))
    if paths:
        console.print(Text("wrote:", style="bold"))
        for path in paths:
            console.print(shown(f"  {path}"))


# Checks listed under the quality line; the rest are counted (summary.json has them all).
TOP_CHECKS = 5


def _quality_lines(quality: Mapping[str, Any]) -> Text:
    """The quality report, first: the confidence, then what was repaired or is doubtful."""
    confidence = str(quality.get("confidence"))
    style = "bold red" if confidence == "low" else "bold yellow"
    checks = [c for c in quality.get("checks") or () if isinstance(c, Mapping)]
    # the checks that set the confidence first: doubtful headline figures, then repairs
    checks.sort(key=lambda c: (not _headline_check(c), bool(c.get("repaired"))))
    lines = Text.assemble(
        (f"data quality {confidence}: ", style),
        "some figures rest on repaired or doubtful data (every check: summary.json, quality)",
    )
    for check in checks[:TOP_CHECKS]:
        mark = "repaired" if check.get("repaired") else "doubtful"
        affects = ", ".join(check.get("affects") or ()) or "nothing headline"
        lines.append(f"\n  {mark}: {escaped(check.get('message'))} [affects {affects}]")
    if len(checks) > TOP_CHECKS:
        lines.append(f"\n  ... and {len(checks) - TOP_CHECKS} more checks in summary.json")
    return lines


def _headline_check(check: Mapping[str, Any]) -> bool:
    return bool(set(check.get("affects") or ()) & {"step_time", "utilization", "time_account"})


def _findings_table(findings: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(
        title="what holds the step back (recoverable time per step)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        expand=True,
    )
    table.add_column("finding", no_wrap=True)
    table.add_column("ms/step", justify="right", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("evidence and what to do", ratio=1, overflow="fold")
    for finding in findings:
        suggestion = escaped(finding.get("suggestion") or "").split(". ")[0]
        table.add_row(
            shown(finding.get("id"), style="bold"),
            f"{float(finding.get('severity_ms') or 0.0):.3f}",
            f"{float(finding.get('severity_pct') or 0.0):.1f}%",
            Text.assemble(
                escaped(finding.get("title")),
                "\n",
                *_replayed_gain(finding),
                ("→ " + suggestion, "dim"),
            ),
        )
    return table


def _replayed_gain(finding: Mapping[str, Any]) -> tuple[str | tuple[str, str], ...]:
    """The fix's replayed gain (summary.json's whatif_ms) as a line, when the finding has one."""
    gain = finding.get("whatif_ms")
    if not isinstance(gain, (int, float)):
        return ()
    return (("replayed: ", "bold"), f"the fix alone gives {float(gain):.3f} ms/step back", "\n")


def _also_line(findings: Sequence[Mapping[str, Any]]) -> Text:
    """The findings below the table, by name and gain, so that the terminal names every
    finding the report shows."""
    parts = [
        f"{escaped(f.get('id'))} {float(f.get('severity_ms') or 0.0):.3f} ms/step" for f in findings
    ]
    return Text.assemble(
        ("also: ", "bold"), "; ".join(parts), (" (report.html and summary.json)", "dim")
    )


def _skipped_line(skipped: Any) -> Text | None:
    """The rules that could not apply to this profile, counted by reason (summary.json's
    advisor_skipped lists them): silent, but not forgotten."""
    if not isinstance(skipped, Sequence) or not skipped:
        return None
    by_reason: dict[str, int] = {}
    for entry in skipped:
        if isinstance(entry, Mapping):
            reason = str(entry.get("reason") or "no data")
            by_reason[reason] = by_reason.get(reason, 0) + 1
    parts = [
        f"{count} rule{'s' if count != 1 else ''}: {escaped(reason)}"
        for reason, count in by_reason.items()
    ]
    return Text.assemble(("not applicable: ", "dim bold"), ("; ".join(parts), "dim"))


def _next_line(profile: Path | None) -> Text:
    """What to do with the findings: fix, record again, compare."""
    where = "PROFILE"
    if profile is not None:
        # as the user would type it: relative to the current folder when inside it
        try:
            where = str(profile.resolve().relative_to(Path.cwd().resolve()))
        except (OSError, ValueError):
            where = str(profile)
    return Text.assemble(
        ("next: ", "bold"),
        "apply the top finding's fix, record again (-o NEW), then ",
        shown(f"perfledger diff {where} NEW"),
    )


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def _share(ns: int, wall_ns: int) -> str:
    pct = 100.0 * ns / wall_ns if wall_ns > 0 else 0.0
    return f"{ns / 1e6:.3f} ({pct:.1f}%)"


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover - the loop always returns


def _step_label(step: int) -> str:
    return "span" if step == SPAN_STEP else str(step)


Cell = str | Text


def _table(
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    width: int,
    sections: Sequence[bool] = (),
    name_width: int | None = None,
) -> Table:
    """A table whose numbers are never cut: on a narrow console a cell wraps at its spaces.

    Args:
        title: shown above the table.
        header: column titles; the first column is left-aligned, the others right-aligned.
        rows: the cells.
        sections: per row, whether a rule follows it.
        width: the console width; when the rows do not fit on one line each, a cell's
            figures are stacked ("12.345" over "(40.0%)") rather than cut.
        name_width: when set, the first column holds names cut with an ellipsis beyond this
            width (trace strings can be hundreds of characters long).
    """
    natural = sum(
        max([len(header[i]), *(len(_plain(row[i])) for row in rows)]) + 2
        for i in range(len(header))
        if not (i == 0 and name_width is not None)
    )
    if natural > width:
        rows = [[_stacked(cell) for cell in row] for row in rows]
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for index, title_text in enumerate(header):
        texts = [title_text, *(_plain(row[index]) for row in rows)]
        # The longest unbreakable word of the column: numbers wrap between words, never inside.
        longest_word = max(len(word) for text in texts for word in text.split() or [""])
        if index == 0 and name_width is not None:
            table.add_column(
                title_text,
                justify="left",
                no_wrap=True,
                overflow="ellipsis",
                min_width=min(longest_word, 16),
                max_width=name_width,
            )
        else:
            table.add_column(
                title_text,
                justify="left" if index == 0 else "right",
                overflow="fold",
                min_width=longest_word,
            )
    for index, row in enumerate(rows):
        table.add_row(*row, end_section=index < len(sections) and sections[index])
    return table


def _stacked(cell: Cell) -> Cell:
    return cell.replace(" (", "\n(") if isinstance(cell, str) else cell


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _headline(summary: Mapping[str, Any]) -> Text:
    source = summary.get("source") or {}
    ranks = summary.get("ranks") or []
    step_time = summary.get("step_time_ms")
    step_count = summary.get("step_count", 0)
    unprofiled = summary.get("unprofiled_step_ms")
    utilization = summary.get("device_utilization_pct")
    compute = summary.get("device_compute_pct")
    parts = [
        f"source {escaped(source.get('kind', 'unknown'))}",
        f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''}",
        f"{step_count} steps",
        f"step time {step_time:.3f} ms (median)" if step_time is not None else "no step marks",
        *([f"unprofiled {unprofiled:.3f} ms"] if isinstance(unprofiled, int | float) else []),
        *([f"device utilisation {utilization:.2f}%"] if utilization is not None else []),
        *([f"compute {compute:.2f}%"] if compute is not None else []),
        _overhead_text(summary),
    ]
    return Text.assemble(("perfledger", "bold"), "  ", " · ".join(parts))


def _overhead_text(summary: Mapping[str, Any]) -> str:
    """The profiler's cost with its noise: a figure within the noise is said to be so, and a
    negative one is never printed as a cost."""
    overhead = summary.get("profiler_overhead_pct")
    noise = summary.get("profiler_overhead_noise_pct")
    if not isinstance(overhead, int | float):
        return "overhead unknown"
    if not isinstance(noise, int | float):
        if overhead < 0:
            return f"profiler overhead none measured (profiled steps {-overhead:.2f}% faster)"
        return f"profiler overhead {overhead:.2f}%"
    if abs(overhead) <= noise:
        return f"profiler overhead within noise ({overhead:+.2f}% ± {noise:.2f}%)"
    if overhead < 0:
        return (
            f"profiler overhead none measured (profiled steps {-overhead:.2f}% ± {noise:.2f}% "
            "faster)"
        )
    return f"profiler overhead {overhead:.2f}% ± {noise:.2f}%"


def _sorted_steps(accounts: Sequence[Any]) -> list[Any]:
    return sorted(accounts, key=lambda a: (a.step == SPAN_STEP, a.step))


def _before_span(accounts: Sequence[Any]) -> list[bool]:
    # A rule above the span row sets the whole-span figures apart from the steps.
    return [
        i + 1 < len(accounts) and accounts[i + 1].step == SPAN_STEP and a.step != SPAN_STEP
        for i, a in enumerate(accounts)
    ]


def _listed_steps(accounts: Sequence[Any]) -> tuple[list[Any], str | None]:
    """The rows of a time account table (``accounts`` in step order, the span last) and,
    where some steps are left out (more than :data:`MAX_STEP_ROWS`), the line saying which
    are listed."""
    steps = [a for a in accounts if a.step != SPAN_STEP]
    if len(steps) <= MAX_STEP_ROWS:
        return list(accounts), None
    chosen = representative_steps([a.step for a in steps], [a.wall_ns for a in steps])
    first = steps[0].step
    listed = {first, *chosen.values()}
    roles = ", ".join([f"first {first}", *(f"{role} {step}" for role, step in chosen.items())])
    note = (
        f"{len(listed)} of {len(steps):,} steps listed ({roles}); step_trace.csv has every "
        "step's row"
    )
    return [a for a in accounts if a.step in listed or a.step == SPAN_STEP], note


def _by_rank_device(windows: Sequence[WindowAccount]) -> dict[tuple[int, int], list[Any]]:
    groups: dict[tuple[int, int], list[Any]] = {}
    for w in sorted(windows, key=lambda w: (w.rank, w.device)):
        groups.setdefault((w.rank, w.device), []).append(w)
    return {key: _sorted_steps(group) for key, group in groups.items()}


def _by_rank_host(windows: Sequence[HostWindowAccount]) -> dict[int, list[Any]]:
    groups: dict[int, list[Any]] = {}
    for w in sorted(windows, key=lambda w: w.rank):
        groups.setdefault(w.rank, []).append(w)
    return {rank: _sorted_steps(group) for rank, group in groups.items()}


def _device_table(key: tuple[int, int], accounts: Sequence[WindowAccount], width: int) -> Table:
    rank, device = key
    accounts, note = _listed_steps(accounts)
    rows = [
        [
            _step_label(w.step),
            _ms(w.wall_ns),
            _share(w.compute_ns, w.wall_ns),
            _share(w.communication_ns, w.wall_ns),
            _share(w.memcpy_ns, w.wall_ns),
            _share(w.memset_ns, w.wall_ns),
            _share(w.idle_ns, w.wall_ns),
        ]
        for w in accounts
    ]
    return _captioned(
        _table(
            f"rank {rank} · device {device}: time account, ms (% of the window)",
            ["step", "wall ms", "compute", "communication", "memcpy", "memset", "idle"],
            rows,
            sections=_before_span(accounts),
            width=width,
        ),
        note,
    )


def _idle_table(key: tuple[int, int], accounts: Sequence[WindowAccount], width: int) -> Table:
    rank, device = key
    accounts, note = _listed_steps(accounts)
    rows = [
        [
            _step_label(w.step),
            _share(w.idle_ns, w.wall_ns),
            *(_share(getattr(w, f"idle_{cause}_ns"), w.wall_ns) for cause in IDLE_CAUSES),
        ]
        for w in accounts
    ]
    return _captioned(
        _table(
            f"rank {rank} · device {device}: idle by cause, ms (% of the window)",
            ["step", "idle", *(_CAUSE_TITLES[c] for c in IDLE_CAUSES)],
            rows,
            sections=_before_span(accounts),
            width=width,
        ),
        note,
    )


def _host_table(rank: int, accounts: Sequence[HostWindowAccount], width: int) -> Table:
    accounts, note = _listed_steps(accounts)
    rows = [
        [
            _step_label(w.step),
            _ms(w.wall_ns),
            _share(w.dataloader_ns, w.wall_ns),
            _share(w.forward_ns, w.wall_ns),
            _share(w.backward_ns, w.wall_ns),
            _share(w.optimizer_ns, w.wall_ns),
            _share(w.operator_ns, w.wall_ns),
            _share(w.overhead_ns, w.wall_ns),
        ]
        for w in accounts
    ]
    header = ["step", "wall ms", "dataloader", "forward", "backward", "optimizer"]
    table = _table(
        f"rank {rank} · host (main thread): time account, ms (% of the window)",
        [*header, "operators", "overhead"],
        rows,
        sections=_before_span(accounts),
        width=width,
    )
    return _captioned(table, HOST_NESTING if note is None else f"{note}. {HOST_NESTING}")


def _captioned(table: Table, caption: str | None) -> Table:
    """The table with ``caption`` under it, left-aligned (none: as it is)."""
    if caption is not None:
        table.caption = caption
        table.caption_justify = "left"
    return table


def _operator_table(statistic: pa.Table, limit: int, width: int) -> Table:
    rows: list[list[Cell]] = [
        [
            shown(row["name"]),
            shown(row["kind"]),
            str(row["count"]),
            _ms(row["total_ns"]),
            f"{row['avg_ns'] / 1e3:.3f}",
            f"{100.0 * row['ratio']:.1f}%",
        ]
        for row in statistic.slice(0, limit).to_pylist()
    ]
    return _table(
        f"top {limit} operators by time",
        ["operator", "kind", "count", "total ms", "avg µs", "share"],
        rows,
        name_width=60,
        width=width,
    )


def _transfer_table(transfers: pa.Table, width: int) -> Table:
    rows: list[list[Cell]] = []
    for row in transfers.to_pylist():
        gbps = row["gbps"]
        rows.append(
            [
                shown(row["direction"]),
                str(row["count"]),
                _bytes(row["bytes"]),
                _ms(row["time_ns"]),
                "-" if gbps is None or math.isnan(gbps) else f"{gbps:.2f}",
                str(row["pageable_count"]),
                str(row["small_count"]),
            ]
        )
    return _table(
        "memory copies",
        ["direction", "count", "bytes", "time ms", "GB/s", "pageable", "under 64 KiB"],
        rows,
        width=width,
    )


def _gap_table(report: GapReport, width: int) -> Table:
    rows: list[list[Cell]] = []
    for bucket in report.buckets:
        by_cause = {share.cause: share.total_ns for share in bucket.by_cause}
        rows.append(
            [
                bucket.label,
                str(bucket.count),
                _ms(bucket.total_ns),
                *(_ms(by_cause.get(cause, 0)) for cause in IDLE_CAUSES),
            ]
        )
    return _table(
        "device idle gaps by duration, ms by cause",
        ["gap length", "count", "total ms", *(_CAUSE_TITLES[c] for c in IDLE_CAUSES)],
        rows,
        width=width,
    )


def _critical_path_line(critical_path: Any) -> Text | None:
    """One line: what the steps' critical paths are spent on (summary.json's
    critical_path.bound_by_ms), largest first; communication with its wait for peers
    (bound_by_parts_ms)."""
    if not isinstance(critical_path, Mapping):
        return None
    bound = critical_path.get("bound_by_ms") or {}
    split = critical_path.get("bound_by_parts_ms") or {}
    total = sum(v for v in bound.values() if isinstance(v, int | float))
    if not bound or total <= 0:
        return None
    shares = []
    for name, ms in list(bound.items())[:4]:
        share = f"{name} {100.0 * ms / total:.0f}%"
        parts = split.get(name)
        waited = parts.get(WAIT) if isinstance(parts, Mapping) else None
        if isinstance(waited, int | float) and waited > 0:
            share += f" (waiting for peers {100.0 * waited / total:.0f}%)"
        shares.append(share)
    parts = ", ".join(shares)
    return Text.assemble(("critical path: ", "bold"), escaped(parts), " (perfledger whatif)")
