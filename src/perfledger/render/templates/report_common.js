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

  // ---------------------------------------------------------------- words and units

  // key suffixes that carry a unit, said in words after the name
  var KEY_UNITS = [
    [/_ms_per_step$/, " (ms per step)"],
    [/_us_per_step$/, " (µs per step)"],
    [/_pct_of_([a-z_]+)$/, function (_m, what) { return " (% of " + what.replace(/_/g, " ") + ")"; }],
    [/_pct$/, " (%)"],
    [/_ms$/, " (ms)"],
    [/_us$/, " (µs)"],
    [/_ns$/, " (ns)"],
    [/_mb$/, " (MB)"],
    [/_gbps$/, " (GB/s)"],
    [/_bytes$/, " (bytes)"],
    [/_per_step$/, " per step"]
  ];
  var KEY_WORDS = { pct: "%", gbps: "GB/s", ms: "ms", us: "µs", ns: "ns", ops: "operators", op: "operator" };

  // A key of the evidence ("idle_host_dispatch_ms_per_step") in words
  // ("Idle host dispatch (ms per step)").
  function humanKey(key) {
    var text = String(key);
    var unit = "";
    for (var i = 0; i < KEY_UNITS.length; i++) {
      var rule = KEY_UNITS[i];
      if (rule[0].test(text)) {
        unit = text.match(rule[0])[0].replace(rule[0], rule[1]);
        text = text.replace(rule[0], "");
        break;
      }
    }
    var words = text.split("_").filter(function (w) { return w; }).map(function (w) {
      return KEY_WORDS[w] || w;
    }).join(" ");
    if (!words) return String(key);
    return words.charAt(0).toUpperCase() + words.slice(1) + unit;
  }

  var TIME_UNITS = [["s", 1e9, 3], ["ms", 1e6, 3], ["µs", 1e3, 1], ["ns", 1, 0]];
  var BYTE_UNITS = [["GiB", 1073741824, 2], ["MiB", 1048576, 2], ["KiB", 1024, 2], ["B", 1, 0]];

  // The unit that suits most values of a column: the median of its non-zero magnitudes.
  function pickUnit(values, units) {
    var mags = [];
    values.forEach(function (v) { if (isNum(v) && v !== 0) mags.push(Math.abs(v)); });
    if (!mags.length) return units[units.length - 1];
    mags.sort(function (a, b) { return a - b; });
    var typical = mags[Math.floor(mags.length / 2)];
    for (var i = 0; i < units.length; i++) if (typical >= units[i][1]) return units[i];
    return units[units.length - 1];
  }

  function fixed(v, digits) {
    return isNum(v) ? v.toFixed(digits) : "";
  }

  // A table column's heading with the one unit of its cells, and the cells' format: the
  // heading says the unit ("total (ms)"), the cells are plain numbers in it.
  function columnFormat(c) {
    var base = c.name;
    var unit = null;
    var format = function (v) { return v === null || v === undefined ? "" : String(v); };
    if (c.type === "ns" || c.type === "instant") {
      var t = pickUnit(c.values, TIME_UNITS);
      base = base.replace(/_ns$/, "");
      unit = c.type === "instant" ? t[0] + " from start" : t[0];
      format = function (v) { return fixed(isNum(v) ? v / t[1] : v, t[2]); };
    } else if (c.type === "bytes") {
      var b = pickUnit(c.values, BYTE_UNITS);
      base = base === "bytes" ? base : base.replace(/_bytes$/, "");
      unit = b[0];
      format = function (v) { return isNum(v) && v >= 0 ? fixed(v / b[1], b[2]) : ""; };
    } else if (c.type === "pct" || c.type === "ratio") {
      base = base.replace(/_pct$/, "");
      unit = "%";
      var scale = c.type === "ratio" ? 100 : 1;
      format = function (v) { return fixed(isNum(v) ? v * scale : v, 2); };
    } else if (c.type === "float") {
      if (/(^|_)gbps$/.test(base)) {
        base = base === "gbps" ? "bandwidth" : base.replace(/_gbps$/, " bandwidth");
        unit = "GB/s";
      }
      format = function (v) { return isNum(v) ? String(Math.round(v * 1000) / 1000) : ""; };
    }
    base = base.replace(/_/g, " ");
    return { heading: unit ? base + " (" + unit + ")" : base, unit: unit, format: format };
  }

  // A chart drawn in node ``id``; ``onFinished`` is called each time it is fully drawn (large
  // series are drawn a few hundred items per frame).
  function chart(id, option, onFinished) {
    var node = document.getElementById(id);
    var existing = charts[id];
    if (existing) existing.dispose();
    var c = echarts.init(node, null, { renderer: "canvas" });
    if (onFinished) c.on("finished", onFinished);
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

