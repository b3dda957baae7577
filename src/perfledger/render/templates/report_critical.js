  // ---------------------------------------------------------------- critical path

  // The classes of the critical path (bound_by), coloured as the rest of the page colours
  // the same work.
  var PATH_COLOURS = {
    "host": "#42a5f5",
    "dataloader": "#f9a825",
    "launch": "#9e9d24",
    "sync": "#ef6c00",
    "communication": "#1565c0",
    "communication:wait": "#90caf9",
    "communication:transfer": "#1565c0",
    "copies": "#6a1b9a",
    "other": "#9e9e9e",
    "compute:matmul": "#1b5e20",
    "compute:conv": "#2e7d32",
    "compute:attention": "#00695c",
    "compute:elementwise": "#66bb6a",
    "compute:reduction": "#9ccc65",
    "compute:layout_copy": "#c5e1a5",
    "compute:other": "#4caf50"
  };
  var PATH_WORDS = {
    "host": "host work (Python, framework)",
    "dataloader": "data loading",
    "launch": "launch overhead",
    "sync": "synchronisation",
    "communication": "communication",
    "communication:wait": "communication: waiting for peers",
    "communication:transfer": "communication: transfer",
    "copies": "memory copies",
    "other": "unexplained"
  };

  // The parts of a class drawn in its place ("class:part" keys, from bound_by_parts_ms).
  var PATH_PARTS = {
    "communication:wait": "communication",
    "communication:transfer": "communication"
  };

  // bound_by_ms with the parts of its classes (bound_by_parts_ms) beside them, as
  // "class:part" keys; a part of 0 left out.
  function withParts(bound, parts) {
    var all = {};
    Object.keys(bound || {}).forEach(function (k) { all[k] = bound[k]; });
    Object.keys(parts || {}).forEach(function (k) {
      Object.keys(parts[k] || {}).forEach(function (part) {
        if (parts[k][part] > 0 && PATH_PARTS[k + ":" + part]) all[k + ":" + part] = parts[k][part];
      });
    });
    return all;
  }

  function pathColour(category) {
    return PATH_COLOURS[category] || (category.indexOf("compute:") === 0 ? "#4caf50" : "#78909c");
  }

  function pathWords(category) {
    if (PATH_WORDS[category]) return PATH_WORDS[category];
    if (category.indexOf("compute:") === 0) return "compute: " + category.slice(8).replace(/_/g, " ");
    return category.replace(/_/g, " ");
  }

  function renderCriticalPath() {
    var cp = DATA.critical_path;
    var section = document.getElementById("critical-path");
    var link = document.querySelector('nav a[href="#critical-path"]');
    if (!cp) {
      section.remove();
      if (link) link.remove();
      return;
    }
    var err = cp.replay_error_pct || {};
    var parts = [];
    if (isNum(err.median)) {
      parts.push("The replay reproduces the measured steps within " + fmtPct(err.median) +
        " (median over steps; worst " + fmtPct(err.worst) + ").");
    }
    if (cp.steps.length < cp.total_steps) {
      parts.push("Showing " + cp.steps.length + " of " + cp.total_steps + " steps.");
    }
    document.getElementById("critical-path-note").textContent = parts.join(" ");

    // per step: its critical path's time by class; they add up to the replayed step
    var box = document.getElementById("chart-critical-path");
    var steps = (cp.steps || []).map(function (s) {
      var shown = Object.assign({}, s);
      shown.bound_by_ms = withParts(s.bound_by_ms, s.bound_by_parts_ms);
      return shown;
    });
    var mean = withParts(cp.bound_by_ms, cp.bound_by_parts_ms);
    var classes = Object.keys(mean);
    steps.forEach(function (s) {
      Object.keys(s.bound_by_ms).forEach(function (k) { if (classes.indexOf(k) < 0) classes.push(k); });
    });
    // the bars stack a class's parts in its place, so that they add up to the step
    var drawnAsParts = {};
    classes.forEach(function (k) { if (PATH_PARTS[k]) drawnAsParts[PATH_PARTS[k]] = true; });
    var stacked = classes.filter(function (k) { return !drawnAsParts[k]; });
    // the table lists each class with its parts right after it
    var listed = [];
    classes.forEach(function (k) {
      if (PATH_PARTS[k] && classes.indexOf(PATH_PARTS[k]) >= 0) return;
      listed.push(k);
      classes.forEach(function (part) { if (PATH_PARTS[part] === k) listed.push(part); });
    });
    var ranks = {};
    steps.forEach(function (s) { ranks[s.rank] = true; });
    var severalRanks = Object.keys(ranks).length > 1;
    if (!steps.length) {
      empty(box, "No step was replayed: only the mean per step below (summary.json).");
      box.className = "";
    } else {
      chart("chart-critical-path", {
        tooltip: {
          trigger: "axis",
          axisPointer: { type: "shadow" },
          formatter: function (items) {
            if (!items.length) return "";
            var s = steps[items[0].dataIndex];
            var lines = ["<b>" + esc((severalRanks ? "rank " + s.rank + " " : "") + "step " + s.step) +
              "</b> · replayed " + esc(fmtMs(s.replayed_ms)) + " · measured " + esc(fmtMs(s.measured_ms))];
            items.forEach(function (it) {
              if (it.value > 0) lines.push(it.marker + esc(it.seriesName) + ": " + esc(fmtMs(it.value)));
            });
            return lines.join("<br>");
          }
        },
        legend: { type: "scroll", top: 0 },
        grid: { left: 70, right: 20, top: 40, bottom: 60 },
        xAxis: {
          type: "category",
          name: "step",
          data: steps.map(function (s) { return (severalRanks ? "r" + s.rank + " " : "") + s.step; })
        },
        yAxis: { type: "value", name: "ms" },
        dataZoom: steps.length > 60 ? [{ type: "slider" }, { type: "inside" }] : [],
        series: stacked.map(function (k) {
          return {
            name: pathWords(k),
            type: "bar",
            stack: "path",
            barMaxWidth: 40,
            itemStyle: { color: pathColour(k) },
            data: steps.map(function (s) { return s.bound_by_ms[k] || 0; })
          };
        })
      });
    }
    renderTable(document.getElementById("table-critical-path-mean"), {
      total_rows: listed.length,
      shown_rows: listed.length,
      columns: [
        { name: "bound by", type: "str", values: listed.map(pathWords) },
        { name: "class", type: "str", values: listed },
        { name: "mean per step (ms)", type: "float", values: listed.map(function (k) { return mean[k]; }) }
      ]
    }, { filter: false });
    var tasks = cp.top_tasks || [];
    var taskHost = document.getElementById("table-critical-path-tasks");
    if (!tasks.length) {
      empty(taskHost, "No device task on the critical path.");
    } else {
      renderTable(taskHost, {
        total_rows: tasks.length,
        shown_rows: tasks.length,
        columns: [
          { name: "task", type: "str", values: tasks.map(function (t) { return t.name; }) },
          { name: "class", type: "str", values: tasks.map(function (t) { return t["class"]; }) },
          { name: "on the path, all steps (ms)", type: "float", values: tasks.map(function (t) { return t.ms; }) }
        ]
      }, { filter: false });
    }
  }

