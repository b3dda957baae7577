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
    keys.forEach(function (k) { head.appendChild(el("th", null, humanKey(k))); });
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
        var term = el("dt", null, humanKey(k));
        term.setAttribute("data-key", k);
        dl.appendChild(term);
        dl.appendChild(el("dd", null, Array.isArray(v) ? v.map(scalarText).join(", ") : scalarText(v)));
      });
      host.appendChild(dl);
      lists.forEach(function (kv) {
        var details = el("details");
        if (Array.isArray(kv[1])) {
          details.appendChild(el("summary", null, humanKey(kv[0]) + " (" + kv[1].length + ")"));
          details.appendChild(recordTable(kv[1]));
        } else {
          details.appendChild(el("summary", null, humanKey(kv[0])));
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
      if (isNum(f.whatif_ms)) sev.push("fixing it alone saves " + fmtMs(f.whatif_ms) + " per step (replayed)");
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

