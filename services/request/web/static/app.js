// AYCI's page: pick a model (SHA-256 computed here with WebCrypto), choose the matrix, submit,
// follow the run per combination, then read the table and the p99-against-cost chart.
// Plain JS, no library, no CDN. Every URL is relative, so the page works under an API
// Gateway stage path as well as at the root of a local server.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { file: null, sha256: null, memory: new Set([1769]), runId: null, inputs: null, plan: null, results: null, sort: { key: null, dir: 1 } };
const COLORS = { intel: "#2456c7", arm: "#d9480f" };

// ---------------------------------------------------------------- API
function apiKey() { return $("api-key").value.trim(); }

async function api(path, options = {}) {
  const headers = { "X-API-Key": apiKey(), ...(options.headers || {}) };
  if (options.json !== undefined) { headers["Content-Type"] = "application/json"; options.body = JSON.stringify(options.json); }
  const response = await fetch(path, { ...options, headers });
  if (!response.ok) throw new Error(await problemText(response));
  return response;
}

async function problemText(response) {
  let detail = response.statusText;
  try {
    const body = await response.json();
    detail = Array.isArray(body.detail)
      ? body.detail.map((e) => `${(e.loc || []).filter((p) => p !== "body").join(".")}: ${e.msg}`).join("\n")
      : body.detail;
  } catch (_) { /* not JSON */ }
  return `${response.status}: ${detail}`;
}

