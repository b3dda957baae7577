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
    "communication: waiting": "#90caf9",
    "communication: transfer": "#1565c0",
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

