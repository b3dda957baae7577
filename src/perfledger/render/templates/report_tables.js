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
    var formats = cols.map(columnFormat);
    cols.forEach(function (c, ci) {
      var th = el("th", c.type === "str" ? "" : "num", formats[ci].heading);
      th.setAttribute("data-column", c.name);
      if (c.type === "instant") th.title = "time after the profile's first event, as in the timeline";
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

    // every text column is searched (names, kinds, the device tasks behind an operator ...)
    var textCols = cols.filter(function (c) { return c.type === "str"; });
    function matches(r) {
      if (!needle) return true;
      for (var c = 0; c < textCols.length; c++) {
        var v = textCols[c].values[r];
        if (v !== null && v !== undefined && String(v).toLowerCase().indexOf(needle) >= 0) return true;
      }
      return false;
    }

    function draw() {
      var rows = order.filter(matches);
      var frag = document.createDocumentFragment();
      rows.slice(0, MAX_DOM_ROWS).forEach(function (r) {
        var tr = el("tr");
        cols.forEach(function (c, ci) {
          var text = formats[ci].format(c.values[r]);
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
    // a chart compares directions: with fewer than two bandwidths the table says it all
    var measured = byName.gbps ? byName.gbps.values.filter(function (v) { return isNum(v) && v > 0; }) : [];
    if (tbl && byName.direction && measured.length >= 2) {
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
      empty(box, tbl ? "No chart: fewer than two copy directions with a bandwidth (see the table)." : "No memory copy in this profile.");
      box.className = "";
    }
    if (tbl) renderTable(document.getElementById("table-transfers"), tbl);
  }

  // Labels of a counter's axis: bytes in the one unit of the largest value, with enough
  // decimals to tell the ticks apart.
  function counterFormat(name, values) {
    var high = 0;
    values.forEach(function (v) { if (isNum(v)) high = Math.max(high, Math.abs(v)); });
    if (/bytes$/.test(name)) {
      var unit = BYTE_UNITS[BYTE_UNITS.length - 1];
      for (var i = 0; i < BYTE_UNITS.length; i++) {
        if (high >= BYTE_UNITS[i][1]) { unit = BYTE_UNITS[i]; break; }
      }
      return {
        axis: function (v) { return String(Math.round(v / unit[1] * 100) / 100) + " " + unit[0]; },
        value: function (v) { return fmtBytes(v); }
      };
    }
    var plain = function (v) { return String(Math.round(v * 1000) / 1000); };
    return { axis: plain, value: plain };
  }

  // The profiled steps as bands on a counter chart, shaded in turn darker and lighter so that
  // back-to-back steps stay apart; named when they are few.
  function stepBands() {
    var marks = DATA.step_marks || [];
    return {
      silent: true,
      label: { show: marks.length <= 12, position: "insideTop", fontSize: 10, color: "#5f6b7a" },
      data: marks.map(function (m, i) {
        var shade = i % 2 === 0 ? "rgba(21, 101, 192, 0.11)" : "rgba(21, 101, 192, 0.04)";
        return [{ name: "step " + m[0], xAxis: m[1], itemStyle: { color: shade } }, { xAxis: m[2] }];
      })
    };
  }

  function renderCounters() {
    var host = document.getElementById("counter-charts");
    var series = DATA.counters || [];
    var drawn = series.filter(function (s) { return !s.constant && s.t_s.length > 1; });
    var flat = series.filter(function (s) { return s.constant; });
    var note = document.getElementById("counters-note");
    if (flat.length) {
      // a series that never changes is one value: said in words, not drawn
      note.textContent = "Constant over the profile (not drawn): " + flat.map(function (s) {
        return "rank " + s.rank + " · " + s.track + " · " + s.name + " = " +
          counterFormat(s.name, s.value).value(s.value[0]);
      }).join("; ") + ".";
      note.hidden = false;
    }
    if (!drawn.length) {
      empty(host, series.length ? "No counter changed during the profile." : "No counter was recorded.");
      host.className = "";
      return;
    }
    var marks = DATA.step_marks || [];
    drawn.forEach(function (s, i) {
      var box = el("div", "chart small");
      box.id = "chart-counter-" + i;
      host.appendChild(box);
      var points = s.t_s.map(function (t, k) { return [t, s.value[k]]; });
      var fmt = counterFormat(s.name, s.value);
      var low = Math.min.apply(null, s.value);
      // the samples and the steps, nothing around them
      var first = Math.min(s.t_s[0], marks.length ? marks[0][1] : Infinity);
      var last = Math.max(s.t_s[s.t_s.length - 1], marks.length ? marks[marks.length - 1][2] : -Infinity);
      chart(box.id, {
        title: { text: "rank " + s.rank + " · " + s.track + " · " + s.name, textStyle: { fontSize: 12 }, left: 0 },
        tooltip: {
          trigger: "axis",
          formatter: function (items) {
            if (!items.length) return "";
            var p = items[0].value;
            return esc(s.name) + " " + esc(fmt.value(p[1])) + " at " + esc(p[0].toFixed(3)) + " s";
          }
        },
        grid: { left: 80, right: 16, top: 34, bottom: 30 },
        xAxis: {
          type: "value",
          name: "s",
          nameGap: 4,
          min: first,
          max: last,
          axisLabel: {
            showMinLabel: false,
            showMaxLabel: false,
            formatter: function (v) { return String(Math.round(v * 1000) / 1000); }
          }
        },
        yAxis: {
          type: "value",
          axisLine: { onZero: false },
          // from zero for what cannot go below it: a swing of 1 % stays small
          min: low >= 0 ? 0 : null,
          axisLabel: { formatter: fmt.axis }
        },
        series: [{
          type: "line",
          showSymbol: false,
          step: "end",
          data: points,
          lineStyle: { width: 1.2 },
          markArea: stepBands()
        }]
      });
    });
  }
