/**
 * The page's own script, inlined after uPlot's. Plain ES2017 that any current browser runs, kept
 * as text here because it runs in the page, not in Node. It reads the embedded JSON and builds the
 * page with `textContent` and `createElement` only (never `innerHTML`), so text from the input
 * (phase names, contexts, paths) shows as text. Charts are uPlot's; the phase bands under each chart
 * and the markers on it are drawn on canvases in uPlot's draw hook, at uPlot's scale.
 *
 * Big jobs: the charts of ranks out of view are made when they scroll near (IntersectionObserver),
 * so the first paint costs a screenful of charts, whatever the number of ranks. Zoom (drag, wheel)
 * and pan (shift+drag, the buttons) apply to every rank at once.
 */
export const CLIENT_SCRIPT = String.raw`(function () {
  "use strict";
  var dataNode = document.getElementById("stormlog-data");
  var data = JSON.parse(dataNode.textContent);
  var root = document.getElementById("app");
  // The units of formatBytes in @stormlog/core (powers of 1024, named as the Python Stormlog names them).
  var UNITS = ["B", "KB", "MB", "GB", "TB", "PB"];
  var COLORS = { allocated: "#2563eb", reserved: "#16a34a", used: "#dc2626", rss: "#9333ea" };
  var MARKERS = { alert: "#d97706", oom: "#b91c1c", collector: "#7c3aed", spike: "#db2777", gap: "#0d9488" };
  var BAND_ROW = 12;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function bytes(value) {
    if (value === null || value === undefined) return "-";
    var size = Math.abs(value), unit = 0;
    while (size >= 1024 && unit < UNITS.length - 1) { size /= 1024; unit++; }
    return (value < 0 ? "-" : "") + (unit === 0 ? String(size) : size.toFixed(2)) + " " + UNITS[unit];
  }
  function grouped(value) {
    return String(value).replace(/\B(?=(\d{3})+$)/g, ",");
  }
  function secs(value) {
    var abs = Math.abs(value);
    if (abs === 0) return "0 s";
    if (abs >= 120) return (value / 60).toFixed(abs >= 1200 ? 0 : 1) + " min";
    if (abs >= 1) return value.toFixed(abs >= 10 ? 1 : 2) + " s";
    return (value * 1000).toFixed(abs >= 0.01 ? 0 : 2) + " ms";
  }

  // Points a rank's chart draws, counted from its encoded rows (\`dt\` holds the gaps between them).
  function pointCount(rank) {
    return rank.rowCount > 0 ? rank.dt.length + 1 : 0;
  }
  // Decodes a rank's rows and spans (see EncodedSeries in model.ts): prefix sums of exact integers.
  function decode(rank) {
    var n = pointCount(rank);
    var x = new Array(n), t = rank.t0;
    if (n > 0) x[0] = t / 1e6;
    for (var i = 0; i < rank.dt.length; i++) { t += rank.dt[i]; x[i + 1] = t / 1e6; }
    rank.x = x;
    rank.y = rank.y.map(function (series) {
      if (series.unit === 0) return series.d;
      var out = new Array(series.d.length), level = 0;
      for (var k = 0; k < series.d.length; k++) {
        var d = series.d[k];
        if (d === null) { out[k] = null; continue; }
        level += d;
        out[k] = level * series.unit;
      }
      return out;
    });
    var spans = [], start = 0;
    for (var j = 0; j + 3 < rank.spans.length; j += 4) {
      start += rank.spans[j];
      spans.push([start / 1e6, (start + rank.spans[j + 1]) / 1e6, rank.spans[j + 2], rank.spans[j + 3]]);
    }
    rank.spans = spans;
    rank.decoded = true;
  }
  // Decoded when its chart is made: a big job's 64 ranks decoded at once took ~40 ms, and their
  // garbage ~150 ms of collection, before the first screen was painted.
  function decoded(rank) {
    if (!rank.decoded) decode(rank);
    return rank;
  }

  // Header, cards, notes.
  document.title = data.title;
  var header = el("header");
  header.appendChild(el("h1", null, data.title));
  header.appendChild(el("p", "subtitle", data.subtitle));
  root.appendChild(header);
  var cards = el("section", "cards");
  data.cards.forEach(function (card) {
    var box = el("div", "card tone-" + card.tone);
    box.appendChild(el("div", "card-label", card.label));
    box.appendChild(el("div", "card-value", card.value));
    box.appendChild(el("div", "card-detail", card.detail));
    if (card.note) box.appendChild(el("div", "card-note", card.note));
    cards.appendChild(box);
  });
  root.appendChild(cards);
  if (data.notes.length > 0) {
    var notes = el("ul", "notes");
    data.notes.forEach(function (note) { notes.appendChild(el("li", null, note)); });
    root.appendChild(notes);
  }

  // Timelines.
  var tl = data.timeline;
  var section = el("section", "timelines");
  section.appendChild(el("h2", null, "Memory over time"));
  section.appendChild(el("p", "intro",
    "Per rank: allocated, reserved and device used (and the process's RSS where read), with the phases under each chart. " +
    "Drag to zoom, wheel to zoom around the pointer, shift+drag or the arrows to pan, double-click to see everything. " +
    "Series are reduced to " + tl.columns + " columns keeping each column's minimum and maximum, so every peak is exact. " +
    "Times are seconds since " + tl.originIso + "."));
  var controls = el("div", "controls");
  function button(label, title, action) {
    var b = el("button", null, label);
    b.type = "button";
    b.title = title;
    b.addEventListener("click", action);
    controls.appendChild(b);
    return b;
  }
  var align = tl.aligned;
  if (tl.aligned) {
    var label = el("label", "align");
    var box = document.createElement("input");
    box.type = "checkbox";
    box.checked = true;
    box.id = "align-ranks";
    box.addEventListener("change", function () { align = box.checked; realign(); });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" align ranks as the cross-rank analysis does"));
    controls.appendChild(label);
  }
  var legend = el("span", "legend");
  var hidden = {};
  [["allocated", "allocated"], ["reserved", "reserved"], ["used", "device used"], ["rss", "process RSS"]].forEach(function (pair) {
    var key = el("button", "key toggle");
    key.type = "button";
    key.title = "show or hide " + pair[1] + " on every chart (the scale follows what is shown)";
    key.setAttribute("aria-pressed", "true");
    key.addEventListener("click", function () {
      hidden[pair[0]] = !hidden[pair[0]];
      key.setAttribute("aria-pressed", hidden[pair[0]] ? "false" : "true");
      charts.forEach(function (entry) {
        entry.rank.series.forEach(function (series, k) {
          if (series.kind === pair[0]) entry.u.setSeries(k + 1, { show: !hidden[pair[0]] });
        });
      });
    });
    var swatch = el("i");
    swatch.style.background = COLORS[pair[0]];
    key.appendChild(swatch);
    key.appendChild(document.createTextNode(pair[1]));
    legend.appendChild(key);
  });
  Object.keys(MARKERS).forEach(function (kind) {
    var key = el("span", "key");
    var swatch = el("i", "marker-key");
    swatch.style.background = MARKERS[kind];
    key.appendChild(swatch);
    key.appendChild(document.createTextNode(kind === "gap" ? "hidden memory" : kind === "spike" ? "first-cause spike" : kind));
    legend.appendChild(key);
  });
  section.appendChild(controls);
  section.appendChild(legend);

  var full = { min: 0, max: Math.max(tl.endS, 1e-3) };
  var view = { min: full.min, max: full.max };
  var charts = [];
  var syncing = false;
  function setView(min, max) {
    if (!(max > min)) return;
    view = { min: min, max: max };
    syncing = true;
    charts.forEach(function (entry) { entry.u.setScale("x", { min: min, max: max }); });
    syncing = false;
  }
  button("\u2212", "zoom out", function () {
    var w = view.max - view.min, c = (view.max + view.min) / 2;
    setView(c - w, c + w);
  });
  button("\u25c0", "pan left", function () { var w = view.max - view.min; setView(view.min - w / 4, view.max - w / 4); });
  button("\u25b6", "pan right", function () { var w = view.max - view.min; setView(view.min + w / 4, view.max + w / 4); });
  button("reset", "show the whole run", function () { setView(full.min, full.max); });

  function offsetOf(rank) { return align ? rank.offsetS : 0; }
  function xsOf(rank) {
    var off = offsetOf(rank), xs = new Float64Array(rank.x.length);
    for (var i = 0; i < xs.length; i++) xs[i] = rank.x[i] - off;
    return xs;
  }
  function phaseAt(rank, t) {
    var best = null;
    for (var i = 0; i < rank.spans.length; i++) {
      var s = rank.spans[i];
      if (s[0] > t) break;
      if (s[1] >= t && (best === null || s[2] >= best[2])) best = s;
    }
    return best === null ? null : tl.phasePaths[best[3]];
  }
  function maxDepth(rank) {
    var depth = 0;
    rank.spans.forEach(function (s) { if (s[2] > depth) depth = s[2]; });
    return depth;
  }
  function colorOf(index) {
    var hue = (index * 47) % 360;
    return "hsl(" + hue + ", 55%, 62%)";
  }

  function drawBands(u, rank, canvas) {
    var dpr = window.devicePixelRatio || 1;
    var width = u.width, depth = maxDepth(rank);
    var height = Math.max(depth, 1) * BAND_ROW;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    var left = u.bbox.left / dpr, plotWidth = u.bbox.width / dpr, off = offsetOf(rank);
    ctx.font = "10px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (var i = 0; i < rank.spans.length; i++) {
      var s = rank.spans[i];
      var x0 = u.valToPos(s[0] - off, "x"), x1 = u.valToPos(s[1] - off, "x");
      if (x1 < 0 || x0 > plotWidth) continue;
      x0 = Math.max(x0, 0); x1 = Math.min(x1, plotWidth);
      var y = (s[2] - 1) * BAND_ROW;
      ctx.fillStyle = colorOf(s[3]);
      ctx.fillRect(left + x0, y + 1, Math.max(x1 - x0, 1), BAND_ROW - 2);
      if (x1 - x0 > 40) {
        var path = tl.phasePaths[s[3]];
        var name = path.split(" / ").pop();
        ctx.fillStyle = "#111";
        ctx.save();
        ctx.beginPath();
        ctx.rect(left + x0, y, x1 - x0, BAND_ROW);
        ctx.clip();
        ctx.fillText(name, left + x0 + 3, y + BAND_ROW / 2);
        ctx.restore();
      }
    }
  }

  function drawMarkers(u, rank) {
    var ctx = u.ctx, off = offsetOf(rank), dpr = window.devicePixelRatio || 1;
    var top = u.bbox.top, bottom = u.bbox.top + u.bbox.height;
    ctx.save();
    rank.markers.forEach(function (m) {
      var x = u.valToPos(m.t - off, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.strokeStyle = MARKERS[m.kind];
      ctx.lineWidth = (m.kind === "spike" || m.kind === "oom" ? 2.5 : 1.25) * dpr;
      ctx.setLineDash(m.kind === "collector" ? [4 * dpr, 3 * dpr] : []);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, bottom);
      ctx.stroke();
    });
    ctx.restore();
  }

  function readout(u, rank, node) {
    var left = u.cursor.left;
    if (left === undefined || left === null || left < 0) { node.textContent = "hover the chart for exact values"; node.classList.remove("active"); return; }
    var t = u.posToVal(left, "x"), off = offsetOf(rank);
    var idx = u.cursor.idx;
    node.textContent = "";
    node.classList.add("active");
    var phase = phaseAt(rank, t + off);
    node.appendChild(el("span", "ro-time", "t = " + (t).toFixed(3) + " s"));
    node.appendChild(el("span", "ro-phase", "phase: " + (phase === null ? "(none)" : phase)));
    if (idx !== null && idx !== undefined) {
      node.appendChild(el("span", "ro-row", "reading at " + (rank.x[idx] - off).toFixed(3) + " s:"));
      rank.series.forEach(function (series, k) {
        if (hidden[series.kind]) return;
        var v = rank.y[k][idx];
        var item = el("span", "ro-value", series.label + " " + bytes(v) + (v === null ? "" : " (" + grouped(v) + " B)"));
        item.style.borderColor = COLORS[series.kind];
        node.appendChild(item);
      });
    }
    var px = 5 * (u.scales.x.max - u.scales.x.min) / Math.max(u.bbox.width / (window.devicePixelRatio || 1), 1);
    rank.markers.forEach(function (m) {
      if (Math.abs(m.t - off - t) <= px) {
        var item = el("span", "ro-marker", m.label + (m.phase ? " in " + m.phase : ""));
        item.style.borderColor = MARKERS[m.kind];
        node.appendChild(item);
      }
    });
  }

  function makeChart(entry) {
    var rank = decoded(entry.rank), host = entry.host;
    var series = [{}];
    rank.series.forEach(function (s) {
      series.push({ label: s.label, stroke: COLORS[s.kind], width: 1.25, points: { show: false }, show: !hidden[s.kind] });
    });
    var width = Math.max(host.clientWidth, 300);
    var opts = {
      width: width,
      height: 170,
      legend: { show: false },
      scales: { x: { time: false, auto: false, min: view.min, max: view.max }, y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.05 : 1]; } } },
      axes: [
        { values: function (u, splits) { return splits.map(function (v) { return secs(v); }); }, size: 28 },
        { values: function (u, splits) { return splits.map(function (v) { return bytes(v); }); }, size: 90 },
      ],
      series: series,
      cursor: { sync: { key: "stormlog" }, drag: { x: true, y: false, setScale: true }, points: { show: false } },
      hooks: {
        setScale: [function (u, key) {
          if (key !== "x" || syncing) return;
          setView(u.scales.x.min, u.scales.x.max);
        }],
        setCursor: [function (u) { readout(u, rank, entry.readout); }],
        draw: [function (u) { drawMarkers(u, rank); drawBands(u, rank, entry.bands); }],
      },
    };
    var u = new uPlot(opts, [xsOf(rank)].concat(rank.y), host);
    entry.u = u;
    // The bands under the chart: the pointer over one names its phase path and its span.
    entry.bands.addEventListener("mousemove", function (e) {
      var rect = entry.bands.getBoundingClientRect();
      var x = e.clientX - rect.left - u.bbox.left / (window.devicePixelRatio || 1);
      var depth = Math.floor((e.clientY - rect.top) / BAND_ROW) + 1;
      var t = u.posToVal(x, "x") + offsetOf(rank), hit = null;
      for (var i = 0; i < rank.spans.length; i++) {
        var s = rank.spans[i];
        if (s[0] > t) break;
        if (s[1] >= t && s[2] === depth) hit = s;
      }
      entry.readout.textContent = "";
      entry.readout.classList.toggle("active", hit !== null);
      if (hit === null) { entry.readout.textContent = "hover the chart for exact values"; return; }
      entry.readout.appendChild(el("span", "ro-phase", "phase: " + tl.phasePaths[hit[3]]));
      entry.readout.appendChild(el("span", "ro-time", (hit[0] - offsetOf(rank)).toFixed(3) + " s to " + (hit[1] - offsetOf(rank)).toFixed(3) + " s (" + secs(hit[1] - hit[0]) + ")"));
    });
    u.over.addEventListener("dblclick", function (e) { e.stopPropagation(); setView(full.min, full.max); }, true);
    u.over.addEventListener("wheel", function (e) {
      e.preventDefault();
      var rect = u.over.getBoundingClientRect();
      var at = u.posToVal(e.clientX - rect.left, "x");
      var factor = e.deltaY < 0 ? 0.8 : 1.25;
      setView(at - (at - view.min) * factor, at + (view.max - at) * factor);
    }, { passive: false });
    u.over.addEventListener("mousedown", function (e) {
      if (!e.shiftKey) return;
      e.stopPropagation();
      e.preventDefault();
      var startX = e.clientX, start = { min: view.min, max: view.max };
      var perPx = (start.max - start.min) / Math.max(u.over.clientWidth, 1);
      function move(ev) { var d = (ev.clientX - startX) * perPx; setView(start.min - d, start.max - d); }
      function up() { window.removeEventListener("mousemove", move, true); window.removeEventListener("mouseup", up, true); }
      window.addEventListener("mousemove", move, true);
      window.addEventListener("mouseup", up, true);
    }, true);
    charts.push(entry);
  }

  function realign() {
    charts.forEach(function (entry) {
      entry.u.setData([xsOf(entry.rank)].concat(entry.rank.y), false);
      entry.u.redraw();
    });
  }

  var pending = [];
  var list = el("div", "ranks");
  tl.ranks.forEach(function (rank) {
    var box = el("div", "rank" + (rank.suspect > 0 ? " suspect" : ""));
    box.dataset.rank = String(rank.rank);
    var head = el("div", "rank-head");
    head.appendChild(el("span", "rank-name", rank.name));
    if (rank.suspect > 0) head.appendChild(el("span", "badge", rank.suspect === 1 ? "first cause" : "suspect #" + rank.suspect));
    // Counted from the encoded data (\`decode\`): the rank is decoded when its chart is made.
    var drawn = pointCount(rank);
    var details = grouped(rank.rowCount) + " readings, " + grouped(drawn) + " drawn, " + grouped(Math.floor(rank.spans.length / 4)) + " phase spans";
    if (tl.aligned && rank.offsetS !== 0) details += ", clock offset " + secs(rank.offsetS);
    if (rank.spansDropped > 0) details += " (" + grouped(rank.spansDropped) + " shortest spans left out)";
    if (rank.markersDropped > 0) details += " (" + grouped(rank.markersDropped) + " markers left out)";
    head.appendChild(el("span", "rank-detail", details));
    box.appendChild(head);
    var host = el("div", "chart");
    box.appendChild(host);
    var bands = document.createElement("canvas");
    bands.className = "bands";
    box.appendChild(bands);
    var ro = el("div", "readout", "hover the chart for exact values");
    box.appendChild(ro);
    list.appendChild(box);
    var entry = { rank: rank, host: host, bands: bands, readout: ro, u: null, box: box };
    if (drawn === 0) {
      host.appendChild(el("p", "empty", "No memory reading on this rank."));
      return;
    }
    pending.push(entry);
  });
  if (tl.ranks.length === 0) list.appendChild(el("p", "empty", "No rank has any event."));
  section.appendChild(list);
  root.appendChild(section);

  // Tables.
  data.tables.forEach(function (table) {
    var part = el("section", "table-section");
    part.id = table.id;
    part.appendChild(el("h2", null, table.title + " (" + table.rows.length + ")"));
    part.appendChild(el("p", "intro", table.intro));
    if (table.note) part.appendChild(el("p", "note", table.note));
    if (table.rows.length === 0) {
      part.appendChild(el("p", "empty", table.empty));
    } else {
      var wrap = el("div", "table-wrap");
      var t = el("table");
      var thead = el("thead"), tr = el("tr");
      function cls(i) { return table.numeric.indexOf(i) >= 0 ? "num" : table.wide.indexOf(i) >= 0 ? "wide" : "tight"; }
      table.columns.forEach(function (c, i) { tr.appendChild(el("th", cls(i), c)); });
      thead.appendChild(tr);
      t.appendChild(thead);
      var body = el("tbody");
      table.rows.forEach(function (row) {
        var r = el("tr");
        row.forEach(function (cell, i) { r.appendChild(el("td", cls(i), cell)); });
        body.appendChild(r);
      });
      t.appendChild(body);
      wrap.appendChild(t);
      part.appendChild(wrap);
    }
    root.appendChild(part);
  });
  var foot = el("footer", null, "Made by " + data.generator + ". Charts: uPlot (MIT), inlined; this page loads nothing from the network.");
  root.appendChild(foot);

  // Charts of the ranks in view now; the others when they come near.
  var limit = window.innerHeight + 400;
  var later = [];
  // Every box measured before any chart is made: a chart changes the layout, and a measure after
  // it laid the whole page out again (once per rank).
  var tops = pending.map(function (entry) { return entry.box.getBoundingClientRect().top; });
  pending.forEach(function (entry, i) {
    if (tops[i] < limit) makeChart(entry);
    else later.push(entry);
  });
  if (later.length > 0) {
    if ("IntersectionObserver" in window) {
      var observer = new IntersectionObserver(function (entries) {
        entries.forEach(function (item) {
          if (!item.isIntersecting) return;
          observer.unobserve(item.target);
          var entry = item.target.__stormlogEntry;
          if (entry && entry.u === null) makeChart(entry);
        });
      }, { rootMargin: "600px 0px" });
      later.forEach(function (entry) { entry.box.__stormlogEntry = entry; observer.observe(entry.box); });
    } else {
      later.forEach(makeChart);
    }
  }
  window.addEventListener("resize", function () {
    charts.forEach(function (entry) { entry.u.setSize({ width: Math.max(entry.host.clientWidth, 300), height: 170 }); });
  });
  requestAnimationFrame(function () {
    window.__stormlogReport = { paintedMs: performance.now(), charts: charts.length, ranks: tl.ranks.length };
    document.documentElement.setAttribute("data-report-ready", "1");
  });
})();`;
