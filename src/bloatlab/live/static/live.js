// bloatlab's live view: follows the server's stream of a run's (or a sweep's) updates and draws
// them with uPlot. The server sends the whole state first ("snapshot"), then what is new about
// twice a second ("update"); the page keeps every point of the run it shows.
"use strict";

const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
const $ = (id) => document.getElementById(id);

function fmt(value, digits) {
  return value === null || value === undefined ? "-" : Number(value).toFixed(digits);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c === null || c === undefined ? "" : c);
  return node;
}

function table(head, rows, numericFrom) {
  const t = el("table", {});
  if (head) t.append(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))));
  const body = el("tbody", {});
  for (const row of rows) {
    body.append(el("tr", {}, ...row.map((cell, i) => {
      const attrs = numericFrom !== undefined && i >= numericFrom ? { class: "num" } : {};
      return cell instanceof Node ? el("td", attrs, cell) : el("td", attrs, cell);
    })));
  }
  t.append(body);
  return t;
}

// A chart of lines by name, each with its own times; drawn on one time axis (seconds since t0).
class Chart {
  constructor(box, opts) {
    this.box = box;
    this.opts = opts || {};
    this.lines = new Map(); // name -> {x: [], y: []}
    this.plot = null;
    this.names = [];
    this.dirty = false;
    this.box.parentElement.hidden = true;
  }

  add(name, points) {
    if (!points || !points.length) return;
    let line = this.lines.get(name);
    if (!line) { line = { x: [], y: [] }; this.lines.set(name, line); }
    for (const [t, v] of points) { line.x.push(t); line.y.push(v); }
    this.dirty = true;
  }

  reset() {
    this.lines.clear();
    if (this.plot) this.plot.destroy();
    this.plot = null;
    this.key = null;
    this.box.parentElement.hidden = true;
  }

  data() {
    const names = [...this.lines.keys()].sort();
    const tables = names.map((n) => [this.lines.get(n).x, this.lines.get(n).y]);
    if (this.opts.baseline) {
      for (const n of names) {
        const b = this.opts.baseline(n);
        const xs = this.lines.get(n).x;
        if (b !== null && b !== undefined && xs.length) tables.push([[xs[0], xs[xs.length - 1]], [b, b]]);
      }
    }
    return { names, data: tables.length === 1 ? [tables[0][0], tables[0][1]] : uPlot.join(tables) };
  }

  draw() {
    if (!this.dirty || !this.lines.size) return;
    this.dirty = false;
    this.box.parentElement.hidden = false;
    const { names, data } = this.data();
    const width = Math.max(280, this.box.clientWidth || this.box.parentElement.clientWidth);
    const key = names.join("|") + "|" + (data.length - 1);
    if (!this.plot || key !== this.key) {
      if (this.plot) this.plot.destroy();
      this.key = key;
      const series = [{ label: "t (s)", value: (u, v) => fmt(v, 2) }];
      names.forEach((n, i) => series.push({
        label: n, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true,
        points: { show: this.opts.points || false, size: 5, fill: COLOURS[i % COLOURS.length] },
        paths: this.opts.points ? () => null : undefined,
      }));
      for (let i = names.length + 1; i < data.length; i++) {
        series.push({ label: `${names[i - names.length - 1]} idle`, stroke: COLOURS[(i - names.length - 1) % COLOURS.length],
                      dash: [6, 4], width: 1, spanGaps: true, points: { show: false } });
      }
      this.plot = new uPlot({
        width, height: 220, series, scales: { x: { time: false } },
        axes: [{ label: "seconds since t0" }, { size: 56 }], legend: { live: true },
      }, data, this.box);
    } else {
      this.plot.setData(data);
    }
  }

  resize() {
    if (this.plot) this.plot.setSize({ width: Math.max(280, this.box.clientWidth), height: 220 });
  }
}

const state = { baseline: {}, charts: {}, runDir: null };

function charts() {
  if (!state.charts.rtt) {
    state.charts = {
      rtt: new Chart($("c-rtt"), { baseline: (n) => state.baseline[n] }),
      goodput: new Chart($("c-goodput")),
      cwnd: new Chart($("c-cwnd")),
      backlog: new Chart($("c-backlog")),
      sojourn: new Chart($("c-sojourn")),
      drops: new Chart($("c-drops"), { points: true }),
      fetch: new Chart($("c-fetch"), { points: true }),
    };
  }
  return state.charts;
}

