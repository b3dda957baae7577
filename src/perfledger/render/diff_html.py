"""diff.html and the ledger's trend page: self-contained HTML (ECharts inlined, no network).

Both pages lay out a JSON document computed elsewhere (diff.json, or the ledger's runs) and
compute nothing. As in the report, every string that came from a trace or a user travels inside
one ``<script type="application/json">`` block whose ``<``, ``>`` and ``&`` are escaped, and the
page writes it with ``textContent`` (or escapes it for chart tooltips). A Content-Security-Policy
lets only the two inlined scripts run, by their hashes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from markupsafe import Markup

from perfledger.files import write_text
from perfledger.render.report.page import csp_hash, inline_asset, script_json, template_environment
from perfledger.version import __version__

DIFF_TEMPLATE: Final = "diff.html.j2"
TREND_TEMPLATE: Final = "diff_trend.html.j2"


# How every page render_page writes holds its data: the generator's name comes first.
_OWN_PAGE_MARK: Final = (
    b'<script type="application/json" id="perfledger-data">{"generator":"perfledger '
)


def is_own_page(data: bytes) -> bool:
    """Whether ``data`` is a page :func:`render_page` wrote (diff.html, a trend page)."""
    return _OWN_PAGE_MARK in data


def write_diff_html(path: Path, document: Mapping[str, Any]) -> None:
    """Write diff.html for a diff.json document (temporary name, then renamed)."""
    title = f"{document['base']['label']} → {document['current']['label']}"
    _write(path, render_page(DIFF_TEMPLATE, title, document))


def write_trend_html(path: Path, runs: Sequence[Mapping[str, Any]], *, title: str) -> None:
    """Write the trend page of ledger runs (dicts of the ledger's run fields, oldest first)."""
    _write(path, render_page(TREND_TEMPLATE, title, {"runs": list(runs)}))


def render_page(template_name: str, title: str, document: Mapping[str, Any]) -> str:
    """One page as an HTML string: the template, ECharts, the page's script and the data."""
    payload = {"generator": f"perfledger {__version__}", "title": title, **document}
    template = template_environment().get_template(template_name)
    echarts = inline_asset("echarts.min.js")
    context: dict[str, Any] = {
        "title": title,
        "echarts": Markup(echarts),
        "echarts_version": inline_asset("echarts.VERSION").splitlines()[0],
        "payload": Markup(script_json(payload)),
        "script_hashes": "",
    }
    # The page's script is a {% set app_js %} block of the template: its text is needed first
    # to put its hash into the Content-Security-Policy of the same page.
    app_js = str(template.make_module(context).app_js)  # type: ignore[attr-defined]
    context["script_hashes"] = Markup(" ".join(f"'{csp_hash(t)}'" for t in (echarts, app_js)))
    return template.render(context)


def _write(path: Path, html: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, html)
