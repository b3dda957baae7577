/* perfledger report: draws the results packed in #perfledger-data.
 * Strings from traces only ever reach the page through textContent, or through esc() in
 * chart tooltips (ECharts inserts tooltip strings as HTML). */
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("perfledger-data").textContent);
  var charts = {};
  var MAX_DOM_ROWS = 500;

  var CATEGORY_COLOURS = {
    "compute": "#2e7d32",
    "communication": "#1565c0",
    "memcpy": "#6a1b9a",
    "memset": "#ad1457",
    "idle: host_dispatch": "#d32f2f",
    "idle: sync": "#ef6c00",
    "idle: dataloader": "#f9a825",
    "idle: launch_latency": "#9e9d24",
    "idle: other": "#9e9e9e",
    "dataloader": "#f9a825",
    "forward": "#1e88e5",
    "backward": "#43a047",
    "optimizer": "#8e24aa",
    "overhead": "#9e9e9e"
  };
  var CAUSE_COLOURS = {
    "host_dispatch": "#d32f2f",
    "sync": "#ef6c00",
    "dataloader": "#f9a825",
    "launch_latency": "#9e9d24",
    "other": "#9e9e9e"
  };
  var KIND_COLOURS = {
    "cpu_op": "#64b5f6",
    "python": "#b3d4f5",
    "annotation": "#ffb74d",
    "step": "#cfd8dc",
    "runtime": "#81c784",
    "sync": "#ff8a65",
    "dataloader": "#f9a825",
    "kernel": "#2e7d32",
    "comm": "#1565c0",
    "memcpy": "#6a1b9a",
    "memset": "#ad1457",
    "device_annotation": "#b0bec5",
    "instant": "#263238"
  };

  // ---------------------------------------------------------------- helpers

  function esc(value) {
    return String(value)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function isNum(v) {
    return typeof v === "number" && isFinite(v);
  }

  function fmtMs(ms) {
    if (!isNum(ms)) return "n/a";
    var a = Math.abs(ms);
    if (a >= 1000) return (ms / 1000).toFixed(3) + " s";
    if (a >= 1) return ms.toFixed(3) + " ms";
    return (ms * 1000).toFixed(1) + " µs";
  }

  function fmtNs(ns) {
    return isNum(ns) ? fmtMs(ns / 1e6) : "n/a";
  }

  function fmtUs(us) {
    return isNum(us) ? fmtMs(us / 1000) : "n/a";
  }

  function fmtBytes(b) {
    if (!isNum(b) || b < 0) return "n/a";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (b >= 1024 && i < units.length - 1) {
      b /= 1024;
      i += 1;
    }
    return (i === 0 ? b.toFixed(0) : b.toFixed(2)) + " " + units[i];
  }

  function fmtPct(p) {
    return isNum(p) ? p.toFixed(1) + " %" : "n/a";
  }

  function fmtCell(value, type) {
    if (value === null || value === undefined) return "";
    switch (type) {
      case "ns": return fmtNs(value);
      case "instant": return "+" + fmtNs(value);
      case "bytes": return fmtBytes(value);
      case "ratio": return isNum(value) ? (value * 100).toFixed(2) + " %" : "";
      case "pct": return fmtPct(value);
      case "float": return isNum(value) ? String(Math.round(value * 1000) / 1000) : "";
      default: return String(value);
    }
  }

  function chart(id, option) {
    var node = document.getElementById(id);
    var existing = charts[id];
    if (existing) existing.dispose();
    var c = echarts.init(node, null, { renderer: "canvas" });
    option.animation = false;
    c.setOption(option);
    charts[id] = c;
    return c;
  }

  function empty(node, text) {
    node.replaceChildren(el("p", "empty", text));
  }

  window.addEventListener("resize", function () {
    Object.keys(charts).forEach(function (k) { charts[k].resize(); });
  });

  // ---------------------------------------------------------------- header and headline

  function renderHeader() {
    var meta = DATA.meta || {};
    var parts = [];
    if (meta.source && typeof meta.source === "object") {
      if (meta.source.kind) parts.push("source: " + meta.source.kind);
      if (Array.isArray(meta.source.files) && meta.source.files.length) {
        parts.push(meta.source.files.length + " file(s): " + meta.source.files.slice(0, 3).join(", "));
      }
    } else if (meta.source_kind) {
      parts.push("source: " + meta.source_kind);
    }
    ["torch_version", "cuda_version", "cann_version", "device_name"].forEach(function (k) {
      if (meta[k]) parts.push(k.replace(/_/g, " ") + ": " + meta[k]);
    });
    document.getElementById("report-meta").textContent = parts.join(" · ");
    document.getElementById("generator").textContent = DATA.generator;
  }

  function renderHeadline() {
    var h = DATA.headline || {};
    var host = document.getElementById("headline-cards");
    var throughput = isNum(h.throughput)
      ? (Math.round(h.throughput * 100) / 100) + (h.throughput_unit ? " " + h.throughput_unit : "")
      : "n/a";
    var utilisation = fmtPct(h.device_utilization_pct);
    var perDevice = h.device_utilization || [];
    if (!isNum(h.device_utilization_pct) && perDevice.length > 1) {
      utilisation = perDevice.slice(0, 4).map(function (d) { return fmtPct(d[1]); }).join(" · ") +
        (perDevice.length > 4 ? " …" : "");
    }
    var cards = [
      ["Median step time", fmtMs(h.step_time_ms)],
      ["Device utilisation", utilisation],
      ["Throughput", throughput],
      ["Profiler overhead", fmtPct(h.profiler_overhead_pct)],
      ["Steps", isNum(h.step_count) ? String(h.step_count) : "n/a"],
      ["Ranks", isNum(h.ranks) ? String(h.ranks) : "n/a"]
    ];
    cards.forEach(function (c) {
      var card = el("div", "card");
      card.appendChild(el("div", "label", c[0]));
      card.appendChild(el("div", "value", c[1]));
      host.appendChild(card);
    });
    if (h.loss) {
      var loss = document.getElementById("loss");
      loss.textContent = "Part of the trace could not be read: " + h.loss;
      loss.hidden = false;
    }
  }

  // ---------------------------------------------------------------- accounting

  function renderAccounting() {
    var groups = (DATA.accounting || []).concat(DATA.host_accounting || []);
    var select = document.getElementById("accounting-device");
    var box = document.getElementById("chart-accounting");
    if (!groups.length || !groups.some(function (g) { return g.steps.length; })) {
      select.parentNode.hidden = true;
      empty(box, "No step accounting in this profile.");
      box.className = "";
      return;
    }
    groups.forEach(function (g, i) {
      var opt = el("option", null, g.label);
      opt.value = String(i);
      select.appendChild(opt);
    });
    var hint = document.querySelector("#accounting .hint");
    var deviceHint = hint.textContent;
    function draw() {
      var g = groups[Number(select.value)];
      hint.textContent = g.device === undefined
        ? "Every instant of a step on the main thread belongs to one category: data loading, " +
          "forward, backward or optimizer operators, else framework and Python overhead."
        : deviceHint;
      var series = g.series.map(function (s) {
        return {
          name: s.name,
          type: "bar",
          stack: "wall",
          barMaxWidth: 40,
          itemStyle: { color: CATEGORY_COLOURS[s.name] || null },
          data: s.ms
        };
      });
      chart("chart-accounting", {
        tooltip: {
          trigger: "axis",
          axisPointer: { type: "shadow" },
          formatter: function (items) {
            if (!items.length) return "";
            var i = items[0].dataIndex;
            var lines = ["<b>step " + esc(g.steps[i]) + "</b> · wall " + esc(fmtMs(g.wall_ms[i]))];
            items.forEach(function (it) {
              if (it.value > 0) lines.push(it.marker + esc(it.seriesName) + ": " + esc(fmtMs(it.value)));
            });
            if (g.overlapped_communication_ms && g.overlapped_communication_ms[i] > 0) {
              lines.push("overlapped communication: " + esc(fmtMs(g.overlapped_communication_ms[i])));
            }
            return lines.join("<br>");
          }
        },
        legend: { type: "scroll", top: 0 },
        grid: { left: 70, right: 20, top: 40, bottom: 60 },
        xAxis: { type: "category", name: "step", data: g.steps.map(String) },
        yAxis: { type: "value", name: "ms" },
        dataZoom: g.steps.length > 60 ? [{ type: "slider" }, { type: "inside" }] : [],
        series: series
      });
      var spanHost = document.getElementById("accounting-span");
      spanHost.replaceChildren();
      if (g.span) {
        var cols = Object.keys(g.span);
        spanHost.appendChild(el("h3", null, "Whole device span (first task to last)"));
        var spanTable = el("div");
        spanHost.appendChild(spanTable);
        renderTable(spanTable, {
          total_rows: 1,
          shown_rows: 1,
          columns: cols.map(function (c) {
            return { name: c + " (ms)", type: "float", values: [g.span[c]] };
          })
        }, { filter: false });
      }
    }
    select.addEventListener("change", draw);
    draw();
  }

  // ---------------------------------------------------------------- ranks

  function renderCluster() {
    var c = DATA.cluster;
    var section = document.getElementById("cluster");
    var link = document.querySelector('nav a[href="#cluster"]');
    if (!c) {  // one rank: nothing to compare
      section.remove();
      if (link) link.remove();
      return;
    }
    var parts = [c.ranks + " ranks, " + (c.basis === "steps" ? "per step" : "whole device span (no step annotation)")];
    parts.push(c.slow_ranks.length ? "slow rank" + (c.slow_ranks.length > 1 ? "s " : " ") + c.slow_ranks.join(", ") : "no slow rank");
    // the categories the load_imbalance finding judged uneven (none when it did not fire)
    var imbalance = (DATA.findings || []).filter(function (f) { return f.id === "load_imbalance"; })[0];
    var uneven = imbalance && imbalance.evidence && imbalance.evidence.imbalanced || [];
    var spread = c.balance.filter(function (b) { return uneven.indexOf(b.category) >= 0; });
    spread.forEach(function (b) {
      parts.push(b.category + " spread " + fmtPct(b.spread_pct) + " (rank " + b.min_rank + " to " + b.max_rank + ")");
    });
    if (c.steps.length < c.total_steps || c.lanes.length < c.total_lanes) {
      parts.push("showing " + c.steps.length + " of " + c.total_steps + " steps, " + c.lanes.length + " of " + c.total_lanes + " devices");
    }
    document.getElementById("cluster-note").textContent = parts.join(" · ");
    heatMap("chart-cluster-wall", c, c.wall_ms, "step time");
    heatMap("chart-cluster-idle", c, c.idle_ms, "idle");
    renderTable(document.getElementById("table-cluster_ranks"), c.per_rank);
    renderMatrix(c.matrix);
  }

  function fmtGbps(v) {
    return isNum(v) ? v.toFixed(2) + " GB/s" : "n/a";
  }

  function renderMatrix(m) {
    var box = document.getElementById("cluster-matrix");
    if (!m) {  // the source wrote no rank-to-rank figures: no chart at all
      box.remove();
      return;
    }
    var rows = m.rows;
    var srcAt = {};
    var dstAt = {};
    m.src_ranks.forEach(function (r, i) { srcAt[r] = i; });
    m.dst_ranks.forEach(function (r, i) { dstAt[r] = i; });
    // every transport of a pair, for the tooltip of its cell
    var pairRows = {};
    rows.src_rank.forEach(function (s, i) {
      var key = dstAt[rows.dst_rank[i]] + "," + srcAt[s];
      (pairRows[key] = pairRows[key] || []).push(i);
    });
    var parts = [m.total_rows + " pairs (source rank, destination rank, transport)"];
    // ranks as the communication group numbers its members
    if (m.group !== null && m.group !== undefined) {
      parts.push("ranks of group " + m.group + (m.groups > 1 ?
        " (of " + m.groups + " groups: the one that moved the most bytes)" : ""));
    }
    if (m.src_ranks.length < m.total_src_ranks || m.dst_ranks.length < m.total_dst_ranks) {
      parts.push("showing the first " + m.src_ranks.length + " of " + m.total_src_ranks +
        " source ranks and " + m.dst_ranks.length + " of " + m.total_dst_ranks + " destination ranks");
    }
    parts.push(m.slow_links_total ? m.slow_links_total + " slow link" + (m.slow_links_total > 1 ? "s" : "") : "no slow link");
    document.getElementById("cluster-matrix-note").textContent = parts.join(" · ");

    // from 0 GB/s: links a few % apart look alike, a link at half the others' speed does not
    var high = 0;
    m.cells.forEach(function (v) { high = Math.max(high, v[2]); });
    if (!(high > 0)) high = 1;
    var id = "chart-cluster-matrix";
    document.getElementById(id).style.height = Math.min(900, Math.max(200, 26 * m.src_ranks.length + 130)) + "px";
    chart(id, {
      tooltip: {
        formatter: function (p) {
          var x = p.value[0];
          var y = p.value[1];
          var lines = ["rank " + esc(m.src_ranks[y]) + " → rank " + esc(m.dst_ranks[x])];
          (pairRows[x + "," + y] || []).forEach(function (i) {
            lines.push(esc(rows.transport[i]) + ": " +
              esc((rows.transit_bytes[i] / 1e6).toFixed(1)) + " MB in " +
              esc(fmtMs(rows.transit_ns[i] / 1e6)) + " · " + esc(fmtGbps(rows.gbps[i])) + " · " +
              esc(fmtPct(rows.vs_transport_median_pct[i])) + " of the " +
              esc(rows.transport[i]) + " median");
          });
          return lines.join("<br>");
        }
      },
      grid: { left: 80, right: 20, top: 44, bottom: 80 },
      xAxis: {
        type: "category", name: "destination rank", nameLocation: "middle", nameGap: 28,
        position: "top", data: m.dst_ranks.map(String), splitArea: { show: true }
      },
      yAxis: {
        type: "category", name: "source rank", nameLocation: "middle", nameGap: 44,
        data: m.src_ranks.map(String), inverse: true, splitArea: { show: true }
      },
      visualMap: {
        seriesIndex: 0,
        dimension: 2,  // the GB/s; the row index follows it in each cell
        min: 0,
        max: high,
        calculable: true,
        orient: "horizontal",
        left: "center",
        bottom: 0,
        text: [fmtGbps(high), fmtGbps(0)],
        // dark for the slow end: a slow link stands out of the pale ones
        inRange: { color: ["#49006a", "#c51b8a", "#fbb4c9"] }
      },
      series: [
        { type: "heatmap", data: m.cells, emphasis: { itemStyle: { borderColor: "#333", borderWidth: 1 } } },
        {
          type: "heatmap",
          data: m.local_cells,
          itemStyle: { color: "#d0d0d0" },
          label: { show: true, formatter: "LOCAL", fontSize: 10, color: "#333" },
          emphasis: { itemStyle: { borderColor: "#333", borderWidth: 1 } }
        }
      ]
    });

    var host = document.getElementById("cluster-slow-links");
    if (!m.slow_links_total) {
      empty(host, "No slow link: every link carries at least " + m.slow_below_pct +
        " % of its transport's median bandwidth.");
    } else {
      renderTable(host, m.slow_links, { filter: false });
    }
  }

  function heatMap(id, c, cells, label) {
    // the colour scale spans the values shown, so that a rank a few % off stands out
    var high = -Infinity;
    var low = Infinity;
    cells.forEach(function (v) { high = Math.max(high, v[2]); low = Math.min(low, v[2]); });
    if (!(high > low)) low = 0;
    if (!(high > 0)) high = 1;
    document.getElementById(id).style.height = Math.min(900, Math.max(180, 22 * c.lanes.length + 110)) + "px";
    chart(id, {
      tooltip: {
        formatter: function (p) {
          return esc(c.lanes[p.value[1]]) + " · step " + esc(c.steps[p.value[0]]) + "<br>" +
            esc(label) + ": " + esc(fmtMs(p.value[2]));
        }
      },
      grid: { left: 120, right: 20, top: 10, bottom: 80 },
      xAxis: { type: "category", name: "step", data: c.steps.map(String), splitArea: { show: true } },
      yAxis: { type: "category", data: c.lanes, inverse: true, splitArea: { show: true } },
      visualMap: {
        min: low,
        max: high,
        calculable: true,
        orient: "horizontal",
        left: "center",
        bottom: 0,
        text: [fmtMs(high), fmtMs(low)],
        inRange: { color: ["#f7fbff", "#6baed6", "#08306b"] }
      },
      series: [{ type: "heatmap", data: cells, emphasis: { itemStyle: { borderColor: "#333", borderWidth: 1 } } }]
    });
  }

  // ---------------------------------------------------------------- gaps

  function renderGaps() {
    var h = DATA.gap_histogram;
    var box = document.getElementById("chart-gaps");
    if (!h || !h.gaps) {
      empty(box, "No idle gap in this profile.");
      box.className = "";
    } else {
      chart("chart-gaps", {
        tooltip: {
          trigger: "axis",
          axisPointer: { type: "shadow" },
          formatter: function (items) {
            if (!items.length) return "";
            var b = items[0].dataIndex;
            var lines = ["<b>" + esc(h.buckets[b]) + "</b>"];
            items.forEach(function (it) {
              var c = h.causes.indexOf(it.seriesName);
              if (it.value > 0) {
                lines.push(it.marker + esc(it.seriesName) + ": " + esc(it.value) + " gaps, " +
                  esc(fmtMs(h.total_ms[b][c])));
              }
            });
            return lines.join("<br>");
          }
        },
        legend: { top: 0 },
        grid: { left: 60, right: 20, top: 40, bottom: 40 },
        xAxis: { type: "category", name: "gap length", data: h.buckets },
        yAxis: { type: "value", name: "gaps" },
        series: h.causes.map(function (cause, c) {
          return {
            name: cause,
            type: "bar",
            stack: "gaps",
            barMaxWidth: 60,
            itemStyle: { color: CAUSE_COLOURS[cause] || null },
            data: h.buckets.map(function (_b, b) { return h.count[b][c]; })
          };
        })
      });
    }
    renderNamedTable("worst_gaps", "No gap.");
  }

  // ---------------------------------------------------------------- findings

  // timestamps of offenders serve the "show on timeline" links; as numbers they say nothing
  var HIDDEN_EVIDENCE_KEYS = { start_ns: true, end_ns: true };

  function scalarText(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "object") return JSON.stringify(v);
    if (typeof v === "number") return String(Math.round(v * 1000) / 1000);
    return String(v);
  }

  function isRecordList(v) {
    return Array.isArray(v) && v.length > 0 && v.every(function (x) {
      return x !== null && typeof x === "object" && !Array.isArray(x);
    });
  }

  function recordTable(records) {
    var keys = [];
    records.forEach(function (r) {
      Object.keys(r).forEach(function (k) {
        if (!HIDDEN_EVIDENCE_KEYS[k] && keys.indexOf(k) < 0) keys.push(k);
      });
    });
    var table = el("table", "data");
    var head = el("tr");
    keys.forEach(function (k) { head.appendChild(el("th", null, k)); });
    var thead = el("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    var body = el("tbody");
    records.slice(0, 20).forEach(function (r) {
      var tr = el("tr");
      keys.forEach(function (k) {
        var v = r[k];
        tr.appendChild(el("td", typeof v === "number" ? "num" : "text", scalarText(v)));
      });
      body.appendChild(tr);
    });
    table.appendChild(body);
    var scroll = el("div", "table-scroll");
    scroll.appendChild(table);
    return scroll;
  }

  function describe(value, host) {
    if (value === null || value === undefined || value === "") return false;
    if (typeof value === "object" && !Array.isArray(value)) {
      var dl = el("dl");
      var lists = [];
      Object.keys(value).forEach(function (k) {
        var v = value[k];
        if (isRecordList(v) || (v !== null && typeof v === "object" && !Array.isArray(v))) {
          lists.push([k, v]);
          return;
        }
        dl.appendChild(el("dt", null, k));
        dl.appendChild(el("dd", null, Array.isArray(v) ? v.map(scalarText).join(", ") : scalarText(v)));
      });
      host.appendChild(dl);
      lists.forEach(function (kv) {
        var details = el("details");
        if (Array.isArray(kv[1])) {
          details.appendChild(el("summary", null, kv[0] + " (" + kv[1].length + ")"));
          details.appendChild(recordTable(kv[1]));
        } else {
          details.appendChild(el("summary", null, kv[0]));
          describe(kv[1], details);
        }
        host.appendChild(details);
      });
    } else if (isRecordList(value)) {
      host.appendChild(recordTable(value));
    } else if (Array.isArray(value)) {
      var ul = el("ul");
      value.forEach(function (v) { ul.appendChild(el("li", null, scalarText(v))); });
      host.appendChild(ul);
    } else {
      host.appendChild(el("p", null, value));
    }
    return true;
  }

  function renderFindings() {
    var host = document.getElementById("findings-list");
    var findings = DATA.findings || [];
    if (!findings.length) {
      empty(host, "No finding: nothing stood out.");
      return;
    }
    findings.forEach(function (f) {
      var box = el("div", "finding");
      box.id = "finding-" + f.id;
      box.appendChild(el("h3", null, f.title || f.id));
      var sev = [f.id];
      if (isNum(f.severity_ms)) sev.push("costs " + fmtMs(f.severity_ms));
      if (isNum(f.severity_pct)) sev.push(fmtPct(f.severity_pct) + " of step time");
      box.appendChild(el("div", "severity", sev.join(" · ")));
      [["Evidence", f.evidence], ["Suggestion", f.suggestion], ["Verify", f.verify]].forEach(function (part) {
        var wrap = el("div");
        wrap.appendChild(el("strong", null, part[0]));
        if (describe(part[1], wrap)) box.appendChild(wrap);
      });
      (f.targets || []).slice(0, 5).forEach(function (t) {
        var b = el("button", "show-on-timeline", "show on timeline (step " + t.step + ")");
        b.type = "button";
        b.addEventListener("click", function () { showOnTimeline(t); });
        box.appendChild(b);
      });
      host.appendChild(box);
    });
  }

  // ---------------------------------------------------------------- step timeline

  var timelineSelect = document.getElementById("timeline-step");

  function timelineOption(t) {
    var kinds = DATA.timeline_kinds;
    var names = DATA.timeline_names;
    var nRows = t.rows.length;
    var items = new Array(t.start_us.length);
    for (var i = 0; i < t.start_us.length; i++) {
      items[i] = [t.row[i], t.start_us[i], t.start_us[i] + t.dur_us[i], i];
    }
    var gapItems = [];
    var g = 0;
    for (var j = 0; j < t.start_us.length; j++) {
      if (t.row_is_gap[t.row[j]]) {
        gapItems.push([t.row[j], t.start_us[j], t.start_us[j] + t.dur_us[j], t.gap_band_end[g], j]);
        g += 1;
      }
    }
    function colourOf(i) {
      var kind = kinds[t.kind[i]];
      if (kind.indexOf("idle: ") === 0) return CAUSE_COLOURS[kind.slice(6)] || "#9e9e9e";
      return KIND_COLOURS[kind] || "#78909c";
    }
    function clip(rect, params) {
      return echarts.graphic.clipRectByRect(rect, {
        x: params.coordSys.x,
        y: params.coordSys.y,
        width: params.coordSys.width,
        height: params.coordSys.height
      });
    }
    function renderSlice(params, api) {
      var row = api.value(0);
      var a = api.coord([api.value(1), row]);
      var b = api.coord([api.value(2), row]);
      var rowH = api.size([0, 1])[1];
      var i = api.value(3);
      var top = a[1] - rowH * 0.42;
      var height = rowH * 0.84;
      if (!t.row_is_device[row]) {
        // host rows stack nested calls downwards, four levels deep
        var level = Math.min(t.depth[i], 3);
        height = (rowH * 0.84) / 4;
        top = top + level * height;
      }
      var shape = clip({ x: a[0], y: top, width: Math.max(b[0] - a[0], 0.5), height: height }, params);
      return shape && {
        type: "rect",
        shape: shape,
        style: { fill: colourOf(i), stroke: b[0] - a[0] > 6 ? "rgba(255,255,255,0.6)" : null }
      };
    }
    function renderBand(params, api) {
      var a = api.coord([api.value(1), api.value(0)]);
      var b = api.coord([api.value(2), api.value(3)]);
      var rowH = api.size([0, 1])[1];
      var shape = clip({
        x: a[0],
        y: a[1] + rowH * 0.42,
        width: Math.max(b[0] - a[0], 0.5),
        height: Math.max(b[1] - a[1], 0)
      }, params);
      return shape && {
        type: "rect",
        shape: shape,
        style: { fill: colourOf(api.value(4)), opacity: 0.13 }
      };
    }
    return {
      title: { text: "step " + t.step, left: "center", top: 0, textStyle: { fontSize: 13 } },
      tooltip: {
        formatter: function (p) {
          var i = p.seriesIndex === 1 ? p.value[3] : p.value[4];
          return "<b>" + esc(names[t.name[i]]) + "</b><br>" + esc(kinds[t.kind[i]]) +
            " · " + esc(t.rows[t.row[i]]) + "<br>start " + esc(fmtUs(t.start_us[i])) +
            " · duration " + esc(fmtUs(t.dur_us[i]));
        }
      },
      grid: { left: 210, right: 30, top: 34, bottom: 70 },
      xAxis: {
        type: "value",
        min: 0,
        max: t.wall_us,
        name: "µs from step start",
        nameLocation: "middle",
        nameGap: 26
      },
      yAxis: {
        type: "category",
        data: t.rows,
        inverse: true,
        axisTick: { show: false },
        axisLabel: { width: 200, overflow: "truncate" }
      },
      dataZoom: [
        { type: "slider", xAxisIndex: 0, filterMode: "weakFilter", bottom: 8, height: 20 },
        { type: "inside", xAxisIndex: 0, filterMode: "weakFilter" }
      ],
      series: [
        {
          type: "custom",
          name: "idle",
          renderItem: renderBand,
          encode: { x: [1, 2], y: 0 },
          data: gapItems,
          silent: false,
          z: 1
        },
        {
          type: "custom",
          name: "events",
          renderItem: renderSlice,
          encode: { x: [1, 2], y: 0 },
          data: items,
          z: 2
        }
      ],
      height: Math.max(nRows, 1)
    };
  }

  function drawTimeline(step) {
    var t = DATA.timelines[String(step)];
    var box = document.getElementById("chart-timeline");
    box.style.height = Math.max(320, 110 + t.rows.length * 26) + "px";
    var option = timelineOption(t);
    delete option.height;
    chart("chart-timeline", option);
    box.setAttribute("data-step", String(step));
    var note = "";
    if (t.events_shown < t.events_total) {
      note = "The " + t.events_shown + " longest of the step's " + t.events_total +
        " events are drawn; the Perfetto timeline (timeline/step_" + step + ".json.gz) holds them all.";
    }
    document.getElementById("timeline-note").textContent = note;
  }

  function renderTimeline() {
    var steps = DATA.steps || [];
    var box = document.getElementById("chart-timeline");
    if (!steps.length) {
      timelineSelect.parentNode.hidden = true;
      empty(box, "No events to draw.");
      box.className = "";
      return;
    }
    steps.forEach(function (s) {
      var label = "step " + s.step + " · " + fmtMs(s.wall_ms);
      if (s.labels.length) label += " (" + s.labels.join(", ") + ")";
      var opt = el("option", null, label);
      opt.value = String(s.step);
      timelineSelect.appendChild(opt);
    });
    timelineSelect.addEventListener("change", function () { drawTimeline(timelineSelect.value); });
    drawTimeline(timelineSelect.value);
  }

  function showOnTimeline(target) {
    if (!DATA.timelines[String(target.step)]) return;
    timelineSelect.value = String(target.step);
    drawTimeline(target.step);
    var pad = Math.max((target.end_us - target.start_us) * 0.1, 1);
    charts["chart-timeline"].dispatchAction({
      type: "dataZoom",
      startValue: Math.max(target.start_us - pad, 0),
      endValue: target.end_us + pad
    });
    document.getElementById("timeline").scrollIntoView();
  }

  // ---------------------------------------------------------------- tables

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a) < String(b) ? -1 : 1;
  }

  function renderTable(host, tbl, options) {
    options = options || {};
    var cols = tbl.columns;
    var n = cols.length ? cols[0].values.length : 0;
    var order = [];
    for (var i = 0; i < n; i++) order.push(i);
    var sortCol = -1;
    var sortDir = 1;
    var needle = "";

    var controls = el("div", "table-controls");
    var input = el("input");
    input.type = "search";
    input.placeholder = "filter";
    input.setAttribute("aria-label", "filter rows");
    var info = el("span", "table-info");
    if (options.filter !== false) controls.appendChild(input);
    controls.appendChild(info);
    var scroll = el("div", "table-scroll");
    var table = el("table", "data");
    var thead = el("thead");
    var headRow = el("tr");
    var tbody = el("tbody");
    cols.forEach(function (c, ci) {
      var th = el("th", c.type === "str" ? "" : "num", c.name);
      th.setAttribute("data-column", c.name);
      th.addEventListener("click", function () {
        sortDir = sortCol === ci ? -sortDir : (c.type === "str" ? 1 : -1);
        sortCol = ci;
        var values = c.values;
        order.sort(function (a, b) { return compare(values[a], values[b]) * sortDir || a - b; });
        Array.prototype.forEach.call(headRow.children, function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(sortDir > 0 ? "sorted-asc" : "sorted-desc");
        draw();
      });
      headRow.appendChild(th);
    });
    thead.appendChild(headRow);
    table.appendChild(thead);
    table.appendChild(tbody);
    scroll.appendChild(table);

    function matches(r) {
      if (!needle) return true;
      for (var c = 0; c < cols.length; c++) {
        var v = cols[c].values[r];
        if (cols[c].type === "str" && v !== null && String(v).toLowerCase().indexOf(needle) >= 0) return true;
      }
      return false;
    }

    function draw() {
      var rows = order.filter(matches);
      var frag = document.createDocumentFragment();
      rows.slice(0, MAX_DOM_ROWS).forEach(function (r) {
        var tr = el("tr");
        cols.forEach(function (c) {
          var text = fmtCell(c.values[r], c.type);
          var td = el("td", c.type === "str" ? "text" : "num", text);
          if (c.type === "str" && text.length > 60) td.title = text;
          tr.appendChild(td);
        });
        frag.appendChild(tr);
      });
      tbody.replaceChildren(frag);
      var text = rows.length + " rows";
      if (needle) text = rows.length + " of " + n + " rows match";
      if (rows.length > MAX_DOM_ROWS) text += ", the first " + MAX_DOM_ROWS + " shown";
      if (tbl.shown_rows < tbl.total_rows) {
        text += " · this report holds " + tbl.shown_rows + " of " + tbl.total_rows +
          " rows (the CSV file holds all)";
      }
      info.textContent = text;
    }

    input.addEventListener("input", function () {
      needle = input.value.trim().toLowerCase();
      draw();
    });
    host.replaceChildren(controls, scroll);
    draw();
  }

  function renderNamedTable(name, emptyText) {
    var host = document.getElementById("table-" + name);
    var tbl = (DATA.tables || {})[name];
    if (!tbl) {
      empty(host, emptyText);
      return;
    }
    renderTable(host, tbl);
  }

  // ---------------------------------------------------------------- transfers and counters

  function renderTransfers() {
    var tbl = (DATA.tables || {}).transfers;
    var box = document.getElementById("chart-transfers");
    var byName = {};
    if (tbl) tbl.columns.forEach(function (c) { byName[c.name] = c; });
    if (tbl && byName.direction && byName.gbps) {
      chart("chart-transfers", {
        tooltip: {
          trigger: "axis",
          axisPointer: { type: "shadow" },
          formatter: function (items) {
            if (!items.length) return "";
            var i = items[0].dataIndex;
            var lines = ["<b>" + esc(byName.direction.values[i]) + "</b>"];
            if (byName.gbps.values[i] !== null) lines.push("bandwidth " + esc(fmtCell(byName.gbps.values[i], "float")) + " GB/s");
            if (byName.bytes) lines.push("moved " + esc(fmtBytes(byName.bytes.values[i])));
            if (byName.count) lines.push(esc(byName.count.values[i]) + " copies");
            return lines.join("<br>");
          }
        },
        grid: { left: 60, right: 20, top: 30, bottom: 30 },
        xAxis: { type: "category", data: byName.direction.values },
        yAxis: { type: "value", name: "GB/s" },
        series: [{
          type: "bar",
          barMaxWidth: 60,
          itemStyle: { color: CATEGORY_COLOURS.memcpy },
          data: byName.gbps.values.map(function (v) { return v === null ? 0 : v; })
        }]
      });
    } else {
      empty(box, "No memory copy in this profile.");
      box.className = "";
    }
    if (tbl) renderTable(document.getElementById("table-transfers"), tbl);
  }

  function renderCounters() {
    var host = document.getElementById("counter-charts");
    var series = DATA.counters || [];
    if (!series.length) {
      empty(host, "No counter was recorded.");
      host.className = "";
      return;
    }
    series.forEach(function (s, i) {
      var box = el("div", "chart small");
      box.id = "chart-counter-" + i;
      host.appendChild(box);
      var points = s.t_s.map(function (t, k) { return [t, s.value[k]]; });
      var bytes = /bytes$/.test(s.name);
      var fmtValue = function (v) {
        return bytes ? fmtBytes(v) : String(Math.round(v * 1000) / 1000);
      };
      var first = s.t_s.length ? s.t_s[0] : 0;
      var last = s.t_s.length ? s.t_s[s.t_s.length - 1] : 1;
      chart(box.id, {
        title: { text: "rank " + s.rank + " · " + s.track + " · " + s.name, textStyle: { fontSize: 12 }, left: 0 },
        tooltip: {
          trigger: "axis",
          formatter: function (items) {
            if (!items.length) return "";
            var p = items[0].value;
            return esc(s.name) + " " + esc(fmtValue(p[1])) + " at " + esc(p[0].toFixed(3)) + " s";
          }
        },
        grid: { left: 80, right: 16, top: 34, bottom: 30 },
        xAxis: {
          type: "value",
          name: "s",
          nameGap: 4,
          min: Math.floor(first),
          max: Math.max(Math.ceil(last), Math.floor(first) + 1),
          axisLabel: { formatter: function (v) { return String(Math.round(v * 10) / 10); } }
        },
        yAxis: {
          type: "value",
          scale: true,
          axisLabel: { formatter: function (v) { return fmtValue(v); } }
        },
        series: [{ type: "line", showSymbol: false, step: "end", data: points, lineStyle: { width: 1.2 } }]
      });
    });
  }

  // ---------------------------------------------------------------- go

  renderHeader();
  renderHeadline();
  renderAccounting();
  renderCluster();
  renderGaps();
  renderFindings();
  renderTimeline();
  renderNamedTable("op_statistic", "No operator statistic.");
  renderNamedTable("op_summary", "No operator.");
  renderNamedTable("kernel_details", "No kernel.");
  renderNamedTable("api_statistic", "No runtime API call.");
  renderTransfers();
  renderNamedTable("communication", "No communication in this profile.");
  renderCounters();
  document.body.setAttribute("data-ready", "true");
})();
