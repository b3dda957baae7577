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
      ["Compute", fmtPct(h.device_compute_pct)],
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
    renderQuality(DATA.quality || {});
  }

  // The quality report: a banner when a headline figure rests on repaired or doubtful data.
  function renderQuality(quality) {
    var checks = Array.isArray(quality.checks) ? quality.checks : [];
    if (!quality.confidence || quality.confidence === "high") return;
    var box = document.getElementById("quality");
    box.className = "quality " + (quality.confidence === "low" ? "low" : "medium");
    box.appendChild(el("p", "verdict",
      "Data quality " + quality.confidence + ": " +
      (quality.confidence === "low"
        ? "some headline figures rest on doubtful data."
        : "some headline figures rest on repaired data.")));
    var details = el("details");
    details.appendChild(el("summary", null, checks.length + " check" +
      (checks.length === 1 ? "" : "s") + ": what was found, and what was done"));
    var list = el("ul");
    checks.forEach(function (c) {
      var item = el("li", null, (c.repaired ? "repaired — " : "doubtful — ") + c.message);
      var affects = (c.affects || []).join(", ");
      if (affects) item.appendChild(el("span", "note", " (affects " + affects + ")"));
      list.appendChild(item);
    });
    details.appendChild(list);
    box.appendChild(details);
    box.hidden = false;
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

