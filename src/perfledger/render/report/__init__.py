"""The HTML report: one self-contained file (ECharts inlined, no network) under 5 MB.

The report lays out results computed elsewhere: every number it shows is a field of
:class:`~perfledger.render.report.data.ReportData` (accounting rows, gap report, op tables,
findings, headline figures). Building the payload only selects, samples and packs rows in
columns: the longest operators, a few steps of the timeline, evenly spaced counter samples.

Every string that came from a trace travels inside one JSON document in a
``<script type="application/json">`` block whose ``<``, ``>`` and ``&`` are escaped, and the
page writes it with ``textContent`` (or escapes it for chart tooltips), so an op named
``</script><img src=x onerror=alert(1)>`` is shown as text and runs nothing.

Modules: ``data`` (what the report shows), ``budgets`` (how much of it the payload holds),
``rows`` (the events and gaps the step timelines draw), ``steps`` (the steps shown and their
timelines), ``tables`` (tables, counters, accounting), ``cluster`` (the ranks and the
communication matrix), ``payload`` (the JSON document) and ``page`` (the HTML page: template,
inlined scripts, Content-Security-Policy, size limit).
"""
