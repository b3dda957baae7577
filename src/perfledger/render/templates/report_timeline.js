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