function showSpec(run) {
  if (!run) return;
  $("title").textContent = `bloatlab live: ${run.name || "run"}`;
  const links = (run.links || []).map((l) => [
    l.direction, l.rate_bps ? `${fmt(l.rate_bps / 1e6, 3)} Mbit/s` : "-", `${fmt(l.delay_ms, 2)} ms`,
    l.discipline || "-", l.packets ? `${l.packets} packets` : (l.bytes ? `${l.bytes} bytes` : "default"),
    l.probed ? "yes" : "",
  ]);
  const flows = (run.flows || []).map((f) => [f.name, f.kind, `${f.src} → ${f.dst}`, f.cc || "", f.dscp || ""]);
  const params = Object.entries(run.params || {}).map(([k, v]) => `${k}=${v}`).join(" ");
  $("spec").replaceChildren(
    el("p", { class: "note" }, `hosts: ${(run.hosts || []).join(", ")}${params ? "; parameters: " + params : ""}`),
    table(["direction", "rate", "delay", "queue", "limit", "probed"], links),
    table(["flow", "kind", "from → to", "cc", "mark"], flows));
}

function showStatus(status, where) {
  if (!status) return;
  const phase = status.phase;
  $("phase").textContent = phase === "running" ? "running" : phase === "complete" ? "the run is complete" : phase;
  $("phase").className = `phase ${phase}`;
  document.body.dataset.phase = phase;
  if (status.duration_s) {
    const elapsed = status.elapsed_s;
    $("clock").textContent = `${fmt(elapsed, 1)} s of ${fmt(status.duration_s, 0)} s` +
      (status.remaining_s !== null && phase === "running" ? `, ${fmt(status.remaining_s, 0)} s to go` : "");
    if (elapsed !== null && elapsed !== undefined) $("progress").value = Math.min(1, elapsed / status.duration_s);
  }
  $("reason").hidden = !status.reason;
  $("reason").textContent = status.reason || "";
  $("report").hidden = !status.report;
  if (status.report) {
    $("report").hidden = false;
    $("report").textContent = "its report";
    $("report").href = `files/${where ? where + "/" : ""}${status.report}`;
  }
}

function showWarnings(live, final) {
  const all = [...new Set([...(live || []), ...(final || [])])];
  $("warnings").replaceChildren(...all.map((w) => el("li", {}, w)));
}

function showFigures(figures) {
  if (!figures) return;
  const rows = [];
  for (const [name, r] of Object.entries(figures.rtt || {})) {
    rows.push([`${name} round trips`, cell(`rtt.${name}.count`, r.count, 0), "replies, median",
               cell(`rtt.${name}.median`, r.median, 1), "ms, p95", cell(`rtt.${name}.p95`, r.p95, 1), "ms, least",
               cell(`rtt.${name}.least`, r.least, 1), "ms"]);
  }
  for (const [name, g] of Object.entries(figures.goodput || {})) {
    rows.push([`${name} goodput`, cell(`goodput.${name}.last`, g.last, 2), "Mbit/s now, mean",
               cell(`goodput.${name}.mean`, g.mean, 2), "Mbit/s", "", "", "", ""]);
  }
  for (const [dir, q] of Object.entries(figures.queue || {})) {
    rows.push([`queue ${dir} (${q.discipline})`, cell(`queue.${dir}.backlog`, q.backlog, 0), "packets now, drops",
               cell(`queue.${dir}.drops`, q.drops, 0), "CE marks", cell(`queue.${dir}.marks`, q.marks, 0), "", "", ""]);
  }
  $("numbers").replaceChildren(table(null, rows).firstChild);
}

function cell(key, value, digits) {
  const node = el("span", { "data-figure": key }, fmt(value, digits));
  return node;
}

function showDatapath(dp) {
  if (!dp || !dp.lateness_us) return;
  const late = Object.entries(dp.lateness_us).map(([d, l]) => [d, fmt(l.p99, 0), fmt(l.max, 0)]);
  const workers = (dp.workers || []).map((w) => [w.name, fmt(w.busy_percent, 1), fmt(w.woke_late_p99_us, 0)]);
  $("datapath").replaceChildren(
    table(["direction", "departures late, p99 (us)", "max (us)"], late, 1),
    table(["worker", "busy (% of a core)", "woke late, p99 (us)"], workers, 1));
}

