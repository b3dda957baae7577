  // ---------------------------------------------------------------- header and headline

  // Where a path splits into the folder the files share and the rest.
  function commonFolder(paths) {
    var first = paths[0].split("/");
    var n = first.length - 1;  // never the file name itself
    paths.forEach(function (p) {
      var parts = p.split("/");
      var k = 0;
      while (k < n && k < parts.length - 1 && parts[k] === first[k]) k += 1;
      n = k;
    });
    return first.slice(0, n).join("/");
  }

  // One line: the source kind, the files (a count that opens the list), the versions.
  function renderHeader() {
    var meta = DATA.meta || {};
    var host = document.getElementById("report-meta");
    var parts = [];
    var files = [];
    if (meta.source && typeof meta.source === "object") {
      if (meta.source.kind) parts.push("source: " + meta.source.kind);
      if (Array.isArray(meta.source.files)) files = meta.source.files.map(String);
    } else if (meta.source_kind) {
      parts.push("source: " + meta.source_kind);
    }
    ["torch_version", "cuda_version", "cann_version", "device_name"].forEach(function (k) {
      if (meta[k]) parts.push(k.replace(/_/g, " ") + ": " + meta[k]);
    });
    host.replaceChildren();
    parts.forEach(function (text, i) {
      if (i) host.appendChild(document.createTextNode(" · "));
      host.appendChild(el("span", null, text));
      if (i === 0 && files.length) {
        host.appendChild(document.createTextNode(" · "));
        host.appendChild(sourceList(files));
      }
    });
    if (!parts.length && files.length) host.appendChild(sourceList(files));
    document.getElementById("generator").textContent = DATA.generator;
  }

  function sourceList(files) {
    if (files.length === 1) {
      var one = el("span", "source-file", files[0]);
      one.title = files[0];
      return one;
    }
    var folder = commonFolder(files);
    var box = el("details", "sources");
    box.id = "report-sources";
    box.appendChild(el("summary", null, files.length + " files" + (folder ? " in " + folder : "")));
    var list = el("ol");
    files.forEach(function (f) {
      list.appendChild(el("li", null, folder ? f.slice(folder.length + 1) : f));
    });
    box.appendChild(list);
    return box;
  }

  // The first line of the page: what to fix first and what it would give.
  function renderVerdict() {
    var box = document.getElementById("verdict");
    var findings = DATA.findings || [];
    var h = DATA.headline || {};
    box.replaceChildren();
    if (!findings.length) {
      box.textContent = "Verdict: nothing stood out — no finding in this profile.";
      return;
    }
    var top = findings[0];
    box.appendChild(el("strong", null, "Fix first: "));
    box.appendChild(el("span", "verdict-finding", (top.title || top.id) + " (" + top.id + ")."));
    var gain = "";
    if (isNum(top.whatif_ms)) {
      gain = "Fixing it alone would save " + fmtMs(top.whatif_ms) + " per step" +
        (isNum(h.step_time_ms) ? " of the " + fmtMs(h.step_time_ms) + " median step" : "") +
        " (replayed).";
    } else if (isNum(top.severity_ms)) {
      gain = "It costs " + fmtMs(top.severity_ms) + " per step" +
        (isNum(top.severity_pct) ? " (" + fmtPct(top.severity_pct) + " of the step time)" : "") +
        ", as estimated from the trace.";
    }
    var combined = DATA.whatif_combined;
    var ids = combined && Array.isArray(combined.findings) ? combined.findings : [];
    if (combined && isNum(combined.gain_ms) && ids.length > 1) {
      // the fixes replayed together: their gains overlap, so they do not add up
      gain += " The top " + ids.length + " fixes together (" + ids.join(", ") + ") would save " +
        fmtMs(combined.gain_ms) + " per step" +
        (isNum(combined.baseline_ms) && isNum(combined.predicted_ms)
          ? " (replayed step " + fmtMs(combined.baseline_ms) + " → " + fmtMs(combined.predicted_ms) + ")"
          : "") + ", not the sum of their gains.";
    } else if (combined && isNum(combined.gain_ms) && ids.length === 1 && ids[0] !== top.id) {
      // the top finding's fix cannot be replayed; another one can
      gain += " Of the fixes the replay can try, " + ids[0] + " gives the most: " +
        fmtMs(combined.gain_ms) + " per step.";
    }
    if (gain) box.appendChild(el("span", "verdict-gain", " " + gain));
    box.setAttribute("data-finding", top.id);
  }

  // The profiler's overhead as the terminal says it: never a negative cost, within its noise
  // when it is no larger than the noise.
  function overheadCard(h) {
    var pct = h.profiler_overhead_pct;
    var noise = h.profiler_overhead_noise_pct;
    var label = "Profiler overhead";
    if (!isNum(pct)) return [label, "n/a"];
    var signed = (pct >= 0 ? "+" : "") + pct.toFixed(2) + " %";
    if (!isNum(noise)) {
      return pct >= 0 ? [label, fmtPct(pct)]
        : [label, "none measured", null, "profiled steps " + fmtPct(-pct) + " faster"];
    }
    if (Math.abs(pct) <= noise) return [label, "within noise", null, signed + " ± " + noise.toFixed(2) + " %"];
    if (pct < 0) {
      return [label, "none measured", null,
        "profiled steps " + (-pct).toFixed(2) + " % ± " + noise.toFixed(2) + " % faster"];
    }
    return [label, fmtPct(pct), null, "± " + noise.toFixed(2) + " %"];
  }

  function renderHeadline() {
    var h = DATA.headline || {};
    var host = document.getElementById("headline-cards");
    var throughput = isNum(h.throughput)
      ? (Math.round(h.throughput * 100) / 100) + (h.throughput_unit ? " " + h.throughput_unit : "")
      : "n/a";
    var utilisation = fmtPct(h.device_utilization_pct);
    var utilisationLabel = "Device utilisation";
    var perDevice = h.device_utilization || [];
    var perDeviceText = perDevice.map(function (d) { return d[0] + ": " + fmtPct(d[1]); }).join("\n");
    if (!isNum(h.device_utilization_pct) && perDevice.length > 1) {
      // one line whatever the number of devices: the range, each device in the tooltip
      var values = perDevice.map(function (d) { return d[1]; });
      utilisation = Math.min.apply(null, values).toFixed(1) + "–" + fmtPct(Math.max.apply(null, values));
      utilisationLabel = "Device utilisation (" + perDevice.length + " devices)";
    }
    renderVerdict();
    var cards = [
      ["Median step time", fmtMs(h.step_time_ms), null,
        isNum(h.unprofiled_step_ms) ? "unprofiled " + fmtMs(h.unprofiled_step_ms) : null],
      [utilisationLabel, utilisation, perDeviceText],
      ["Compute", fmtPct(h.device_compute_pct)],
      ["Throughput", throughput],
      overheadCard(h),
      ["Steps", isNum(h.step_count) ? String(h.step_count) : "n/a"],
      ["Ranks", isNum(h.ranks) ? String(h.ranks) : "n/a"]
    ];
    // a host-only run has no device: no device cards to read "n/a"
    var hostOnly = (DATA.host_accounting || []).length && !(DATA.accounting || []).length;
    if (hostOnly && !isNum(h.device_utilization_pct) && !perDevice.length && !isNum(h.device_compute_pct)) {
      cards = cards.filter(function (c) { return c[0].indexOf("Device utilisation") !== 0 && c[0] !== "Compute"; });
    }
    cards.forEach(function (c) {
      var card = el("div", "card");
      card.appendChild(el("div", "label", c[0]));
      // words rather than a figure ("none measured") in a smaller type, to stay on one line
      var value = el("div", /^[\d+\-]|^n\/a$/.test(c[1]) ? "value" : "value words", c[1]);
      value.title = c[2] || c[1];
      card.appendChild(value);
      if (c[3]) card.appendChild(el("div", "sub", c[3]));
      host.appendChild(card);
    });
    if (h.loss) {
      var loss = document.getElementById("unread-input");
      loss.textContent = "Part of the input could not be read: " + h.loss;
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