// ---------------------------------------------------------------- the model
async function sha256Hex(file) {
  const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function humanBytes(n) {
  const units = ["bytes", "KiB", "MiB", "GiB"];
  let i = 0, v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${n} bytes` : `${v.toFixed(1)} ${units[i]} (${n.toLocaleString("en")} bytes)`;
}

async function onModelChosen() {
  const file = $("model-file").files[0];
  state.file = file || null; state.sha256 = null;
  $("model-size").textContent = file ? humanBytes(file.size) : "–";
  $("model-sha256").textContent = file ? "computing…" : "–";
  $("model-stored").textContent = "–";
  if (!file) return;
  const sha = await sha256Hex(file);
  if (state.file !== file) return; // another file was chosen meanwhile
  state.sha256 = sha;
  $("model-sha256").textContent = sha;
  if (apiKey()) {
    try {
      const info = await (await api(`models/${sha}`)).json();
      $("model-stored").textContent = info.stored ? `yes (${info.format}): it will not be uploaded again` : "no: it will be uploaded (Check plan shows its signature)";
      renderSignature(info.signature);
    } catch (error) { $("model-stored").textContent = String(error.message); }
  }
}

async function ensureModelStored() {
  const offer = await (await api("models/uploads", { method: "POST", json: { sha256: state.sha256, size_bytes: state.file.size } })).json();
  if (offer.stored) return;
  status(`uploading the model (${humanBytes(state.file.size)})…`);
  const upload = offer.upload;
  if (upload.method === "PUT") {
    await api(upload.url, { method: "PUT", body: state.file, headers: { "Content-Type": "application/octet-stream" } });
  } else {
    const form = new FormData();
    Object.entries(upload.fields).forEach(([k, v]) => form.append(k, v));
    form.append("file", state.file);
    const response = await fetch(upload.url, { method: "POST", body: form });
    if (!response.ok) throw new Error(`the upload failed: ${response.status} ${await response.text()}`);
  }
  status("checking the upload…");
  const verified = await (await api(`models/${state.sha256}/verify`, { method: "POST", json: { size_bytes: state.file.size } })).json();
  $("model-stored").textContent = "yes (uploaded now)";
  renderSignature(verified.signature);
}

function renderSignature(signature) {
  $("model-signature").hidden = !signature;
  if (!signature) return;
  const rows = [];
  for (const [side, specs] of [["input", signature.inputs], ["output", signature.outputs]]) {
    for (const spec of specs) {
      rows.push(row([[side, "text"], [spec.name, "text"], [spec.dtype, "text"], [spec.dims ? `[${spec.dims.join(", ")}]` : "?", "text"], [spec.kind || "", "text"]],
        { "data-side": side, "data-name": spec.name }));
    }
  }
  $("model-signature").querySelector("tbody").replaceChildren(...rows);
  const notes = Object.entries(signature.dim_ranges || {}).map(([name, r]) => `${name}: ${r.min ?? ""}..${r.max ?? ""}`);
  $("signature-notes").textContent = [signature.format + (signature.external_data ? ", external data" : ""),
    notes.length ? `dynamic dims ${notes.join(", ")}` : "no dynamic dims", ...(signature.problems || [])].join("; ");
}

async function ensureInputsStored() {
  const file = $("inputs-file").files[0];
  if (!file) return null;
  if (state.inputs && state.inputs.file === file) return state.inputs.sha256;
  status("storing your inputs…");
  const stored = await (await api("inputs", { method: "PUT", body: file, headers: { "Content-Type": "application/octet-stream" } })).json();
  state.inputs = { file, sha256: stored.sha256 };
  return stored.sha256;
}

async function preparedRequest() {
  await ensureModelStored();
  const body = runRequest();
  const inputs = await ensureInputsStored();
  if (inputs) body.inputs_sha256 = inputs;
  return body;
}

async function onPlan() {
  if (!apiKey()) return status("enter your API key first", true);
  if (!state.file || !state.sha256) return status("choose a model file first", true);
  $("plan-button").disabled = true;
  try {
    const plan = await (await api("plans", { method: "POST", json: await preparedRequest() })).json();
    renderPlan(plan);
    status("");
  } catch (error) {
    status(error.message, true);
  } finally {
    $("plan-button").disabled = false;
  }
}

function renderPlan(plan) {
  state.plan = plan;
  $("plan").hidden = false;
  const t = plan.totals;
  $("plan-totals").textContent = `to measure ${t.to_measure}, reused ${t.reused}, impossible ${t.impossible}` +
    (t.predicted ? `, predicted ${t.predicted}` : "") + "; " +
    `estimated ${(t.estimated_wall_s / 60).toFixed(1)} min; as Lambda invocations ≈ $${t.estimated_benchmark_cost_usd.toFixed(4)}`;
  $("plan-table").tBodies[0].replaceChildren(...plan.combinations.map((c) => row([
    [c.label, "text"], [c.state, `text state-${c.state}`],
    [c.state === "measure" ? c.estimated_conversion_s.toFixed(0) : ""], [c.state === "measure" ? c.estimated_measurement_s.toFixed(0) : ""],
    [c.reason || "", "text reason"],
  ], { "data-combo": c.label, "data-state": c.state })));
  $("plan-drop").hidden = !t.impossible;
}

function dropImpossible() {
  // a batch size, memory size or optimizer is dropped when every combination with it cannot run
  const combos = state.plan.combinations;
  const allImpossible = (pick) => combos.filter(pick).every((c) => c.state === "impossible");
  const batches = numbers($("batch-sizes").value).filter((b) => !allImpossible((c) => c.combo.batch_size === b));
  $("batch-sizes").value = batches.join(",");
  for (const mb of [...state.memory]) if (allImpossible((c) => c.combo.memory_mb === mb)) state.memory.delete(mb);
  renderMemoryChips();
  for (const box of document.querySelectorAll("input[name^=opt-]:checked")) {
    const hw = box.name.slice(4);
    if (allImpossible((c) => c.combo.hardware === hw && c.combo.optimizer === box.value)) box.checked = false;
  }
  return onPlan();
}

// ---------------------------------------------------------------- the form
function renderMemoryChips() {
  const list = $("memory-chips");
  list.replaceChildren(...[...state.memory].sort((a, b) => a - b).map((mb) => {
    const item = document.createElement("li");
    item.dataset.mb = mb;
    item.append(`${mb} MB`);
    const remove = document.createElement("button");
    remove.type = "button"; remove.textContent = "×"; remove.title = `remove ${mb} MB`;
    remove.addEventListener("click", () => { state.memory.delete(mb); renderMemoryChips(); });
    item.append(remove);
    return item;
  }));
}

function addMemory(value) {
  const mb = Number(value);
  if (!Number.isInteger(mb) || mb < 128 || mb > 10240) { status("a Lambda memory size is a whole number of MB from 128 to 10240", true); return; }
  state.memory.add(mb); renderMemoryChips(); status("");
}

function numbers(text) { return text.split(",").map((s) => s.trim()).filter(Boolean).map(Number); }

function runRequest() {
  const matrix = {};
  for (const hw of ["intel", "arm"]) {
    const chosen = [...document.querySelectorAll(`input[name=opt-${hw}]:checked`)].map((c) => c.value);
    if (chosen.length) matrix[hw] = chosen;
  }
  const body = {
    model: { sha256: state.sha256, size_bytes: state.file.size },
    workload: $("workload").value,
    input_size: numbers($("input-size").value),
    matrix,
    batch_sizes: numbers($("batch-sizes").value),
    memory_sizes_mb: [...state.memory].sort((a, b) => a - b),
  };
  if ($("predict").checked) body.predict = true;
  if ($("profile").checked) body.profile = true;
  if ($("email").value.trim()) body.email = $("email").value.trim();
  if ($("slo").value) body.slo_p99_ms = Number($("slo").value);
  return body;
}

function status(text, isError = false) {
  $("form-status").textContent = text;
  $("form-status").classList.toggle("error", isError);
}

async function onSubmit(event) {
  event.preventDefault();
  if (!apiKey()) return status("enter your API key first", true);
  if (!state.file) return status("choose a model file first", true);
  if (!state.sha256) return status("still computing the model's SHA-256…", true);
  $("submit").disabled = true;
  try {
    const created = await (await api("runs", { method: "POST", json: await preparedRequest() })).json();
    status(`run ${created.run_id} submitted: ${created.combinations} combinations`);
    history.replaceState(null, "", `#run=${created.run_id}`);
    follow(created.run_id);
  } catch (error) {
    status(error.message, true);
  } finally {
    $("submit").disabled = false;
  }
}