function applyRun(doc, fresh, where) {
  const c = charts();
  if (fresh) {
    for (const chart of Object.values(c)) chart.reset();
    $("datapath").replaceChildren(el("p", { class: "note" }, "no userspace datapath figures (yet)"));
    state.baseline = {};
  }
  if (doc.run) showSpec(doc.run);
  showStatus(doc.status, where);
  showWarnings(doc.warnings, doc.status && doc.status.warnings);
  if (doc.figures) {
    for (const [name, r] of Object.entries(doc.figures.rtt || {})) state.baseline[name] = r.least;
    showFigures(doc.figures);
  }
  const series = doc.series || {};
  for (const [chart, lines] of Object.entries(series)) {
    const target = chart === "marks" ? c.drops : c[chart];
    if (!target) continue;
    for (const [name, points] of Object.entries(lines)) target.add(chart === "marks" ? `${name} marks` : chart === "drops" ? `${name} drops` : name, points);
  }
  if (doc.figures && doc.figures.rtt) c.rtt.dirty = true;
  for (const chart of Object.values(c)) chart.draw();
  showDatapath(doc.datapath);
  if (doc.last_sample_real_s) {
    const ms = Date.now() - doc.last_sample_real_s * 1000;
    document.body.dataset.latencyMs = ms.toFixed(0);
    $("freshness").textContent = `newest sample ${fmt(ms / 1000, 1)} s old on arrival`;
  }
}

let compare = null;
function applySweep(doc, fresh) {
  const sweep = doc.sweep;
  $("sweep").hidden = false;
  $("title").textContent = `bloatlab live: sweep ${sweep.name || ""}`;
  const counts = {};
  for (const r of sweep.runs) counts[r.status] = (counts[r.status] || 0) + 1;
  document.body.dataset.sweepStatus = sweep.status || "";
  $("sweep-counts").textContent = `${sweep.status || ""}: ` + Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(", ");
  const rows = sweep.runs.map((r, i) => [String(i + 1), r.label, String(r.rep),
    el("span", { class: r.status, "data-run": `${r.label}/rep${r.rep}` }, r.status),
    r.grade || "", r.headline || r.reason || "",
    r.report ? el("a", { href: `files/${r.report}` }, "report") : ""]);
  $("runs").replaceChildren(...table(["#", "point", "rep", "status", "grade", "headline", ""], rows).childNodes);
  // What finished, compared: each run's RTT p95 and goodput, by its number in the table.
  const done = sweep.runs.map((r, i) => [i + 1, r]).filter(([, r]) => r.status === "complete" && r.figures);
  if (done.length) {
    $("compare-box").hidden = false;
    const goodputKey = Object.keys(done[0][1].figures).find((k) => k.startsWith("goodput "));
    const xs = done.map(([i]) => i);
    const data = [xs, done.map(([, r]) => r.figures["RTT p95 (ms)"] ?? null),
                  done.map(([, r]) => (goodputKey ? r.figures[goodputKey] ?? null : null))];
    if (!compare || compare.data[0].length > xs.length) {
      if (compare) compare.destroy();
      compare = new uPlot({
        width: Math.max(280, $("compare").clientWidth || 600), height: 220, scales: { x: { time: false } },
        series: [{ label: "run #" },
                 { label: "RTT p95 (ms)", stroke: COLOURS[0], paths: () => null, points: { show: true, size: 8, fill: COLOURS[0] } },
                 { label: goodputKey || "goodput", stroke: COLOURS[1], scale: "mbps", paths: () => null, points: { show: true, size: 8, fill: COLOURS[1] } }],
        axes: [{ label: "run # (the table's)" }, { label: "ms", size: 56 }, { side: 1, scale: "mbps", label: "Mbit/s", grid: { show: false } }],
      }, data, $("compare"));
    } else {
      compare.setData(data);
    }
  }
  if (doc.current) {
    const where = doc.current.dir;
    const restart = fresh || doc.current.fresh || where !== state.runDir;
    state.runDir = where;
    $("current-title").textContent = `The run going on: ${where}`;
    applyRun(doc.current, restart, where);
  }
  // The sweep's own state last: the run's says only how that run went.
  const phase = sweep.status === "running" ? "running" : sweep.status;
  $("phase").textContent = `the sweep is ${sweep.status || "starting"}`;
  $("phase").className = `phase ${phase}`;
  $("report").hidden = !sweep.report;
  if (sweep.report) {
    $("report").textContent = "the sweep's report";
    $("report").href = "files/report.html";
  }
}

function apply(doc, fresh) {
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  if (doc.error) {  // the view could not read something this time; the next update tries again
    $("freshness").textContent = `the view: ${doc.error}`;
    return;
  }
  if (doc.sweep) applySweep(doc, fresh); else applyRun(doc, fresh || Boolean(doc.fresh), "");
}

function connect() {
  const source = new EventSource("events");
  source.addEventListener("snapshot", (e) => apply(JSON.parse(e.data), true));
  source.addEventListener("update", (e) => apply(JSON.parse(e.data), false));
  source.onerror = () => {
    $("phase").textContent = document.body.dataset.phase === "complete" ? "the run is complete (the view has stopped)"
      : "the view is not answering; retrying";
  };
}

window.addEventListener("resize", () => { for (const chart of Object.values(state.charts)) chart.resize(); });
connect();
