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