// ---------------------------------------------------------------- progress
async function follow(runId) {
  state.runId = runId;
  rememberRun(runId);
  $("progress").hidden = false; $("results").hidden = true;
  $("run-id").textContent = runId;
  for (;;) {
    if (state.runId !== runId) return;
    let progress;
    try {
      progress = await (await api(`runs/${runId}`)).json();
    } catch (error) {
      status(error.message, true); return;
    }
    renderProgress(progress);
    if (progress.status !== "running") break;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  const results = await (await api(`runs/${runId}/results`)).json();
  if (state.runId === runId) renderResults(results);
}

function renderProgress(p) {
  const badge = $("run-status");
  badge.textContent = p.status; badge.className = `badge ${p.status}`;
  const skipped = p.skipped || 0;  // not measured: they cannot change the answer (TVM's tuning)
  $("run-bar").max = p.total; $("run-bar").value = p.measured + p.failed + skipped;
  $("run-counts").textContent = `${p.measured} measured, ${p.failed} failed, ` +
    (skipped ? `${skipped} skipped (they cannot change the answer), ` : "") + `${p.queued} to go of ${p.total}`;
  $("cancel-run").hidden = p.status !== "running";
  // racing (#38): the running answer with its intervals, from the first (provisional) answer on: its
  // picks, how many combinations have ended, what is still to come (GET /runs/{id} answer_text); `data-stage`
  // provisional, quick, refining or final
  let answer = $("running-answer");
  if (!answer && p.answer_text && p.answer_text.length) {
    answer = document.createElement("pre"); answer.id = "running-answer";
    $("progress-table").before(answer);
  }
  if (answer) {
    answer.textContent = (p.answer_text || []).join("\n");
    answer.dataset.stage = (p.answer && p.answer.stage) || "";
  }
  $("progress-table").tBodies[0].replaceChildren(...p.combinations.map((c) => row([
    [c.label, "text"], [c.state + (c.reused ? " (reused)" : ""), `text state-${c.state}`],
    [fmt("p50_ms", c.p50_ms)], [fmt("p99_ms", c.p99_ms)], [c.reason || "", "text reason"],
  ], { "data-combo": c.label, "data-state": c.state })));
}

function row(cells, attributes = {}) {
  const tr = document.createElement("tr");
  Object.entries(attributes).forEach(([k, v]) => tr.setAttribute(k, v));
  for (const [text, cls] of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.append(td);
  }
  return tr;
}

// ---------------------------------------------------------------- results
function fmt(key, value) {
  if (value === null || value === undefined || value === "") return "–";
  if (typeof value !== "number") return String(value);
  if (key === "agreement" || key === "cost_per_million_usd") return value.toFixed(4);
  if (key === "cold_start_usd") return value.toPrecision(3);  // a few millionths of a dollar
  return value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

const TEXT_COLUMNS = new Set(["combination", "status", "interval", "note"]);

function renderResults(results) {
  state.results = results;
  $("results").hidden = false;
  const badge = $("run-status");
  badge.textContent = results.status; badge.className = `badge ${results.status}`;
  renderRecommendation(results);
  const head = document.createElement("tr");
  for (const column of results.columns) {
    const th = document.createElement("th");
    th.textContent = column.title; th.dataset.key = column.key;
    if (TEXT_COLUMNS.has(column.key)) th.className = "text";
    th.addEventListener("click", () => sortBy(column.key));
    head.append(th);
  }
  head.append(document.createElement("th"));  // the "profile this" buttons
  $("results-table").tHead.replaceChildren(head);
  renderRows();
  drawChart(results);
  renderExportChoices(results);
  loadProfiles();
}

function renderRecommendation(results) {
  const box = $("recommendation");
  const lines = Object.entries(results.recommended).map(([kind, label]) => `<p><strong>${kind}:</strong> ${escapeHtml(label)}</p>`);
  if (!lines.length) lines.push("<p><strong>no recommendation:</strong> no measured combination qualifies</p>");
  const excluded = Object.entries(results.recommendation.excluded || {});
  for (const check of results.recommendation.checks || []) {
    lines.push(`<p class="check"><strong>checked ${escapeHtml(check.picked_as.join(", "))} pick ${escapeHtml(check.combination)}:</strong> `
      + `predicted p50 ${fmt("p50_ms", check.predicted_p50_ms)} ms` + (check.measured ? `, measured ${fmt("p50_ms", check.measured_p50_ms)} ms` : "")
      + ` — ${escapeHtml(check.verdict)}</p>`);
  }
  if (excluded.length) lines.push(`<p class="muted">not recommended: ${excluded.map(([l, why]) => `${escapeHtml(l)} (${escapeHtml(why)})`).join("; ")}</p>`);
  box.innerHTML = lines.join("");
}

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function sortBy(key) {
  state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
  renderRows();
}

function renderRows() {
  const { columns, rows, recommended } = state.results;
  const picked = new Set(Object.values(recommended));
  const { key, dir } = state.sort;
  const sorted = key === null ? rows.slice() : rows.slice().sort((a, b) => {
    const x = a[key], y = b[key];
    if (x === null || x === undefined) return 1; // missing values last, either way
    if (y === null || y === undefined) return -1;
    return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir;
  });
  $("results-table").tHead.querySelectorAll("th").forEach((th) => {
    if (th.dataset.key === key) th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  });
  $("results-table").tBodies[0].replaceChildren(...sorted.map((r) => {
    const tr = row(columns.map((c) => [fmt(c.key, r[c.key]), TEXT_COLUMNS.has(c.key) ? `text ${c.key}${c.key === "status" ? ` status-${r.status}` : ""}` : ""]), { "data-combo": r.combination });
    if (picked.has(r.combination)) tr.classList.add("recommended");
    const action = document.createElement("td");
    if (r.status === "measured" && r.combo_key) {
      const button = document.createElement("button");
      button.type = "button"; button.textContent = "profile"; button.title = "a profiled pass of this combination, confined as it was measured";
      button.addEventListener("click", () => requestProfile(r));
      action.append(button);
    }
    tr.append(action);
    return tr;
  }));
}

// ---------------------------------------------------------------- the chart (hand-drawn SVG)
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG, tag);
  Object.entries(attributes).forEach(([k, v]) => node.setAttribute(k, v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceTicks(lo, hi, count = 5) {
  const span = hi - lo || Math.abs(hi) || 1;
  const step0 = span / count, magnitude = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => span / s <= count) || magnitude * 10;
  const ticks = [];
  const last = Math.ceil(hi / step - 1e-9) * step; // the axis ends on a tick at or above the data
  for (let t = Math.floor(lo / step) * step; t <= last + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return ticks;
}

function drawChart(results) {
  const root = $("chart-svg");
  root.replaceChildren();
  const W = +root.getAttribute("width"), H = +root.getAttribute("height");
  const m = { left: 64, right: 150, top: 20, bottom: 48 };
  const points = results.rows.filter((r) => r.p99_ms != null && r.cost_per_million_usd != null);
  const missing = results.rows.filter((r) => r.status === "measured").length - points.length;
  if (!points.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", id: "chart-empty" },
      missing > 0 ? "no cost figures in these results: nothing to plot" : "no measured combination to plot"));
    return;
  }
  const xs = points.map((p) => p.cost_per_million_usd), ys = points.map((p) => p.p99_ms);
  const xTicks = niceTicks(0, Math.max(...xs) * 1.08), yTicks = niceTicks(0, Math.max(...ys) * 1.08);
  const xMax = xTicks[xTicks.length - 1], yMax = yTicks[yTicks.length - 1];
  const X = (v) => m.left + (v / xMax) * (W - m.left - m.right);
  const Y = (v) => H - m.bottom - (v / yMax) * (H - m.top - m.bottom);

  const grid = svg("g", { class: "grid" }), axis = svg("g", { class: "axis" });
  for (const t of xTicks) {
    grid.append(svg("line", { x1: X(t), x2: X(t), y1: Y(0), y2: Y(yMax) }));
    axis.append(svg("text", { x: X(t), y: Y(0) + 16, "text-anchor": "middle" }, `$${+t.toPrecision(4)}`));
  }
  for (const t of yTicks) {
    grid.append(svg("line", { x1: X(0), x2: X(xMax), y1: Y(t), y2: Y(t) }));
    axis.append(svg("text", { x: X(0) - 6, y: Y(t) + 4, "text-anchor": "end" }, `${+t.toPrecision(4)}`));
  }
  axis.append(svg("line", { x1: X(0), x2: X(xMax), y1: Y(0), y2: Y(0) }), svg("line", { x1: X(0), x2: X(0), y1: Y(0), y2: Y(yMax) }));
  axis.append(svg("text", { x: (X(0) + X(xMax)) / 2, y: H - 10, "text-anchor": "middle" }, "cost per 1 M inferences (USD)"));
  axis.append(svg("text", { x: 14, y: (Y(0) + Y(yMax)) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${(Y(0) + Y(yMax)) / 2})` }, "p99 latency (ms)"));
  root.append(grid, axis);

  const byLabel = Object.fromEntries(points.map((p) => [p.combination, p]));
  const front = results.pareto_front.map((label) => byLabel[label]).filter(Boolean);
  if (front.length > 1) {
    root.append(svg("polyline", {
      id: "pareto-front", fill: "none", stroke: "#18794e", "stroke-width": 2, "stroke-dasharray": "6 4",
      points: front.map((p) => `${X(p.cost_per_million_usd)},${Y(p.p99_ms)}`).join(" "),
    }));
  }
  const onFront = new Set(results.pareto_front);
  const recommended = Object.entries(results.recommended);
  for (const p of points) {
    const hardware = p.combination.split("/")[0];
    const g = svg("g", { class: "point", "data-combo": p.combination });
    g.append(svg("title", {}, `${p.combination}: p99 ${fmt("p99_ms", p.p99_ms)} ms, $${fmt("cost_per_million_usd", p.cost_per_million_usd)} per 1 M`));
    if (p.predicted && p.p99_interval) { // a predicted point: hollow, with its p99 interval
      g.classList.add("predicted");
      g.append(svg("line", { class: "interval", x1: X(p.cost_per_million_usd), x2: X(p.cost_per_million_usd),
        y1: Y(Math.min(p.p99_interval[1], yMax)), y2: Y(Math.max(p.p99_interval[0], 0)), stroke: COLORS[hardware] || "#555", "stroke-width": 1.5 }));
    }
    g.append(svg("circle", {
      cx: X(p.cost_per_million_usd), cy: Y(p.p99_ms), r: onFront.has(p.combination) ? 6 : 4.5,
      fill: p.predicted ? "#fff" : COLORS[hardware] || "#555", "fill-opacity": p.predicted || onFront.has(p.combination) ? 1 : 0.45,
      stroke: p.predicted ? COLORS[hardware] || "#555" : onFront.has(p.combination) ? "#18794e" : "none", "stroke-width": 2,
      "stroke-dasharray": p.predicted ? "2 2" : "none",
    }));
    g.append(svg("text", { x: X(p.cost_per_million_usd) + 9, y: Y(p.p99_ms) - 7 }, p.combination.split("/").slice(1).join("/")));
    root.append(g);
  }
  const kindsOf = {}; // one ring per recommended point, naming every kind it wins
  for (const [kind, label] of recommended) if (byLabel[label]) (kindsOf[label] = kindsOf[label] || []).push(kind);
  for (const [label, kinds] of Object.entries(kindsOf)) {
    const p = byLabel[label];
    root.append(svg("circle", { class: "recommended", "data-kind": kinds.join(" "), cx: X(p.cost_per_million_usd), cy: Y(p.p99_ms), r: 12, fill: "none", stroke: "#b42318", "stroke-width": 2.5 }));
    root.append(svg("text", { x: X(p.cost_per_million_usd) + 9, y: Y(p.p99_ms) + 22, fill: "#b42318", "font-weight": "bold" }, `★ ${kinds.join(", ")}`));
  }
  // legend
  const legend = svg("g", { transform: `translate(${W - m.right + 16}, ${m.top + 6})` });
  const entries = [["intel", COLORS.intel, "circle"], ["arm", COLORS.arm, "circle"], ["Pareto front", "#18794e", "line"], ["recommended", "#b42318", "ring"]];
  if (points.some((p) => p.predicted)) entries.push(["predicted (p99 interval)", "#555", "hollow"]);
  entries.forEach(([name, color, shape], i) => {
    const y = i * 20;
    if (shape === "circle") legend.append(svg("circle", { cx: 6, cy: y, r: 5, fill: color }));
    if (shape === "line") legend.append(svg("line", { x1: 0, x2: 14, y1: y, y2: y, stroke: color, "stroke-width": 2, "stroke-dasharray": "4 3" }));
    if (shape === "ring") legend.append(svg("circle", { cx: 7, cy: y, r: 6, fill: "none", stroke: color, "stroke-width": 2 }));
    if (shape === "hollow") legend.append(svg("circle", { cx: 6, cy: y, r: 5, fill: "#fff", stroke: color, "stroke-width": 2, "stroke-dasharray": "2 2" }));
    legend.append(svg("text", { x: 20, y: y + 4 }, name));
  });
  if (missing > 0) legend.append(svg("text", { x: 0, y: entries.length * 20 + 8 }, `${missing} without a cost: not shown`));
  root.append(legend);
}

// ---------------------------------------------------------------- traffic
async function simulateTraffic() {
  const body = { rps: Number($("traffic-rps").value), pattern: $("traffic-pattern").value, idle_timeout_s: Number($("traffic-idle").value) };
  if ($("traffic-slo").value) body.slo_p99_ms = Number($("traffic-slo").value);
  $("traffic-pick").textContent = "simulating…";
  try {
    const report = await (await api(`runs/${state.runId}/traffic`, { method: "POST", json: body })).json();
    $("traffic-pick").textContent = `cheapest that meets the SLO: ${report.recommended || "none"}`;
    $("traffic-table").tBodies[0].replaceChildren(...report.rows.flatMap((r) => r.options.map((o, i) => row([
      [i === 0 ? r.combination : "", "text"], [o.option, "text"], [`${(100 * o.cold_share).toFixed(2)} %`], [fmt("p50_ms", o.p50_ms)],
      [fmt("p99_ms", o.p99_ms)], [fmt("p99_ms", o.p999_ms)], [String(o.peak_instances)], [o.bill_usd.toFixed(2)],
      [[r.predicted && i === 0 ? "predicted" : "", o.assumption || ""].filter(Boolean).join("; "), "text"],
    ], { "data-combo": r.combination, "data-option": o.option }))));
  } catch (e) {
    $("traffic-pick").textContent = e.message;
  }
}

// ---------------------------------------------------------------- profiles
function profiledAt(tables, comboKey) {
  const found = tables.flatMap((t) => t.optimizers).find((o) => o.combo_key === comboKey);
  return found ? found.profiled_at : null;
}

async function requestProfile(r) {
  try {
    const before = profiledAt(await loadProfiles(), r.combo_key);
    const asked = await (await api(`runs/${state.runId}/combinations/${r.combo_key}/profile`, { method: "POST" })).json();
    if (asked.state === "profiled") {  // this run has its profile already: answered, no new pass
      $("profiles-status").textContent = `${r.combination} already profiled`; return;
    }
    $("profiles-status").textContent = `profiling ${r.combination}…`;
    for (let i = 0; i < 40; i++) {  // the worker profiles it in a confined pass: a few seconds to a minute
      await new Promise((resolve) => setTimeout(resolve, 3000));
      const after = profiledAt(await loadProfiles(), r.combo_key);
      if (after && after !== before) {
        $("profiles-status").textContent = `${r.combination} profiled`; return;
      }
    }
    $("profiles-status").textContent = `${r.combination}: no profile yet; refresh later`;
  } catch (e) {
    $("profiles-status").textContent = e.message;
  }
}

async function loadProfiles() {
  const runId = state.runId;
  let answer;
  try {
    answer = await (await api(`runs/${runId}/profiles`)).json();
  } catch (e) {
    $("profiles-status").textContent = e.message; return [];
  }
  if (state.runId !== runId) return [];
  $("profiles-tables").replaceChildren(...answer.tables.map(profileTable));
  if (!answer.tables.length) $("profiles-status").textContent = "nothing profiled yet";
  return answer.tables;
}

function profileTable(entry) {
  const table = document.createElement("table");
  table.className = "grid profile";
  table.dataset.title = entry.title;
  const caption = table.createCaption(); caption.textContent = entry.title;
  const head = document.createElement("tr");
  for (const title of ["group", ...entry.optimizers.map((o) => o.optimizer)]) {
    const th = document.createElement("th"); th.textContent = title; th.className = "text"; head.append(th);
  }
  table.createTHead().append(head);
  const body = table.createTBody();
  for (const r of entry.rows) {
    body.append(row([[r.group, "text"], ...entry.optimizers.map((o) => {
      const cell = r.optimizers[o.optimizer];
      return [cell.total_ms ? `${fmt("p50_ms", cell.total_ms)} ms (${Math.round(100 * cell.share)} %) ${cell.top || ""}` : "–", "text"];
    })], { "data-group": r.group }));
  }
  body.append(row([["p50 unprofiled / profiled", "text"], ...entry.optimizers.map((o) => [`${fmt("p50_ms", o.unprofiled_p50_ms)} / ${fmt("p50_ms", o.profiled_p50_ms)} ms`, "text"])]));
  const links = document.createElement("tr");
  links.append(Object.assign(document.createElement("td"), { textContent: "trace", className: "text" }));
  for (const o of entry.optimizers) {
    const td = document.createElement("td");
    const button = document.createElement("button");
    button.type = "button"; button.textContent = "download trace"; button.title = o.trace_note || "Chrome trace JSON: open it in Perfetto (ui.perfetto.dev)";
    button.addEventListener("click", () => downloadBlob(o.trace, `ayci-${o.combo_key}-trace.json`).catch((e) => { $("profiles-status").textContent = e.message; }));
    td.append(button);
    links.append(td);
  }
  body.append(links);
  return table;
}

async function downloadBlob(path, name, options = {}) {
  const blob = await (await api(path, options)).blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link); link.click(); link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// ---------------------------------------------------------------- downloads
async function download(kind) {
  const accept = kind === "csv" ? "text/csv" : "application/json";
  await downloadBlob(`runs/${state.runId}/results`, `ayci-${state.runId}.${kind}`, { headers: { Accept: accept } });
}

// ---------------------------------------------------------------- export (a deployable Lambda function)
function renderExportChoices(results) {
  const pick = results.recommended.balanced;
  const measured = results.rows.filter((r) => r.status === "measured").map((r) => r.combination);
  const options = [new Option(pick ? `the balanced pick (${pick})` : "the balanced pick (none)", "")];
  for (const label of measured) options.push(new Option(label, label));
  $("export-combination").replaceChildren(...options);
  $("export-status").textContent = "";
}

async function exportFunction() {
  const combination = $("export-combination").value;
  const label = combination || state.results.recommended.balanced || "pick";
  const status = $("export-status");
  status.classList.remove("error");
  status.textContent = `writing the function of ${label}…`;
  $("download-export").disabled = true;
  try {
    const query = combination ? `?combination=${encodeURIComponent(combination)}` : "";
    await downloadBlob(`runs/${state.runId}/export${query}`, `ayci-${label.replaceAll("/", "-")}.zip`);
    status.textContent = `${label}: downloaded (README.md inside says what was measured and how to deploy it)`;
  } catch (e) {
    status.textContent = e.message; status.classList.add("error");
  } finally {
    $("download-export").disabled = false;
  }
}

// ---------------------------------------------------------------- compare two runs
const KNOWN_RUNS = "ayci-runs";
const COMPARED = [["p50_ms", "p50 ms"], ["p99_ms", "p99 ms"], ["cold_start_ms", "cold start ms"],
  ["cost_per_million_usd", "$ per 1M"], ["peak_memory_mb", "peak MB"], ["agreement", "agreement"]];
const WORSE = new Set(["slower", "costlier", "larger", "lower"]), BETTER = new Set(["faster", "cheaper", "smaller", "higher"]);

function knownRuns() {
  try { return JSON.parse(localStorage.getItem(KNOWN_RUNS) || "[]"); } catch (_) { return []; }
}

function rememberRun(runId) {
  const runs = [runId, ...knownRuns().filter((r) => r !== runId)].slice(0, 20);
  localStorage.setItem(KNOWN_RUNS, JSON.stringify(runs));
  renderKnownRuns();
  // B: the run on the page; A: the one followed before it (the baseline), unless chosen already
  if (!$("compare-b").value || $("compare-b").value === runs[1]) $("compare-b").value = runId;
  if (!$("compare-a").value && runs[1]) $("compare-a").value = runs[1];
}

function renderKnownRuns() {
  $("known-runs").replaceChildren(...knownRuns().map((r) => new Option(r, r)));
}

function verdictClass(verdict) {
  return WORSE.has(verdict) ? "verdict-worse" : BETTER.has(verdict) ? "verdict-better" : verdict === "within noise" ? "verdict-noise" : "";
}

function comparedRuns() {
  const a = $("compare-a").value.trim(), b = $("compare-b").value.trim();
  if (!apiKey()) throw new Error("enter your API key first");
  if (!a || !b) throw new Error("name two runs: A (the baseline) and B");
  return [a, b];
}

async function compareRuns() {
  const status = $("compare-status");
  status.classList.remove("error");
  let a, b;
  try {
    [a, b] = comparedRuns();
    status.textContent = "comparing…";
    const comparison = await (await api(`runs/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`)).json();
    renderComparison(comparison);
  } catch (e) {
    status.textContent = e.message; status.classList.add("error");
    $("compare-table").hidden = true;  // nothing of an earlier comparison stays beside the error
    $("compare-differences").replaceChildren();
    for (const id of ["compare-only", "compare-noise"]) $(id).textContent = "";
  }
}

function figureCell(change, key) {
  const td = document.createElement("td");
  td.className = `figure ${verdictClass(change.verdict)}`;
  td.dataset.figure = key; td.dataset.verdict = change.verdict;
  const delta = change.change_pct != null ? `${change.change_pct >= 0 ? "+" : ""}${change.change_pct.toFixed(1)} %`
    : change.change != null ? `${change.change >= 0 ? "+" : ""}${change.change.toFixed(4)}` : "";
  td.append(`${fmt(key, change.a)} → ${fmt(key, change.b)} `);
  const small = document.createElement("small");
  small.textContent = [delta, change.verdict].filter(Boolean).join(", ");
  td.append(small);
  if (change.noise != null) {
    const band = key === "agreement" ? change.noise.toFixed(4) : `${change.noise.toFixed(1)} %`;
    td.title = `noise: ±${band}${change.noise_basis ? ` (${change.noise_basis})` : ""}`;
  }
  return td;
}

function renderComparison(c) {
  const regressions = c.combinations.filter((x) => WORSE.has(x.verdict)).length;
  $("compare-status").textContent = `${c.combinations.length} combination(s) in both runs` +
    (c.combinations.length ? `: ${regressions} slower beyond noise` : ": nothing to compare");
  $("compare-differences").replaceChildren(...c.differences.map((d) => {
    const item = document.createElement("li");
    item.textContent = `${d.what}: ${d.a} → ${d.b}`;
    return item;
  }));
  $("compare-table").hidden = !c.combinations.length;
  $("compare-table").tBodies[0].replaceChildren(...c.combinations.map((x) => {
    const tr = row([[x.combination, "text"], [x.verdict, `text verdict ${verdictClass(x.verdict)}`]],
      { "data-combo": x.combination, "data-verdict": x.verdict });
    for (const [key] of COMPARED) tr.append(x.figures[key] ? figureCell(x.figures[key], key) : Object.assign(document.createElement("td"), { textContent: "–" }));
    if (x.notes && x.notes.length) tr.title = x.notes.join("; ");
    return tr;
  }));
  const only = [];
  if (c.only_in_a.length) only.push(`only in A: ${c.only_in_a.join(", ")}`);
  if (c.only_in_b.length) only.push(`only in B: ${c.only_in_b.join(", ")}`);
  $("compare-only").textContent = only.join("; ");
  $("compare-noise").textContent = c.noise || "";
}

async function compareMarkdown() {
  const status = $("compare-status");
  try {
    const [a, b] = comparedRuns();
    await downloadBlob(`runs/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}?format=markdown`, `ayci-compare-${a.slice(0, 8)}-${b.slice(0, 8)}.md`);
  } catch (e) {
    status.textContent = e.message; status.classList.add("error");
  }
}

// ---------------------------------------------------------------- start
function start() {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("key")) {
    localStorage.setItem("ayci-api-key", hash.get("key"));
    hash.delete("key");
    history.replaceState(null, "", hash.toString() ? `#${hash}` : location.pathname + location.search);
  }
  $("api-key").value = localStorage.getItem("ayci-api-key") || "";
  $("api-key").addEventListener("change", () => localStorage.setItem("ayci-api-key", apiKey()));
  $("model-file").addEventListener("change", () => onModelChosen().catch((e) => status(e.message, true)));
  $("memory-add-common").addEventListener("click", () => addMemory($("memory-common").value));
  $("traffic-button").addEventListener("click", () => simulateTraffic());
  $("profiles-refresh").addEventListener("click", () => loadProfiles());
  $("memory-add-all").addEventListener("click", () => [...$("memory-common").options].forEach((o) => addMemory(o.value)));
  $("memory-add-free").addEventListener("click", () => { addMemory($("memory-free").value); $("memory-free").value = ""; });
  $("memory-free").addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); $("memory-add-free").click(); } });
  $("run-form").addEventListener("submit", onSubmit);
  $("plan-button").addEventListener("click", onPlan);
  $("plan-drop").addEventListener("click", () => dropImpossible().catch((e) => status(e.message, true)));
  $("cancel-run").addEventListener("click", async () => {
    if (!state.runId || !confirm(`Cancel run ${state.runId}? Pending combinations fail as cancelled.`)) return;
    $("cancel-run").disabled = true;
    try {
      await api(`runs/${state.runId}`, { method: "DELETE" });
      status(`run ${state.runId}: cancelled`);
    } catch (error) {
      status(error.message, true);
    } finally {
      $("cancel-run").disabled = false;
    }
  });
  $("download-csv").addEventListener("click", () => download("csv").catch((e) => status(e.message, true)));
  $("download-json").addEventListener("click", () => download("json").catch((e) => status(e.message, true)));
  $("download-export").addEventListener("click", () => exportFunction());
  $("compare-button").addEventListener("click", () => compareRuns());
  $("compare-markdown").addEventListener("click", () => compareMarkdown());
  renderKnownRuns();
  renderMemoryChips();
  if (hash.get("run") && apiKey()) follow(hash.get("run"));
}

start();
