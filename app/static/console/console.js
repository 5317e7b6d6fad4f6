// The crewbus console's own script: charts and live parts. Every page is complete without it.
//
// - Charts: each `.chart[data-chart]` is drawn with uPlot (vendored, /console/static/uplot.min.js)
//   from the `table.chart-data` its `data-chart` names: rows `tr[data-t=<unix seconds>]` with
//   the sent and delivered counts in their cells. The table stays in the page (folded once the
//   chart is drawn) for whoever wants the numbers.
// - Live parts: a page whose `<main>` has `data-events` opens that Server-Sent Events stream.
//   Each `swap` event carries server-rendered HTML whose root elements have ids; each replaces
//   the element of the same id. An `end` event (the session ended) closes the stream.
//
// No inline script or style anywhere (the console's CSP forbids both); the HTML swapped in was
// rendered by the console's templates, which escape everything an agent wrote.
(function () {
  "use strict";

  var SENT = "#1f6fb2";
  var DELIVERED = "#1e7f4f";

  function pad(n) { return n < 10 ? "0" + n : String(n); }

  // Axis labels as the table reads them: HH:MM in UTC.
  function minutes(u, splits) {
    return splits.map(function (t) {
      var d = new Date(t * 1000);
      return pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    });
  }

  function chartData(table) {
    var xs = [], sent = [], delivered = [];
    table.querySelectorAll("tbody tr[data-t]").forEach(function (row) {
      var cells = row.querySelectorAll("td");
      xs.push(Number(row.getAttribute("data-t")));
      sent.push(Number(cells[0].textContent));
      delivered.push(Number(cells[1].textContent));
    });
    return [xs, sent, delivered];
  }

  function drawChart(el) {
    if (el.uplot || typeof window.uPlot !== "function") return;
    var table = document.getElementById(el.getAttribute("data-chart"));
    if (!table) return;
    var width = Math.max(el.clientWidth, 240);
    var opts = {
      width: width,
      height: 180,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(4, max)]; } } },
      axes: [
        { stroke: "#4a5563", grid: { stroke: "#e6e9ee" }, ticks: { stroke: "#d4d8df" }, values: minutes },
        { stroke: "#4a5563", grid: { stroke: "#e6e9ee" }, ticks: { stroke: "#d4d8df" }, size: 40,
          incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000] }
      ],
      series: [
        {},
        { label: "Sent", stroke: SENT, width: 2, fill: "rgba(31, 111, 178, 0.08)", points: { show: false } },
        { label: "Delivered", stroke: DELIVERED, width: 2, dash: [6, 3], points: { show: false } }
      ]
    };
    el.uplot = new window.uPlot(opts, chartData(table), el);
    var figure = el.closest("figure");
    if (figure) figure.classList.add("drawn");
    var numbers = table.closest("details");
    if (numbers && !numbers.hasAttribute("data-kept-open")) numbers.open = false;
  }

  function drawCharts(root) {
    root.querySelectorAll(".chart[data-chart]").forEach(drawChart);
  }

  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () {
      document.querySelectorAll(".chart[data-chart]").forEach(function (el) {
        if (el.uplot) el.uplot.setSize({ width: Math.max(el.clientWidth, 240), height: 180 });
      });
    }, 150);
  });

  // Remembers what a swap would lose: which folded tables were open, and what had the focus.
  function keep(old) {
    var open = {};
    old.querySelectorAll("details").forEach(function (d) {
      var t = d.querySelector("table[id]");
      if (t && d.open) open[t.id] = true;
    });
    var focus = null;
    var active = document.activeElement;
    if (active && old.contains(active)) {
      var form = active.closest("form");
      if (form) focus = "form[action=\"" + form.getAttribute("action") + "\"] button";
      else if (active.getAttribute("href")) focus = "a[href=\"" + active.getAttribute("href") + "\"]";
    }
    return { open: open, focus: focus };
  }

  function restore(fresh, kept) {
    fresh.querySelectorAll("details").forEach(function (d) {
      var t = d.querySelector("table[id]");
      if (t && kept.open[t.id]) d.setAttribute("data-kept-open", "");
    });
    drawCharts(fresh);
    if (kept.focus) {
      var target = fresh.querySelector(kept.focus);
      if (target) target.focus();
    }
  }

  function swap(html) {
    var template = document.createElement("template");
    template.innerHTML = html;
    Array.prototype.slice.call(template.content.children).forEach(function (fresh) {
      var old = fresh.id && document.getElementById(fresh.id);
      if (!old) return;
      var kept = keep(old);
      old.replaceWith(fresh);
      restore(fresh, kept);
    });
  }

  function status(text, state) {
    document.querySelectorAll("[data-live-status]").forEach(function (el) {
      el.textContent = text;
      el.setAttribute("data-state", state);
      el.hidden = false;
    });
  }

  function live() {
    var main = document.querySelector("main[data-events]");
    if (!main || typeof window.EventSource !== "function") return;
    var source = new EventSource(main.getAttribute("data-events"));
    source.addEventListener("open", function () { status("Live", "open"); });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) status("Not live: reload the page", "closed");
      else status("Reconnecting…", "connecting");
    });
    source.addEventListener("swap", function (e) { swap(e.data); });
    source.addEventListener("end", function () {
      source.close();
      status("Not live: your session ended", "closed");
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  function start() {
    drawCharts(document);
    live();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
