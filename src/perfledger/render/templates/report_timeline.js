  // ---------------------------------------------------------------- step timeline

  var timelineSelect = document.getElementById("timeline-step");

  // the words of the legend for each kind of slice
  var KIND_WORDS = {
    "cpu_op": "host operator",
    "python": "Python function",
    "annotation": "annotation",
    "step": "step mark",
    "runtime": "runtime call (launch)",
    "sync": "synchronisation",
    "dataloader": "data loading",
    "kernel": "kernel",
    "comm": "communication",
    "memcpy": "memory copy",
    "memset": "memory set",
    "device_annotation": "device annotation",
    "instant": "instant"
  };
  var PHASE_WORDS = {
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "dataloader": "data loading"
  };
  // a slice is labelled with its name when the name has room: this wide and tall (px)
  var LABEL_MIN_WIDTH = 36;
  var LABEL_MIN_HEIGHT = 10;
  var HOST_LEVEL_PX = 14;

  // What colours a slice, and the legend's words for it: the main thread's phase on a
  // host-only step, the cause of an idle gap, else the kind.
  function sliceKey(t, i) {
    var kind = DATA.timeline_kinds[t.kind[i]];
    var phase = t.phase ? DATA.timeline_phases[t.phase[i]] : "";
    if (phase) return { key: "phase:" + phase, colour: CATEGORY_COLOURS[phase], words: PHASE_WORDS[phase] + " (main thread)" };
    if (kind.indexOf("idle: ") === 0) {
      var cause = kind.slice(6);
      return { key: kind, colour: CAUSE_COLOURS[cause] || "#9e9e9e", words: "idle: " + cause.replace(/_/g, " ") };
    }
    return { key: kind, colour: KIND_COLOURS[kind] || "#78909c", words: KIND_WORDS[kind] || kind };
  }

  // Dark text on light colours, white on dark ones.
  function textColour(hex) {
    var m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex || "");
    if (!m) return "#1d2330";
    var lum = 0.299 * parseInt(m[1], 16) + 0.587 * parseInt(m[2], 16) + 0.114 * parseInt(m[3], 16);
    return lum > 150 ? "#1d2330" : "#ffffff";
  }

  // How many nesting levels the host rows of a step draw (at most four).
  function hostLevels(t) {
    var levels = 1;
    for (var i = 0; i < t.row.length; i++) {
      if (!t.row_is_device[t.row[i]]) levels = Math.max(levels, Math.min(t.depth[i], 3) + 1);
    }
    return levels;
  }

  // A slice with its name written on it when it has room, cut to its width.
  function labelled(rect, text, name) {
    var shape = rect.shape;
    if (shape.width < LABEL_MIN_WIDTH || shape.height < LABEL_MIN_HEIGHT) return rect;
    return {
      type: "group",
      name: name || "slice",
      children: [rect, {
        type: "text",
        silent: true,
        style: {
          text: text,
          x: shape.x + 3,
          y: shape.y + shape.height / 2,
          verticalAlign: "middle",
          width: shape.width - 6,
          overflow: "truncate",
          ellipsis: "…",
          fontSize: 10,
          fill: textColour(rect.style.fill)
        }
      }]
    };
  }

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
    var levels = hostLevels(t);
    var path = t.path || { categories: [], texts: [], row: [], start_us: [], dur_us: [], category: [], label: [], lane: [] };
    var pathItems = path.row.map(function (r, k) {
      return [r, path.start_us[k], path.start_us[k] + path.dur_us[k], k];
    });
    function colourOf(i) {
      return sliceKey(t, i).colour;
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
        // host rows stack nested calls downwards, up to four levels deep
        var level = Math.min(t.depth[i], 3);
        height = (rowH * 0.84) / levels;
        top = top + level * height;
      }
      var shape = clip({ x: a[0], y: top, width: Math.max(b[0] - a[0], 0.5), height: height }, params);
      if (!shape) return null;
      var fill = colourOf(i);
      var rect = {
        type: "rect",
        shape: shape,
        style: { fill: fill, stroke: b[0] - a[0] > 6 ? "rgba(255,255,255,0.6)" : null }
      };
      if (t.row_is_gap[row]) return rect;
      return labelled(rect, names[t.name[i]]);
    }
    // the critical path: one full-height slice per piece, coloured by what bounds the step
    function renderPath(params, api) {
      var row = api.value(0);
      var a = api.coord([api.value(1), row]);
      var b = api.coord([api.value(2), row]);
      var rowH = api.size([0, 1])[1];
      var k = api.value(3);
      var shape = clip({ x: a[0], y: a[1] - rowH * 0.42, width: Math.max(b[0] - a[0], 0.5), height: rowH * 0.84 }, params);
      if (!shape) return null;
      var rect = {
        type: "rect",
        shape: shape,
        style: { fill: pathColour(path.categories[path.category[k]]), stroke: b[0] - a[0] > 6 ? "rgba(255,255,255,0.7)" : null }
      };
      return labelled(rect, path.texts[path.label[k]], "critical path");
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
          if (p.seriesIndex === 2) {
            var k = p.value[3];
            var category = path.categories[path.category[k]];
            var lane = path.texts[path.lane[k]];
            return "<b>" + esc(path.texts[path.label[k]]) + "</b><br>critical path · " + esc(pathWords(category)) +
              (lane ? " · " + esc(lane) : "") + "<br>start " + esc(fmtUs(path.start_us[k])) +
              " · duration " + esc(fmtUs(path.dur_us[k]));
          }
          var i = p.seriesIndex === 1 ? p.value[3] : p.value[4];
          var phase = t.phase ? DATA.timeline_phases[t.phase[i]] : "";
          return "<b>" + esc(names[t.name[i]]) + "</b><br>" + esc(kinds[t.kind[i]]) + (phase ? " · " + esc(phase) : "") +
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
        },
        {
          type: "custom",
          name: "critical path",
          renderItem: renderPath,
          encode: { x: [1, 2], y: 0 },
          data: pathItems,
          z: 3
        }
      ],
      height: Math.max(nRows, 1)
    };
  }

  function drawTimeline(step) {
    var t = DATA.timelines[String(step)];
    var box = document.getElementById("chart-timeline");
    // host rows tall enough for a label on each nesting level, the chart within a screen
    var rowPx = Math.max(26, Math.min(hostLevels(t) * HOST_LEVEL_PX + 8, Math.floor(900 / t.rows.length)));
    box.style.height = Math.max(320, 110 + t.rows.length * rowPx) + "px";
    var option = timelineOption(t);
    delete option.height;
    box.removeAttribute("data-drawn");
    // slices are drawn a few hundred per frame: the page says when the last one is
    chart("chart-timeline", option, function () {
      box.setAttribute("data-drawn", String(step));
    });
    box.setAttribute("data-step", String(step));
    var note = "";
    if (t.events_shown < t.events_total) {
      note = "The " + t.events_shown + " longest of the step's " + t.events_total +
        " events are drawn; the Perfetto timeline (timeline/step_" + step + ".json.gz) holds them all.";
    }
    var pathRows = t.row_is_path.filter(function (x) { return x; }).length;
    if (pathRows < t.path_ranks_total) {
      note += (note ? " " : "") + "The critical paths of the first " + pathRows + " of the step's " +
        t.path_ranks_total + " ranks are drawn (the Perfetto timeline has every rank's).";
    }
    document.getElementById("timeline-note").textContent = note;
    renderLegend(t);
  }

  // What each colour of the step's slices means (the kinds, phases and causes it holds).
  function renderLegend(t) {
    var host = document.getElementById("timeline-legend");
    var seen = {};
    var entries = [];
    for (var i = 0; i < t.kind.length; i++) {
      var k = sliceKey(t, i);
      if (!seen[k.key]) {
        seen[k.key] = true;
        entries.push(k);
      }
    }
    if (t.path) {
      t.path.categories.forEach(function (c) {
        entries.push({ key: "path:" + c, colour: pathColour(c), words: "critical path: " + pathWords(c) });
      });
    }
    // one entry per colour: the same colour is the same work (idle for sync, sync on the path)
    var byColour = {};
    entries = entries.filter(function (k) {
      var first = byColour[k.colour];
      if (!first) {
        byColour[k.colour] = k;
        return true;
      }
      first.key += " " + k.key;
      first.words += " · " + k.words;
      return false;
    });
    host.replaceChildren();
    entries.forEach(function (k) {
      var item = el("span", "legend-item");
      item.setAttribute("data-key", k.key);
      item.setAttribute("data-colour", k.colour);
      var swatch = el("span", "swatch");
      swatch.style.background = k.colour;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(k.words));
      host.appendChild(item);
    });
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

