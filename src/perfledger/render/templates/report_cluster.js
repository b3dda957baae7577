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
    // the colour scale runs from 0 ms: ranks 2 ms apart in a 300 ms step look alike, a rank
    // taking half again as long as the others stands out (a scale from the smallest value
    // to the largest would paint any difference, however small, white against navy)
    var high = 0;
    var values = {};
    cells.forEach(function (v) { high = Math.max(high, v[2]); values[fmtMs(v[2])] = true; });
    var shown = Object.keys(values);
    if (shown.length === 1) {
      // every rank and step shows the same figure: one value, said in words, not drawn
      var box = document.getElementById(id);
      var note = el("p", "note");
      note.textContent = "Every rank and step: " + label + " " + shown[0] + " (one value, not drawn).";
      box.parentNode.replaceChild(note, box);
      return;
    }
    var low = 0;
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

