// The heft console page: plain JavaScript over the console's JSON API (console_server.h),
// Chart.js for plots. Routes: #/ (jobs and tunings), #/job/NAME, #/tuning/NAME. Every view
// polls every 2 s; charts are updated in place so a zoom (mouse wheel; double-click resets)
// survives the refresh.
// Logging in: the URL heft console prints carries ?token=...; the page trades it at once for
// the console's session cookie (POST /api/login; HttpOnly, so no script reads it) and drops it
// from the address bar and history. Without one, a 401 shows a form that asks for the token.
// Dates are ISO 8601 in UTC.
"use strict";

const POLL_MS = 2000;
let timer = null;
let charts = {};
let logState = { rank: null, offset: -1, follow: true };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") e.onclick = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

class LoginNeeded extends Error {}

async function api(path, options) {
  const r = await fetch(path, Object.assign({ credentials: "same-origin", cache: "no-store" }, options));
  const body = await r.json().catch(() => ({}));
  if (r.status === 401) throw new LoginNeeded(body.error || "the console needs its token");
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// Trades `token` for the session cookie; true when the console took it.
async function login(token) {
  try {
    await api("/api/login", { method: "POST", body: "", headers: { Authorization: "Bearer " + token } });
    return true;
  } catch (e) { return false; }
}

function showLogin(message) {
  clearTimeout(timer);
  const input = el("input", { type: "password", id: "token", autocomplete: "off", size: "70" });
  const note = el("p", { class: "muted" }, message);
  const submit = async () => {
    if (await login(input.value.trim())) route();
    else note.textContent = "That token was refused.";
  };
  input.addEventListener("keydown", ev => { if (ev.key === "Enter") submit(); });
  document.getElementById("main").replaceChildren(el("h2", {}, "Log in"),
    el("p", {}, "Open the URL heft console printed (it carries the token), or paste the token:"),
    input, el("button", { id: "login", onclick: submit }, "Log in"), note);
  document.getElementById("live").textContent = "";
}

function fmt(x, d = 1) { return x === null || x === undefined ? "" : Number(x).toFixed(d); }
// ISO 8601 in UTC, to the second: 2026-11-25T12:32:41Z.
function iso(ms) { return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z"); }
function time(t) { return t ? iso(t * 1000) : ""; }
function canvasId(name) { return "chart-" + name.replace(/[^A-Za-z0-9_-]/g, "_"); }

function table(headers, rows) {
  const t = el("table", {});
  if (headers.some(h => h)) t.append(el("tr", {}, ...headers.map(h => el("th", {}, h))));
  for (const r of rows) t.append(el("tr", {}, ...r.map(c => el("td", {}, c))));
  return t;
}

// A line chart in `parent`, made once and then updated in place.
function lineChart(parent, name, title, xLabel, datasets) {
  const id = canvasId(name);
  let c = charts[id];
  if (!c || !document.getElementById(id)) {
    const box = el("div", { class: "chart" });
    const canvas = el("canvas", { id: id });
    box.append(canvas);
    parent.append(box);
    c = new Chart(canvas, {
      type: "line",
      data: { datasets: [] },
      options: {
        animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
        plugins: { title: { display: true, text: title } },
        elements: { point: { radius: 0 } },
        scales: { x: { type: "linear", title: { display: true, text: xLabel } } },
      },
    });
    canvas.addEventListener("wheel", ev => {  // zoom the x axis around the cursor
      ev.preventDefault();
      const x = c.scales.x, at = x.getValueForPixel(ev.offsetX);
      const f = ev.deltaY < 0 ? 0.8 : 1.25;
      c.options.scales.x.min = at - (at - x.min) * f;
      c.options.scales.x.max = at + (x.max - at) * f;
      c.update("none");
    });
    canvas.addEventListener("dblclick", () => {
      delete c.options.scales.x.min; delete c.options.scales.x.max; c.update("none");
    });
    charts[id] = c;
  }
  // Points are hidden on lines; a series of a few points would otherwise not show at all.
  for (const d of datasets)
    if (d.pointRadius === undefined && d.data.length < 3) d.pointRadius = 3;
  c.data.datasets = datasets;
  c.update("none");
  return c;
}

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
function datasetsOf(series, useStep) {
  return Object.entries(series || {}).map(([rank, pts], i) => ({
    label: Number(rank) >= 0 ? "rank " + rank : "job",
    data: pts.map(p => ({ x: useStep && p[1] !== null ? p[1] : p[0], y: p[2] })),
    borderColor: COLORS[i % COLORS.length], borderWidth: 1.5, fill: false,
  }));
}

async function jobsView(main) {
  const data = await api("/api/jobs");
  main.replaceChildren(
    el("h2", {}, "Training jobs"),
    table(["Name", "Status", "Secondary", "Created", "Training s", "Billable s", "Attempts"],
      data.jobs.map(j => [el("a", { href: "#/job/" + encodeURIComponent(j.name), class: "job-link" }, j.name),
        el("span", { class: j.status }, j.status), j.secondary_status, time(j.created_at),
        fmt(j.training_seconds), fmt(j.billable_seconds), j.attempts])),
    el("h2", {}, "Tuning jobs"),
    table(["Name", "Status", "Strategy", "Trials", "Best objective", "Created"],
      data.tunings.map(t => [el("a", { href: "#/tuning/" + encodeURIComponent(t.name) }, t.name),
        el("span", { class: t.status }, t.status), t.strategy,
        Object.entries(t.trial_counts || {}).map(([k, v]) => k + " " + v).join(", "),
        t.best_trial ? fmt(t.best_trial.objective, 4) : "", time(t.created_at)])));
}

async function stop(kind, name) {
  try {
    await api("/api/" + kind + "/" + encodeURIComponent(name) + "/stop", { method: "POST", body: "" });
  } catch (e) { alert(e.message); }
}

async function jobView(main, name, first) {
  const [job, metrics] = await Promise.all([
    api("/api/jobs/" + encodeURIComponent(name)),
    api("/api/jobs/" + encodeURIComponent(name) + "/metrics")]);
  if (first) {
    // The log pane opens on the rank that reports (job.log_rank: a pipeline's last stage, say).
    if (logState.rank === null) logState = { rank: job.log_rank || 0, offset: -1, follow: true };
    main.replaceChildren(
      el("h2", {}, "Job " + name), el("div", { id: "summary" }),
      el("h2", {}, "Training metrics"), el("div", { id: "training", class: "charts" }),
      el("h2", {}, "Step time and system metrics"), el("div", { id: "system", class: "charts" }),
      el("h2", {}, "Rule findings"), el("div", { id: "findings" }),
      el("h2", {}, "Logs"), el("div", { id: "logbar" }), el("pre", { id: "log", class: "log" }));
    const bar = document.getElementById("logbar");
    for (let r = 0; r < job.world_size; r++)
      bar.append(el("button", { id: "log-rank-" + r, onclick: () => { logState = { rank: r, offset: -1, follow: true };
        document.getElementById("log").textContent = ""; markRank(); } }, "rank " + r));
    const follow = el("label", {}, el("input", { type: "checkbox", id: "follow", checked: "" }), " follow");
    bar.append(follow);
    markRank();
  }
  const summary = document.getElementById("summary");
  const rows = [["Status", el("span", { class: job.status }, job.status + " (" + job.secondary_status + ")")],
    ["Created", time(job.created_at)], ["Training time", fmt(job.training_seconds) + " s"],
    ["Billable time", fmt(job.billable_seconds) + " s (" + fmt(job.running_seconds) + " s x " +
      job.instance_count + " instances)"], ["Workers", job.world_size], ["Attempts", job.attempts]];
  if (job.failure_reason) rows.push(["Failure reason", el("pre", {}, job.failure_reason)]);
  summary.replaceChildren(table(["", ""], rows));
  if (job.can_stop && (job.status === "InProgress"))
    summary.append(el("button", { onclick: () => stop("jobs", name) }, "Stop job"));

  const training = document.getElementById("training");
  for (const metric of Object.keys(metrics).filter(n => !n.startsWith("system:") && !n.startsWith("step:")).sort())
    lineChart(training, metric, metric, "seconds", datasetsOf(metrics[metric], false));
  const system = document.getElementById("system");
  lineChart(system, "step:total_ms", "step time (ms)", "step", datasetsOf(metrics["step:total_ms"], true));
  hostPanels(system, metrics);

  document.getElementById("findings").replaceChildren(job.findings.length === 0 ? el("p", {}, "None.") :
    table(["Rule", "Rank", "Finding", "Action"], job.findings.map(f => [f.rule, f.rank >= 0 ? f.rank : "all", f.message, f.action])));

  const follow = document.getElementById("follow");
  if (!follow || follow.checked || logState.offset < 0) {
    const log = await api("/api/jobs/" + encodeURIComponent(name) + "/logs?rank=" + logState.rank + "&offset=" + logState.offset);
    const pre = document.getElementById("log");
    pre.textContent += log.text;
    logState.offset = log.offset;
    pre.scrollTop = pre.scrollHeight;
  }
}

// The workers' CPU and memory: one panel a host (the profiler's system:host:HOST series, a
// point a rank, its value the host's cores) with that host's cores busy, when the ranks ran on
// more than one host; else one chart each for every worker.
function hostPanels(system, metrics) {
  const tag = "system:host:";
  const hosts = Object.keys(metrics).filter(n => n.startsWith(tag)).sort();
  if (hosts.length < 2) {
    lineChart(system, "system:cpu_percent", "CPU per worker (% of one core)", "seconds", datasetsOf(metrics["system:cpu_percent"], false));
    lineChart(system, "system:rss_mb", "resident memory per worker (MB)", "seconds", datasetsOf(metrics["system:rss_mb"], false));
    return;
  }
  let all = document.getElementById("hosts");
  if (!all) {
    all = el("div", { id: "hosts" });
    system.after(all);
  }
  for (const key of hosts) {
    const host = key.slice(tag.length);
    const ranks = Object.keys(metrics[key]);
    const points = Object.values(metrics[key])[0];
    const cores = points.length ? points[points.length - 1][2] : 0;
    const pick = series => Object.fromEntries(Object.entries(series || {}).filter(([r]) => ranks.includes(r)));
    const id = canvasId("host-" + host);
    let box = document.getElementById(id);
    if (!box) {
      box = el("div", { id: id, class: "charts" });
      all.append(el("h3", {}, host + ": " + cores + " cores, rank" + (ranks.length === 1 ? " " : "s ") +
        ranks.join(", ")), box);
    }
    lineChart(box, "cpu@" + host, "CPU per worker on " + host + " (% of one core)", "seconds", datasetsOf(pick(metrics["system:cpu_percent"]), false));
    lineChart(box, "rss@" + host, "resident memory per worker on " + host + " (MB)", "seconds", datasetsOf(pick(metrics["system:rss_mb"]), false));
    const cores_busy = {};
    for (const n of Object.keys(metrics).filter(n => n.startsWith("system:" + host + "/core")))
      cores_busy[n.slice(("system:" + host + "/").length).split("_")[0]] = (metrics[n]["-1"] || []);
    lineChart(box, "cores@" + host, "cores busy on " + host + " (%)", "seconds",
      Object.entries(cores_busy).map(([c, pts], i) => ({ label: c, data: pts.map(p => ({ x: p[0], y: p[2] })),
        borderColor: COLORS[i % COLORS.length], borderWidth: 1.5, fill: false })));
  }
}

// Marks the button of the rank whose log is shown.
function markRank() {
  for (const b of document.querySelectorAll("#logbar button"))
    b.classList.toggle("active", b.id === "log-rank-" + logState.rank);
}

async function tuningView(main, name, first) {
  const t = await api("/api/tunings/" + encodeURIComponent(name));
  if (first) main.replaceChildren(el("h2", {}, "Tuning " + name), el("div", { id: "tsummary" }),
    el("div", { id: "tchart", class: "charts" }), el("h2", {}, "Trials"), el("div", { id: "trials" }));
  const best = t.best_trial;
  document.getElementById("tsummary").replaceChildren(table(["", ""], [
    ["Status", el("span", { class: t.status }, t.status)], ["Strategy", t.strategy],
    ["Objective", t.objective.type + " " + t.objective.metric],
    ["Best trial", best ? best.name + " (" + fmt(best.objective, 4) + ")" : "none yet"]]));
  const points = t.trials.filter(x => x.objective !== null && x.end_time)
    .map(x => ({ x: x.end_time - t.created_at, y: x.objective }));
  lineChart(document.getElementById("tchart"), "tuning-objective", "trials' objective", "seconds since the tuning started",
    [{ label: t.objective.metric, data: points, showLine: false, pointRadius: 4, borderColor: COLORS[0], backgroundColor: COLORS[0] }]);
  document.getElementById("trials").replaceChildren(table(["Trial", "Status", "Objective", "Hyperparameters"],
    t.trials.map(x => [el("a", { href: "#/job/" + encodeURIComponent(x.name) }, x.name), x.status,
      fmt(x.objective, 4), JSON.stringify(x.hyperparameters)])));
}

async function route() {
  clearTimeout(timer);
  charts = {};
  logState = { rank: null, offset: -1, follow: true };
  const main = document.getElementById("main");
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const view = parts[0] === "job" ? (first) => jobView(main, parts[1], first)
    : parts[0] === "tuning" ? (first) => tuningView(main, parts[1], first)
    : () => jobsView(main);
  document.getElementById("where").textContent = parts[1] ? parts[0] + " " + parts[1] : "jobs";
  let first = true;
  const tick = async () => {
    try {
      await view(first);
      first = false;
      document.getElementById("live").textContent = "updated " + iso(Date.now());
    } catch (e) {
      if (e instanceof LoginNeeded) return showLogin(e.message);
      document.getElementById("live").textContent = "error: " + e.message;
    }
    timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

// A token in the address (the URL heft console printed) becomes the session cookie, and
// leaves the address bar and the history at once.
async function start() {
  window.addEventListener("hashchange", route);
  const params = new URLSearchParams(location.search);
  const token = params.get("token");
  if (token !== null) {
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + location.hash);
    if (!(await login(token))) return showLogin("The token in the address was refused.");
  }
  route();
}

start();
